/*
 * tests/plugins/hostile_nb.c - a library that reaches for another
 * session's worker, by pid, with the calls that change how the kernel
 * treats a process (tests/test_neighbours.c; server/worker/neighbours.c).
 *
 * Each op: 1 input (ignored), 1 output f64 of at least NB_OUT elements;
 * out[i] is 0 (or the call's non-negative result) when call i succeeded,
 * -errno when it failed.  The op returns 0 either way: the test decides.
 *
 *   nb_poke   attr pid: the target.
 *             0 setpriority(PRIO_PROCESS, pid, 19)
 *             1 sched_setscheduler(pid, SCHED_IDLE)
 *             2 sched_setaffinity(pid, {the first CPU the caller has})
 *             3 ioprio_set(IOPRIO_WHO_PROCESS, pid, idle class)
 *             4 prlimit(pid, RLIMIT_CPU, 1 s)
 *             5 sched_setparam(pid, priority 0)
 *             6 sched_setattr(pid, SCHED_IDLE)
 *             7 setpriority(PRIO_USER, 0, 19): every process of the uid
 *             8 ioprio_set(IOPRIO_WHO_USER, getuid(), idle class)
 *             9 setpriority(PRIO_PGRP, pid, 19): the target's group
 *            10 prlimit(pid, RLIMIT_NOFILE, read only)
 *            11 getpriority(PRIO_PROCESS, pid) (20 - nice when it succeeds)
 *            12 kill(pid, 0)
 *            13 pidfd_open(pid) (1 when it succeeds)
 *            14 sched_getaffinity(pid)
 *            15 tgkill(pid, pid, 0)
 *   nb_self   the same kinds of calls on the caller itself, each setting
 *             what is already set (no change):
 *             0 setpriority(PRIO_PROCESS, 0, its nice)
 *             1 setpriority(PRIO_PROCESS, getpid(), its nice)
 *             2 sched_setaffinity(0, its mask)
 *             3 sched_setaffinity(getpid(), its mask)
 *             4 prlimit(0, RLIMIT_CPU, read)   5 prlimit(getpid(), RLIMIT_CPU, its limit)
 *             6 ioprio_set(IOPRIO_WHO_PROCESS, 0, its class)
 *             7 kill(getpid(), 0)               8 sched_setscheduler(0, SCHED_OTHER)
 *             9 a thread of its own: sched_setaffinity(0, its mask)
 *            10 a thread of its own: sched_setaffinity(gettid(), its mask)
 *            11 setrlimit(RLIMIT_CPU, its limit) (glibc: prlimit64 with pid 0)
 */
#include <errno.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_nb", "1.0");

#define NB_OUT 16

#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_WHO_USER 3
#define IOPRIO_IDLE ((3 << 13) | 0)

/* struct sched_attr as the kernel reads it (the first version, 48 bytes). */
struct nb_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
};

static const mxop_host_t *host;

/* A call's result as the test reads it: the value, or -errno. */
static double res(long rc)
{
    return rc < 0 ? -(double)errno : (double)rc;
}

static int start(mxop_ctx_t *ctx, int n_out, mxop_tensor_t *out, double **r)
{
    if (n_out < 1 || out[0].size < NB_OUT)
        return host->set_error(ctx, MXOP_EATTR, "hostile_nb: the output needs %d elements", NB_OUT);
    *r = out[0].data;
    for (int i = 0; i < NB_OUT; i++)
        (*r)[i] = 0;
    return 0;
}

static int nb_poke(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    double *r;
    int rc = start(ctx, n_out, out, &r);
    if (rc != 0)
        return rc;
    const char *a = host->attr_get(ctx, "pid");
    if (a == NULL || atoi(a) <= 0)
        return host->set_error(ctx, MXOP_EATTR, "nb_poke: needs the attribute pid");
    pid_t pid = (pid_t)atoi(a);

    struct sched_param sp = {.sched_priority = 0};
    cpu_set_t mine, one;
    CPU_ZERO(&one);
    if (sched_getaffinity(0, sizeof(mine), &mine) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine)) {
                CPU_SET(c, &one);
                break;
            }
    struct rlimit one_s = {.rlim_cur = 1, .rlim_max = 1}, old;
    struct nb_sched_attr at = {.size = sizeof(at), .sched_policy = SCHED_IDLE};
    cpu_set_t theirs;

    r[0] = res(setpriority(PRIO_PROCESS, (id_t)pid, 19));
    r[1] = res(sched_setscheduler(pid, SCHED_IDLE, &sp));
    r[2] = res(sched_setaffinity(pid, sizeof(one), &one));
    r[3] = res(syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, pid, IOPRIO_IDLE));
    r[4] = res(prlimit(pid, RLIMIT_CPU, &one_s, NULL));
    r[5] = res(sched_setparam(pid, &sp));
    r[6] = res(syscall(SYS_sched_setattr, pid, &at, 0));
    r[7] = res(setpriority(PRIO_USER, 0, 19));
    r[8] = res(syscall(SYS_ioprio_set, IOPRIO_WHO_USER, (int)getuid(), IOPRIO_IDLE));
    r[9] = res(setpriority(PRIO_PGRP, (id_t)pid, 19));
    r[10] = res(prlimit(pid, RLIMIT_NOFILE, NULL, &old));
    errno = 0;
    long prio = syscall(SYS_getpriority, PRIO_PROCESS, pid); /* the raw call: 20 - nice */
    r[11] = res(prio);
    r[12] = res(kill(pid, 0));
    long pfd = syscall(SYS_pidfd_open, pid, 0);
    r[13] = pfd >= 0 ? 1 : -(double)errno;
    if (pfd >= 0)
        close((int)pfd);
    r[14] = res(sched_getaffinity(pid, sizeof(theirs), &theirs));
    r[15] = res(syscall(SYS_tgkill, pid, pid, 0));
    return 0;
}

/* Thread: the same affinity set on itself by 0 (out[0]) and by its tid (out[1]). */
static void *self_thread(void *arg)
{
    double *r = arg;
    cpu_set_t m;
    if (sched_getaffinity(0, sizeof(m), &m) != 0) {
        r[0] = r[1] = -(double)errno;
        return NULL;
    }
    r[0] = res(sched_setaffinity(0, sizeof(m), &m));
    r[1] = res(sched_setaffinity((pid_t)syscall(SYS_gettid), sizeof(m), &m));
    return NULL;
}

static int nb_self(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    double *r;
    int rc = start(ctx, n_out, out, &r);
    if (rc != 0)
        return rc;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    cpu_set_t m;
    struct rlimit cpu;
    sched_getaffinity(0, sizeof(m), &m);
    getrlimit(RLIMIT_CPU, &cpu);
    long io = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
    struct sched_param sp = {.sched_priority = 0};

    r[0] = res(setpriority(PRIO_PROCESS, 0, nice));
    r[1] = res(setpriority(PRIO_PROCESS, (id_t)getpid(), nice));
    r[2] = res(sched_setaffinity(0, sizeof(m), &m));
    r[3] = res(sched_setaffinity(getpid(), sizeof(m), &m));
    struct rlimit got;
    r[4] = res(prlimit(0, RLIMIT_CPU, NULL, &got));
    r[5] = res(prlimit(getpid(), RLIMIT_CPU, &cpu, NULL));
    r[6] = io < 0 ? -(double)errno : res(syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, (int)io));
    r[7] = res(kill(getpid(), 0));
    r[8] = res(sched_setscheduler(0, SCHED_OTHER, &sp));
    pthread_t t;
    double tr[2] = {0, 0};
    if (pthread_create(&t, NULL, self_thread, tr) == 0) {
        pthread_join(t, NULL);
        r[9] = tr[0];
        r[10] = tr[1];
    } else {
        r[9] = r[10] = -1000;
    }
    r[11] = res(setrlimit(RLIMIT_CPU, &cpu));
    return 0;
}

static int nb_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                          mxop_shape_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    out[0].ndim = 1;
    out[0].dims[0] = NB_OUT;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {{"nb_poke", nb_poke}, {"nb_self", nb_self}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = "reaches for another worker by pid",
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].fn,
            .infer_shape = nb_infer_shape,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    return 0;
}
