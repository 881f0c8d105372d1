/*
 * server/worker/fault.c - naming the input an op wrote into.
 *
 * Inputs are mapped read-only, so an op that writes one takes a SIGSEGV.
 * The handler finds which input the faulting address belongs to and leaves
 * a note in the status page ("op 'x' wrote into read-only input 0") for
 * the daemon to report; then it returns, the handler having been reset to
 * the default action (SA_RESETHAND), so the faulting instruction runs
 * again and the worker dies by the signal as it would have anyway.
 *
 * Everything here is async-signal-safe: no stdio, no malloc, digits by hand.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "server/worker/worker.h"

/*
 * The call in flight.  Written by the main flow with the handler disarmed,
 * published by `armed`; signal fences keep the compiler from reordering.
 */
static const char *armed_op;
static const mxop__fault_range_t *armed_ranges;
static int armed_n;
static volatile sig_atomic_t armed;

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

static void on_fault(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    /*
     * A signal sent with kill() has no faulting instruction to run again:
     * raise it once more (now with the default action) so it still kills.
     */
    if (si->si_code <= 0) {
        raise(sig);
        return;
    }
    mxop__status_page_t *page = mxop__status_page();
    if (!armed || page == NULL)
        return;
    int input = which_input((uintptr_t)si->si_addr);
    if (input < 0)
        return;
    char *m = page->fault_msg;
    size_t at = 0, cap = MXOP__STATUS_MSG_MAX;
    at = put(m, at, cap, "op '");
    at = put(m, at, cap, armed_op != NULL ? armed_op : "?");
    at = put(m, at, cap, "' wrote into read-only input ");
    at = put_uint(m, at, cap, (unsigned)input);
    m[at] = '\0';
    /* The note is complete before the code says there is one. */
    atomic_store_explicit(&page->fault_code, MXOP_EINPUT_WRITTEN, memory_order_release);
}

int mxop__fault_install(void)
{
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
    if (sigaction(SIGSEGV, &sa, NULL) != 0 || sigaction(SIGBUS, &sa, NULL) != 0)
        return -errno;
    return 0;
}
