/*
 * tests/test_neighbours.c - what one worker can do to another session's
 * worker, to the host's shared places and to its own channels, at each
 * sandbox level and profile (server/worker/neighbours.c, sandbox.c,
 * namespaces.c; docs/security.md, "Workers and their neighbours").
 *
 * A victim session runs relu; an attacker session loads
 * tests/plugins/hostile_nb.c and, given the victim's worker pid, tries to
 * renice it, put it in SCHED_IDLE, pin it to one CPU, give it the idle I/O
 * class, prlimit(RLIMIT_CPU) it, and the same through PRIO_USER and
 * IOPRIO_WHO_USER.  Each must fail (EPERM, or ESRCH where the pid is not
 * even visible) and leave the victim's nice, policy, CPUs, I/O priority
 * and limits as they were, its calls succeeding on the same worker.
 * tests/plugins/hostile_escape.c makes namespaces, fills /dev/shm, grows a
 * file and sends on its channels.  The tests run as root: each worker
 * then has a uid of its own (server/daemon/worker/workeruid.c), and the
 * neighbours_shared* suites give every worker one account (--worker-uid
 * 65534), where server/worker/neighbours.c's filter does the work (as for
 * a daemon that is not root).  The gpu profile is chosen with
 * --sandbox-profile gpu and needs no GPU.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

static void start(const char *const *args)
{
    /* A worker moves itself between CPUs around its client's calls (shm/placement.c): the
     * victim's CPU list must change only if the attack worked. */
    setenv("MXOP_PLACEMENT", "0", 1);
    mxt_daemon_start(&daemon_, args);
    /* A first session, so that the baselines count what the daemon keeps after one. */
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    char why[256];
    const char *bad = mxt_relu_calls(c, 1, 1, why, sizeof(why));
    cr_assert_null(bad, "%s", bad);
    mxop_close(c);
}

static void setup_strict(void)
{
    start(NULL);
}

static void setup_gpu(void)
{
    const char *args[] = {"--sandbox-profile", "gpu", NULL};
    start(args);
}

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    start(args);
}

/* Every worker as one account: the seccomp filter of neighbours.c stands in for the uid. */
static void setup_shared_basic(void)
{
    const char *args[] = {"--sandbox", "basic", "--worker-uid", "65534", NULL};
    start(args);
}

static void setup_shared_gpu(void)
{
    const char *args[] = {"--sandbox-profile", "gpu", "--worker-uid", "65534", NULL};
    start(args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(neighbours_strict, .init = setup_strict, .fini = teardown, .timeout = 60);
TestSuite(neighbours_gpu, .init = setup_gpu, .fini = teardown, .timeout = 60);
TestSuite(neighbours_basic, .init = setup_basic, .fini = teardown, .timeout = 60);
TestSuite(neighbours_shared, .init = setup_shared_basic, .fini = teardown, .timeout = 60);
TestSuite(neighbours_shared_gpu, .init = setup_shared_gpu, .fini = teardown, .timeout = 60);

#define NB_OUT 16

/* Runs op `name` of a hostile fixture with `attrs`; out[] gets what it found. */
static void run_op(mxop_client_t *c, const char *name, const char *const *attrs, double *out)
{
    int64_t s[] = {NB_OUT};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, name), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s: %s", name, mxop_err_name(rc), mxop_last_error(c));
    for (int i = 0; i < NB_OUT; i++)
        out[i] = mxt_get(&y, (size_t)i);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
}

/* ------------------------------------------------------------------------ */
/* Another session's worker */

/* What the kernel holds about a process that the attack would change. */
typedef struct state {
    long nice;
    long policy;
    long ioprio;
    char cpus[256];
    char cpu_limit[128];
    char fsize[128];
} state_t;

static void state_of(pid_t pid, state_t *s)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command (which may hold spaces): state is field 3. */
    char *p = strrchr(buf, ')');
    cr_assert(p != NULL);
    p += 2;
    long v[40];
    int k = 0;
    for (char *tok = strtok(p, " "); tok != NULL && k < 40; tok = strtok(NULL, " "))
        v[k++] = strtol(tok, NULL, 10);
    cr_assert(k >= 39, "short %s", path);
    s->nice = v[19 - 3];
    s->policy = v[41 - 3];
    errno = 0;
    s->ioprio = syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, pid);
    cr_assert(s->ioprio >= 0, "ioprio_get %d: %s", (int)pid, strerror(errno));
    cr_assert_eq(mxt_proc_field(pid, "status", "Cpus_allowed_list:", s->cpus, sizeof(s->cpus)), 0);
    cr_assert_eq(mxt_proc_field(pid, "limits", "Max cpu time", s->cpu_limit, sizeof(s->cpu_limit)),
                 0);
    cr_assert_eq(mxt_proc_field(pid, "limits", "Max file size", s->fsize, sizeof(s->fsize)), 0);
}

static void expect_same(const state_t *a, const state_t *b)
{
    cr_assert_eq(a->nice, b->nice, "the victim's nice changed: %ld -> %ld", a->nice, b->nice);
    cr_assert_eq(a->policy, b->policy, "the victim's policy changed: %ld -> %ld", a->policy,
                 b->policy);
    cr_assert_eq(a->ioprio, b->ioprio, "the victim's I/O priority changed: %ld -> %ld", a->ioprio,
                 b->ioprio);
    cr_assert_str_eq(a->cpus, b->cpus, "the victim's CPUs changed");
    cr_assert_str_eq(a->cpu_limit, b->cpu_limit, "the victim's RLIMIT_CPU changed");
}

static const char *const poke_names[NB_OUT] = {"setpriority",
                                               "sched_setscheduler(SCHED_IDLE)",
                                               "sched_setaffinity",
                                               "ioprio_set",
                                               "prlimit(RLIMIT_CPU)",
                                               "sched_setparam",
                                               "sched_setattr",
                                               "setpriority(PRIO_USER)",
                                               "ioprio_set(IOPRIO_WHO_USER)",
                                               "setpriority(PRIO_PGRP)",
                                               "prlimit (read)",
                                               "getpriority",
                                               "kill(pid, 0)",
                                               "pidfd_open",
                                               "sched_getaffinity",
                                               "tgkill(pid, pid, 0)"};

/*
 * The attack.  `look`: the calls that only read or probe (10..15) must be
 * refused too (strict; basic lists every process in /proc anyway).
 * `own`: PRIO_USER and IOPRIO_WHO_USER reach only the attacker itself, so
 * they may succeed (a uid of its own, or a pid namespace of its own where
 * it sees nothing else); the victim's state, checked below, shows they
 * went nowhere.
 */
static void neighbour_cannot_act(int look, int own)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    const char *vlibs[] = {"relu.so", NULL};
    mxop_client_t *victim = mxt_connect_with(&daemon_, vlibs);
    char why[256];
    const char *bad = mxt_relu_calls(victim, 2, 2, why, sizeof(why));
    cr_assert_null(bad, "%s", bad);
    pid_t v = mxt_worker_pid(victim);
    state_t before, after;
    state_of(v, &before);

    const char *alibs[] = {"hostile_nb.so", NULL};
    mxop_client_t *attacker = mxt_connect_with(&daemon_, alibs);
    char pid_s[24];
    snprintf(pid_s, sizeof(pid_s), "%d", (int)v);
    const char *attrs[] = {"pid", pid_s, NULL};
    double r[NB_OUT];
    run_op(attacker, "nb_poke", attrs, r);
    /* 14, sched_getaffinity, answers for any pid (neighbours.c says why). */
    for (int i = 0; i < (look ? NB_OUT : 10); i++)
        if (!(own && (i == 7 || i == 8)) && i != 14)
            cr_expect(r[i] == -EPERM || r[i] == -ESRCH,
                      "%s on another session's worker (pid %d): %g, expected -EPERM or -ESRCH",
                      poke_names[i], (int)v, r[i]);

    /* The victim: as it was, still serving on the same worker. */
    state_of(v, &after);
    expect_same(&before, &after);
    bad = mxt_relu_calls(victim, 3, 20, why, sizeof(why));
    cr_assert_null(bad, "%s", bad);
    cr_assert_eq(mxt_worker_pid(victim), v, "the victim's worker was replaced");
    mxop_close(attacker);
    mxop_close(victim);
    cr_assert(mxt_daemon_alive(&daemon_));
    mxt_other_session_correct(&daemon_);
    mxt_baseline_expect(&base);
}

Test(neighbours_basic, another_sessions_worker_cannot_be_reniced_pinned_or_limited)
{
    neighbour_cannot_act(0, 1);
}

Test(neighbours_strict, another_sessions_worker_cannot_be_reached_by_pid)
{
    neighbour_cannot_act(1, 1);
}

Test(neighbours_gpu, another_sessions_worker_cannot_be_reached_by_pid)
{
    neighbour_cannot_act(1, 1);
}

Test(neighbours_shared, another_sessions_worker_cannot_be_reniced_pinned_or_limited)
{
    neighbour_cannot_act(0, 0);
}

Test(neighbours_shared_gpu, another_sessions_worker_cannot_be_reached_by_pid)
{
    neighbour_cannot_act(1, 0);
}

/* The uid of a worker's process, from the kernel's account. */
static unsigned uid_of(pid_t pid)
{
    char v[128];
    cr_assert_eq(mxt_proc_field(pid, "status", "Uid:", v, sizeof(v)), 0);
    return (unsigned)strtoul(v, NULL, 10);
}

/* As root with no --worker-uid, each worker (live or spare) a uid of its own from the range. */
Test(neighbours_basic, each_worker_has_a_uid_of_its_own)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    mxop_client_t *b = mxt_connect_with(&daemon_, libs);
    unsigned ua = uid_of(mxt_worker_pid(a)), ub = uid_of(mxt_worker_pid(b));
    cr_assert_neq(ua, ub, "two sessions' workers share uid %u", ua);
    const unsigned first = 1836580864u; /* workeruid.h's range */
    cr_assert(ua >= first && ua < first + 4096 && ub >= first && ub < first + 4096,
              "uids %u and %u are not of the daemon's range", ua, ub);
    /* The spares too: every child of the daemon has a uid no other child has. */
    mxt_sleep_ms(300);
    pid_t kids[16];
    int n = mxt_children(daemon_.pid, kids, 16);
    cr_assert(n >= 2, "%d workers", n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            cr_assert_neq(uid_of(kids[i]), uid_of(kids[j]), "workers %d and %d share a uid",
                          (int)kids[i], (int)kids[j]);
    mxop_close(a);
    mxop_close(b);
}

/*
 * The same kinds of calls on the worker itself keep working, by 0 and by
 * its pid; a thread's own tid is refused where the pid namespace is the
 * host's (`tid_refused`), the documented price of a filter that sees
 * numbers.
 */
static void own_calls_work(int tid_refused)
{
    const char *libs[] = {"hostile_nb.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    double r[NB_OUT];
    run_op(c, "nb_self", NULL, r);
    static const char *const names[] = {"setpriority(0)",
                                        "setpriority(getpid())",
                                        "sched_setaffinity(0)",
                                        "sched_setaffinity(getpid())",
                                        "prlimit(0) read",
                                        "prlimit(getpid()) set",
                                        "ioprio_set(0)",
                                        "kill(getpid(), 0)",
                                        "sched_setscheduler(0)",
                                        "a thread's sched_setaffinity(0)",
                                        NULL,
                                        "setrlimit(RLIMIT_CPU)"};
    for (int i = 0; i < 12; i++)
        if (names[i] != NULL)
            cr_expect_eq(r[i], 0, "%s on itself: %g", names[i], r[i]);
    if (tid_refused)
        cr_expect_eq(r[10], -EPERM, "a thread's sched_setaffinity(its tid): %g", r[10]);
    else
        cr_expect_eq(r[10], 0, "a thread's sched_setaffinity(its tid): %g", r[10]);
    mxop_close(c);
}

Test(neighbours_basic, its_own_process_is_still_its_own)
{
    own_calls_work(0); /* a uid of its own: the kernel decides, threads included */
}

Test(neighbours_strict, its_own_process_is_still_its_own)
{
    own_calls_work(0); /* pid 1 of its own namespace: no filter needed */
}

Test(neighbours_gpu, its_own_process_is_still_its_own)
{
    own_calls_work(0);
}

Test(neighbours_shared, its_own_process_is_still_its_own)
{
    own_calls_work(1); /* the filter sees a number: a thread's tid is refused */
}

Test(neighbours_shared_gpu, its_own_process_is_still_its_own)
{
    own_calls_work(1);
}

/* ------------------------------------------------------------------------ */
/* Namespaces of a library's own */

static void clone_new_namespaces_refused(int fork_allowed)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    const char *libs[] = {"hostile_escape.so", "relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    double r[NB_OUT];
    run_op(c, "esc_clone", NULL, r);
    cr_expect_eq(r[0], -EPERM, "clone(CLONE_NEWUSER): %g", r[0]);
    cr_expect_eq(r[1], -EPERM, "clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET): %g", r[1]);
    cr_expect_eq(r[2], -ENOSYS, "clone3(CLONE_NEWUSER): %g (ENOSYS sends glibc to clone)", r[2]);
    cr_expect_eq(r[3], fork_allowed ? 0 : -EPERM, "clone(SIGCHLD), a plain fork: %g", r[3]);
    cr_expect_eq(r[4], -EPERM, "unshare(CLONE_NEWUSER): %g", r[4]);
    char why[256];
    const char *bad = mxt_relu_calls(c, 4, 2, why, sizeof(why));
    cr_assert_null(bad, "%s", bad);
    cr_assert_eq(mxt_worker_pid(c), w);
    mxop_close(c);
    mxt_other_session_correct(&daemon_);
    mxt_baseline_expect(&base);
}

Test(neighbours_basic, clone_with_new_namespaces_refused)
{
    clone_new_namespaces_refused(1);
}

Test(neighbours_strict, clone_with_new_namespaces_refused)
{
    clone_new_namespaces_refused(0);
}

/* ------------------------------------------------------------------------ */
/* /dev/shm and file sizes */

Test(neighbours_basic, dev_shm_is_private_capped_and_gone_with_the_worker)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    char name[64], host_path[128];
    snprintf(name, sizeof(name), "mxt-neighbours-%d", (int)getpid());
    snprintf(host_path, sizeof(host_path), "/dev/shm/%s", name);
    const char *libs[] = {"hostile_escape.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    double r[NB_OUT];
    const char *small[] = {"name", name, "mb", "8", NULL};
    run_op(c, "esc_shm", small, r);
    cr_expect_eq(r[0], 0, "writing 8 MiB into /dev/shm: %g", r[0]);
    cr_expect_eq(r[1], 8);
    cr_expect(r[2] > 0 && r[2] <= 64, "the worker's /dev/shm holds %g MiB, expected at most 64",
              r[2]);
    /* Written in the worker's own /dev/shm: the host's never had it. */
    int on_host = access(host_path, F_OK) == 0;
    if (on_host)
        unlink(host_path); /* what the old code left behind */
    cr_expect(!on_host, "%s reached the host's /dev/shm", host_path);

    /*
     * Its own tmpfs, mounted in its own mount namespace (not the host's), which the kernel
     * takes down with the last process in it: the worker and what it started, killed with it.
     */
    char path[64], buf[16384];
    snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)w);
    FILE *f = fopen(path, "re");
    cr_assert(f != NULL);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cr_expect(strstr(buf, " /dev/shm ") != NULL && strstr(buf, "mxop-shm") != NULL,
              "no private tmpfs on the worker's /dev/shm: %s", buf);
    f = fopen("/proc/self/mountinfo", "re");
    cr_assert(f != NULL);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cr_expect(strstr(buf, "mxop-shm") == NULL, "the worker's /dev/shm is mounted on the host");

    /* Past the cap the write stops (ENOSPC); the worker serves on. */
    char big_name[64];
    snprintf(big_name, sizeof(big_name), "mxt-neighbours-big-%d", (int)getpid());
    const char *big[] = {"name", big_name, "mb", "200", NULL};
    run_op(c, "esc_shm", big, r);
    cr_expect_eq(r[0], -ENOSPC, "writing 200 MiB into /dev/shm: %g", r[0]);
    cr_expect(r[1] < 64, "%g MiB written", r[1]);
    snprintf(host_path, sizeof(host_path), "/dev/shm/%s", big_name);
    unlink(host_path); /* only where the old code wrote it into the host's */
    cr_assert_eq(mxt_worker_pid(c), w);

    mxop_close(c);
    mxt_other_session_correct(&daemon_);
    mxt_baseline_expect(&base);
}

static void file_size_limited(void)
{
    const char *libs[] = {"hostile_escape.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    char v[128];
    cr_assert_eq(mxt_proc_field(w, "limits", "Max file size", v, sizeof(v)), 0);
    cr_expect(strncmp(v, "1073741824           1073741824", 31) == 0, "Max file size: '%s'", v);
    double r[NB_OUT];
    run_op(c, "esc_fsize", NULL, r);
    cr_expect_eq(r[0], -EFBIG, "ftruncate of a memfd to 2 GiB: %g", r[0]);
    cr_expect_eq(r[1], -EFBIG, "a write at 2 GiB: %g (SIGXFSZ is ignored)", r[1]);
    cr_assert_eq(mxt_worker_pid(c), w, "the worker died of it");
    mxop_close(c);
}

Test(neighbours_basic, file_size_limited)
{
    file_size_limited();
}

Test(neighbours_strict, file_size_limited)
{
    file_size_limited();
}

/* ------------------------------------------------------------------------ */
/* The worker's own channels */

Test(neighbours_strict, sends_on_the_channels_refused)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    const char *libs[] = {"hostile_escape.so", "relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    double r[NB_OUT];
    run_op(c, "esc_send", NULL, r);
    static const char *const names[] = {
        "send(4)",     "sendto(3)",    "sendmmsg(4)", "sendmsg(4, 0)", "sendmsg(3, MSG_DONTWAIT)",
        "sendfile(4)", "splice(to 4)", "send(3)"};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(r[i], -EPERM, "%s: %g", names[i], r[i]);
    /* The worker's own sends (both data paths: MXOP_DATA_PATH) still go. */
    char why[256];
    const char *bad = mxt_relu_calls(c, 5, 20, why, sizeof(why));
    cr_assert_null(bad, "%s", bad);
    cr_assert_eq(mxt_worker_pid(c), w);
    mxop_close(c);
    mxt_other_session_correct(&daemon_);
    mxt_baseline_expect(&base);
}
