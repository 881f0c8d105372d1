/*
 * server/worker/fault.c - saying why the worker died, from its signal handler.
 *
 * The worker dies of a fault as it would anyway; on the way the handler
 * leaves a note in the status page (a code and a sentence) for the daemon
 * to report instead of a bare signal number:
 *
 *   - an op that wrote into one of its inputs (mapped read-only, so the
 *     store faults): MXOP_EINPUT_WRITTEN, "op 'x' wrote into read-only
 *     input 0";
 *   - a stack overflow: a SIGSEGV whose address lies within 64 KiB of the
 *     stack pointer of the interrupted code (a NULL or wild pointer lies
 *     far from it), handled on the alternate stack: MXOP_EWORKER_CRASHED,
 *     "stack overflow ...";
 *   - memory exhaustion: a SIGSEGV, SIGBUS or SIGABRT while the worker has
 *     almost nothing left of the sandbox's memory limit (RLIMIT_DATA).  A
 *     failed malloc() cannot be seen from here, but its consequences can:
 *     the NULL an op did not check, the std::bad_alloc that ends in
 *     abort().  The handler asks the kernel for a mapping of an eighth of
 *     the ops' budget (at least 64 MiB, at most 1 GiB); if that is refused,
 *     the worker was at its limit when it died: MXOP_EWORKER_OOM, with
 *     the limit named.  A crash with memory to spare is not called OOM;
 *     a death by SIGKILL (the kernel's OOM killer) cannot be noted here
 *     and is reported as the signal it is;
 *   - a SIGBUS otherwise: memory with no backing (a truncated file).
 *
 * Whatever the note, a real fault (not a kill()) also leaves a backtrace
 * of the faulting thread in the page (below), symbolised where the
 * dynamic symbol table allows.
 *
 * Then it returns, the handler having been reset to the default action
 * (SA_RESETHAND), so the faulting instruction runs again (abort() raises
 * again) and the worker dies by the signal.  A worker that is pid 1 of its
 * pid namespace (server/daemon/worker/spawn.c) cannot die by a signal it sends
 * itself (the kernel ignores it): for those (abort(), raise(), kill()) it
 * exits with MXOP__W_EXIT_SIGNAL + the signal instead, which the daemon
 * maps back; a real fault is forced by the kernel and kills pid 1 too.
 * As pid 1 it also catches SIGFPE and SIGILL, for the same reason.
 *
 * Everything here is async-signal-safe (no stdio, no malloc, digits by
 * hand) except the backtrace, which is as safe as it can be made: glibc's
 * backtrace() is called once at installation, so that libgcc's unwinder
 * is loaded then and not from the handler (the first call would dlopen
 * it), and frames go into a static array; dladdr() names each frame from
 * the loaded objects' dynamic symbols (a static function shows as
 * "lib.so+0xoffset", for addr2line).  dladdr() takes the dynamic loader's
 * lock: a fault while another thread holds it (inside dlopen) could block
 * the handler, so an alarm of 2 s bounds it, and the worker then dies of
 * SIGALRM instead, which the daemon reports as the signal it is.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "server/worker/sandbox.h"
#include "server/worker/worker.h"
#include "shm/worker_exit.h"

/*
 * The call in flight.  Written by the main flow with the handler disarmed,
 * published by `armed`; signal fences keep the compiler from reordering.
 */
static const char *armed_op;
static const mxop__fault_range_t *armed_ranges;
static int armed_n;
static volatile sig_atomic_t armed;
/* pid 1 of its own pid namespace: self-sent signals must become an exit status. */
static int is_init;

/* A stack of its own, so that a stack overflow in an op is reported too. */
static _Alignas(64) unsigned char alt_stack[64 * 1024];

void mxop__fault_arm(const char *op, int n, const mxop__fault_range_t *ranges)
{
    armed = 0;
    atomic_signal_fence(memory_order_seq_cst);
    armed_op = op;
    armed_ranges = ranges;
    armed_n = n;
    atomic_signal_fence(memory_order_seq_cst);
    armed = 1;
}

void mxop__fault_disarm(void)
{
    armed = 0;
    atomic_signal_fence(memory_order_seq_cst);
}

static size_t put(char *dst, size_t at, size_t cap, const char *s)
{
    while (*s != '\0' && at + 1 < cap)
        dst[at++] = *s++;
    return at;
}

static size_t put_uint(char *dst, size_t at, size_t cap, unsigned v)
{
    char digits[12];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0 && at + 1 < cap)
        dst[at++] = digits[--n];
    return at;
}

/* The input whose bytes, or failing that whose region, contain `addr`; -1 if none. */
static int which_input(uintptr_t addr)
{
    for (int i = 0; i < armed_n; i++)
        if (addr >= armed_ranges[i].tensor &&
            addr - armed_ranges[i].tensor < armed_ranges[i].tensor_len)
            return armed_ranges[i].input;
    for (int i = 0; i < armed_n; i++)
        if (addr >= armed_ranges[i].region &&
            addr - armed_ranges[i].region < armed_ranges[i].region_len)
            return armed_ranges[i].input;
    return -1;
}

static size_t put_hex(char *dst, size_t at, size_t cap, uintptr_t v)
{
    char digits[2 * sizeof(v)];
    int n = 0;
    do {
        digits[n++] = "0123456789abcdef"[v & 15u];
        v >>= 4;
    } while (v != 0);
    at = put(dst, at, cap, "0x");
    while (n > 0 && at + 1 < cap)
        dst[at++] = digits[--n];
    return at;
}

/* The stack pointer of the interrupted code, or 0 where this port does not know it. */
static uintptr_t interrupted_sp(const void *uctx)
{
    const ucontext_t *uc = uctx;
    if (uc == NULL)
        return 0;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.sp;
#else
    return 0;
#endif
}

#define STACK_SLACK ((uintptr_t)64 * 1024)

static int is_stack_overflow(const siginfo_t *si, const void *uctx)
{
    uintptr_t sp = interrupted_sp(uctx);
    uintptr_t addr = (uintptr_t)si->si_addr;
    return sp != 0 && addr + STACK_SLACK >= sp && addr <= sp + STACK_SLACK;
}

/*
 * The mapping the handler asks for: what an op near its limit cannot have.
 * An eighth of the budget ops were given (the limit itself also counts
 * what the worker used at start, which under a sanitizer is terabytes).
 */
static size_t headroom_probe(void)
{
    uint64_t p = (mxop__sandbox_memory_mb() << 20) / 8;
    if (p < ((uint64_t)64 << 20))
        p = (uint64_t)64 << 20;
    if (p > ((uint64_t)1 << 30))
        p = (uint64_t)1 << 30;
    return (size_t)p;
}

/* True when the worker could not map headroom_probe() more private memory. */
static int near_memory_limit(void)
{
    uint64_t limit = mxop__sandbox_memory_limit();
    if (limit == 0)
        return 0;
    size_t probe = headroom_probe();
    /* Reserved, never touched: it costs no memory, only the accounting that RLIMIT_DATA does. */
    void *p = mmap(NULL, probe, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, probe);
        return 0;
    }
    return errno == ENOMEM;
}

/* The program counter of the interrupted code, or 0 where this port does not know it. */
static uintptr_t interrupted_pc(const void *uctx)
{
    const ucontext_t *uc = uctx;
    if (uc == NULL)
        return 0;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    return 0;
#endif
}

#define BT_FRAMES 32
#define BT_SHOWN 8

static void *bt_pcs[BT_FRAMES];

/* One frame: "name+0xoff (object)", "object+0xoff" without a symbol, or the bare address. */
static size_t put_frame(char *m, size_t at, size_t cap, uintptr_t pc, int exact)
{
    Dl_info info;
    /* A return address may lie just past its caller's end: look up the call itself. */
    uintptr_t look = exact ? pc : pc - 1;
    if (dladdr((void *)look, &info) == 0 || info.dli_fname == NULL) {
        return put_hex(m, at, cap, pc);
    }
    const char *fname = mxop__lib_path_of(info.dli_fname);
    if (fname == NULL)
        fname = info.dli_fname;
    const char *base = fname;
    for (const char *p = fname; *p != '\0'; p++)
        if (*p == '/')
            base = p + 1;
    if (info.dli_sname != NULL && info.dli_saddr != NULL) {
        at = put(m, at, cap, info.dli_sname);
        at = put(m, at, cap, "+");
        at = put_hex(m, at, cap, pc - (uintptr_t)info.dli_saddr);
        at = put(m, at, cap, " (");
        at = put(m, at, cap, base[0] != '\0' ? base : "?");
        return put(m, at, cap, ")");
    }
    at = put(m, at, cap, base[0] != '\0' ? base : "?");
    at = put(m, at, cap, "+");
    return put_hex(m, at, cap, pc - (uintptr_t)info.dli_fbase);
}

/*
 * The faulting thread's frames into the page, innermost first, starting at
 * the interrupted instruction (the handler's own frames and the signal
 * trampoline are left out).
 */
static void write_backtrace(mxop__status_page_t *page, const void *uctx)
{
    char *m = page->backtrace;
    size_t at = 0, cap = MXOP__STATUS_BT_MAX;
    int n = backtrace(bt_pcs, BT_FRAMES);
    uintptr_t pc = interrupted_pc(uctx);
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if ((uintptr_t)bt_pcs[i] == pc)
            first = i;
    if (first < 0 && pc != 0) {
        /* The unwinder did not cross the signal frame: the faulting instruction alone. */
        bt_pcs[0] = (void *)pc;
        n = 1;
        first = 0;
    } else if (first < 0) {
        first = n > 2 ? 2 : 0;
    }
    unsigned prev = alarm(2);
    for (int i = first; i < n && i < first + BT_SHOWN; i++) {
        if (i > first)
            at = put(m, at, cap, " < ");
        at = put_frame(m, at, cap, (uintptr_t)bt_pcs[i], i == first);
    }
    alarm(prev);
    m[at] = '\0';
}

/* The note is complete before the code says there is one. */
static void publish(mxop__status_page_t *page, int code)
{
    atomic_store_explicit(&page->fault_code, code, memory_order_release);
}

void mxop__fault_note(int code, const char *msg)
{
    mxop__status_page_t *page = mxop__status_page();
    if (page == NULL)
        return;
    size_t at = put(page->fault_msg, 0, MXOP__STATUS_MSG_MAX, msg);
    page->fault_msg[at] = '\0';
    publish(page, code);
}

static void on_fault(int sig, siginfo_t *si, void *uctx)
{
    int saved_errno = errno;
    /*
     * A signal sent with kill() has no faulting instruction to run again:
     * raise it once more (now with the default action) so it still kills.
     * abort() sends SIGABRT to itself, and is looked at like a fault.
     */
    if (si->si_code <= 0 && sig != SIGABRT) {
        if (is_init)
            _exit(MXOP__W_EXIT_SIGNAL + sig);
        raise(sig);
        return;
    }
    mxop__status_page_t *page = mxop__status_page();
    if (page == NULL) {
        if (is_init && si->si_code <= 0)
            _exit(MXOP__W_EXIT_SIGNAL + sig);
        return;
    }
    char *m = page->fault_msg;
    size_t at = 0, cap = MXOP__STATUS_MSG_MAX;

    int input = armed && sig == SIGSEGV ? which_input((uintptr_t)si->si_addr) : -1;
    if (input >= 0) {
        at = put(m, at, cap, "op '");
        at = put(m, at, cap, armed_op != NULL ? armed_op : "?");
        at = put(m, at, cap, "' wrote into read-only input ");
        at = put_uint(m, at, cap, (unsigned)input);
        m[at] = '\0';
        publish(page, MXOP_EINPUT_WRITTEN);
    } else if (sig == SIGSEGV && is_stack_overflow(si, uctx)) {
        at = put(m, at, cap, "stack overflow (fault at ");
        at = put_hex(m, at, cap, (uintptr_t)si->si_addr);
        at = put(m, at, cap, ", next to the stack pointer; unbounded recursion or a huge local?)");
        m[at] = '\0';
        publish(page, MXOP_EWORKER_CRASHED);
    } else if (near_memory_limit()) {
        at = put(m, at, cap, "out of memory: the worker had less than ");
        at = put_uint(m, at, cap, (unsigned)(headroom_probe() >> 20));
        at = put(m, at, cap, " MiB left of its memory limit (");
        at = put_uint(m, at, cap, (unsigned)mxop__sandbox_memory_mb());
        at = put(m, at, cap, " MiB for ops, --worker-memory-mb) when it died");
        m[at] = '\0';
        publish(page, MXOP_EWORKER_OOM);
    } else if (sig == SIGBUS) {
        at = put(m, at, cap, "bus error at ");
        at = put_hex(m, at, cap, (uintptr_t)si->si_addr);
        at = put(m, at, cap, ": memory with nothing behind it (a truncated file or region?)");
        m[at] = '\0';
        publish(page, MXOP_EWORKER_CRASHED);
    }
    write_backtrace(page, uctx);
    if (is_init && si->si_code <= 0)
        _exit(MXOP__W_EXIT_SIGNAL + sig);
    errno = saved_errno;
}

int mxop__fault_install(void)
{
    /* Loads the unwinder now, not from the handler (see the top of this file). */
    void *warm[2];
    (void)backtrace(warm, 2);

    stack_t ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof(alt_stack);
    if (sigaltstack(&ss, NULL) != 0)
        return -errno;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0 || sigaction(SIGBUS, &sa, NULL) != 0 ||
        sigaction(SIGABRT, &sa, NULL) != 0)
        return -errno;
    is_init = getpid() == 1;
    if (is_init && (sigaction(SIGFPE, &sa, NULL) != 0 || sigaction(SIGILL, &sa, NULL) != 0))
        return -errno;
    return 0;
}
