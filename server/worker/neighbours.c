/*
 * server/worker/neighbours.c - a worker's system calls that name a process
 * act on the worker itself only, where it shares the host's pid namespace.
 *
 * The kernel lets a process renice, reschedule, re-pin, change the I/O
 * class of and lower the limits of any process of its own uid.  A root
 * daemon gives each worker a uid of its own (server/daemon/worker/workeruid.c),
 * and then the kernel's uid checks keep these calls on the worker, its
 * threads included.  Where workers share a uid (--worker-uid, or a daemon
 * that is not root: they run as its uid, as do the daemon and its clients)
 * and the host's pid namespace (basic, the gpu profile, a daemon that is
 * not root, --sandbox-fallback), a library could put another session's
 * worker in SCHED_IDLE, move it to one CPU, or prlimit(RLIMIT_CPU) it so
 * that the kernel kills it in the middle of a call.  Landlock's scoping
 * does not cover these calls (they check the uid, not ptrace access).  A
 * strict worker of the cpu profile (as root) is pid 1 of a pid namespace
 * of its own and can name no process but its own and its children.
 *
 * So, where getpid() is not 1, a second seccomp filter (beside sandbox.c's)
 * refuses with EPERM the calls below whose pid is neither 0 (the caller)
 * nor the worker's own pid, so that the answer is the same whether that
 * pid exists or not:
 *
 *   acting (basic and strict, unless the uid is the worker's own):
 *   prlimit64, setpriority and ioprio_set (and those two only for one
 *   process or the worker's process group, never a user's every process),
 *   sched_setaffinity, sched_setscheduler, sched_setparam, sched_setattr,
 *   migrate_pages, move_pages;
 *   looking (strict, which promises that a worker does not see the host's
 *   processes; a uid of its own does not hide them): getpriority,
 *   ioprio_get, get_robust_list, getpgid, getsid, pidfd_open, kill (also
 *   -pid: the worker's own group), tkill, tgkill, rt_sigqueueinfo,
 *   rt_tgsigqueueinfo.  basic lists every host process in its /proc anyway.
 *   Not the sched_get* calls: glibc's pthread_getattr_np reads a thread's
 *   CPUs by its tid (sanitizers, garbage collectors and language runtimes
 *   call it on every thread they start) and fails when that is refused;
 *   so they still answer for any pid, which tells a library that a pid
 *   exists and changes nothing.
 *
 * The price, where the rules apply: a thread's id is not the worker's
 * pid, so these calls naming one of the worker's own threads by its tid
 * are refused too (pid 0 from the thread itself works):
 * pthread_setaffinity_np on another thread,
 * pthread_create with an affinity attribute (glibc sets it by tid and the
 * creation fails), pthread_setschedparam, and the worker's own widening of
 * its threads' CPUs after the mailbox kept it off its client's CPU
 * (shm/placement.c: those threads keep one CPU fewer).  A filter sees
 * numbers, not thread groups; a uid of its own per worker avoids the
 * acting half; docs/security.md says so.  ptrace, process_vm_*,
 * pidfd_getfd and kcmp are refused outright by sandbox.c, and signals and
 * /proc/<pid>/mem are Landlock's (scoping, kernel >= 6.12 for signals).
 *
 * libseccomp allows one comparison per argument in a rule, and "neither 0
 * nor the pid" needs two; so this filter is a short BPF program of its
 * own, which the kernel runs together with libseccomp's (the most
 * restrictive answer wins).  It compares the low 32 bits of each argument,
 * which are all the kernel reads of a pid_t.  A system call of another
 * architecture is left to libseccomp's filter, which kills it.
 */
#include "server/worker/neighbours.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Where the low 32 bits of argument i lie in struct seccomp_data. */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i) + 4))
#else
#define ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i)))
#endif

/* The constants of setpriority(2) and ioprio_set(2) for one process and for a process group. */
#define PRIO_ONE 0   /* PRIO_PROCESS */
#define PRIO_GRP 1   /* PRIO_PGRP */
#define IOPRIO_ONE 1 /* IOPRIO_WHO_PROCESS */
#define IOPRIO_GRP 2 /* IOPRIO_WHO_PGRP */

typedef struct rule {
    const char *name;
    int pid_arg;   /* the argument that names a process */
    int which_arg; /* -1, or the argument that must be one of which_ok */
    uint32_t which_ok[2];
    int group_ok; /* kill: -pid (the worker's own process group) too */
} rule_t;

static const rule_t acting[] = {
    {"prlimit64", 0, -1, {0, 0}, 0},
    {"setpriority", 1, 0, {PRIO_ONE, PRIO_GRP}, 0},
    {"ioprio_set", 1, 0, {IOPRIO_ONE, IOPRIO_GRP}, 0},
    {"sched_setaffinity", 0, -1, {0, 0}, 0},
    {"sched_setscheduler", 0, -1, {0, 0}, 0},
    {"sched_setparam", 0, -1, {0, 0}, 0},
    {"sched_setattr", 0, -1, {0, 0}, 0},
    {"migrate_pages", 0, -1, {0, 0}, 0},
    {"move_pages", 0, -1, {0, 0}, 0},
};

static const rule_t looking[] = {
    {"getpriority", 1, 0, {PRIO_ONE, PRIO_GRP}, 0},
    {"ioprio_get", 1, 0, {IOPRIO_ONE, IOPRIO_GRP}, 0},
    {"get_robust_list", 0, -1, {0, 0}, 0},
    {"getpgid", 0, -1, {0, 0}, 0},
    {"getsid", 0, -1, {0, 0}, 0},
    {"pidfd_open", 0, -1, {0, 0}, 0},
    {"kill", 0, -1, {0, 0}, 1},
    {"tkill", 0, -1, {0, 0}, 0},
    {"tgkill", 0, -1, {0, 0}, 0},
    {"rt_sigqueueinfo", 0, -1, {0, 0}, 0},
    {"rt_tgsigqueueinfo", 0, -1, {0, 0}, 0},
};

/* Instructions: 4 to dispatch, at most 10 a rule, 1 to allow the rest. */
#define MAX_INSNS (4 + 10 * (COUNT(acting) + COUNT(looking)) + 1)

typedef struct prog {
    struct sock_filter insn[MAX_INSNS];
    unsigned n;
} prog_t;

static void emit(prog_t *p, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k)
{
    struct sock_filter f = {code, jt, jf, k};
    p->insn[p->n++] = f;
}

/*
 * One rule: skipped unless the syscall number (in A) is its own; inside,
 * every path ends in a return, so A still holds the number for the next
 * rule.  Jumps count the instructions they skip.
 */
static void emit_rule(prog_t *p, const rule_t *r, int nr, uint32_t self)
{
    unsigned start = p->n;
    emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, (uint32_t)nr); /* jf set below */
    /* The instructions of the body, to place the two returns at its end. */
    unsigned body = (r->which_arg >= 0 ? 3u : 0u) + 1u + 2u + (r->group_ok ? 1u : 0u);
    unsigned deny = start + 1 + body; /* index of RET ERRNO; RET ALLOW follows */
    if (r->which_arg >= 0) {
        emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG_LO(r->which_arg));
        emit(p, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, r->which_ok[0]);
        emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)(deny - (p->n + 1)), r->which_ok[1]);
    }
    emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG_LO(r->pid_arg));
    emit(p, BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(deny + 1 - (p->n + 1)), 0, 0);
    emit(p, BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(deny + 1 - (p->n + 1)), 0, self);
    if (r->group_ok)
        emit(p, BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(deny + 1 - (p->n + 1)), 0, (uint32_t)-self);
    emit(p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
    emit(p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW);
    p->insn[start].jf = (uint8_t)(p->n - start - 1);
}

static void emit_rules(prog_t *p, const rule_t *rules, size_t n, uint32_t self)
{
    for (size_t i = 0; i < n; i++) {
        int nr = seccomp_syscall_resolve_name(rules[i].name);
        if (nr != __NR_SCMP_ERROR && nr >= 0)
            emit_rule(p, &rules[i], nr, self);
    }
}

int mxop__neighbours_apply(int strict, int own_uid, char *err, size_t errlen)
{
    if (getpid() == 1)
        return 0; /* a pid namespace of its own: no other process can be named */
    if (own_uid && !strict)
        return 0; /* the kernel's uid checks do it all */

    static prog_t p; /* about 2 KiB: off the stack */
    p.n = 0;
    uint32_t self = (uint32_t)getpid();
    emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)offsetof(struct seccomp_data, arch));
    emit(&p, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, seccomp_arch_native());
    emit(&p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW); /* libseccomp's filter kills these */
    emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)offsetof(struct seccomp_data, nr));
    if (!own_uid)
        emit_rules(&p, acting, COUNT(acting), self);
    if (strict)
        emit_rules(&p, looking, COUNT(looking), self);
    emit(&p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW);

    struct sock_fprog fp = {.len = (unsigned short)p.n, .filter = p.insn};
    /* Every thread, as sandbox.c's filter (libraries may have started some before main). */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fp) != 0) {
        mxop__fmt(err, errlen, "cannot load the seccomp filter for other processes' pids: %s",
                  strerror(errno));
        return MXOP_EINTERNAL;
    }
    return 0;
}
