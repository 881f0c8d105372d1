/*
 * tests/test_placement.c - a worker keeps off its client's CPU while calls
 * flow through the mailbox, and moves to it when its client sleeps through
 * crowded calls (shm/placement.c); the client's CPU number,
 * a hint from an untrusted peer, is harmless when it is out of range, not
 * among the worker's allowed CPUs, or the worker has only one CPU.
 *
 * Nothing here is timed: the tests assert where processes may run and that
 * every call still succeeds with its own result.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "shm/placement.h"

/* ---- the rule itself ---- */

static cpu_set_t set_of(int a, int b)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    if (a >= 0)
        CPU_SET(a, &s);
    if (b >= 0)
        CPU_SET(b, &s);
    return s;
}

Test(placement_rule, moves_only_off_the_peers_cpu_within_the_allowed_set, .timeout = 30)
{
    cpu_set_t allowed = set_of(0, 1), out;
    cr_assert_eq(mxop__placement_away(0, 0, &allowed, &out), 1, "same CPU: should move");
    cr_assert(!CPU_ISSET(0, &out) && CPU_ISSET(1, &out) && CPU_COUNT(&out) == 1);
    cr_assert_eq(mxop__placement_away(1, 0, &allowed, &out), 0, "other CPU: nothing to do");
}

Test(placement_rule, a_hint_out_of_range_or_not_allowed_changes_nothing, .timeout = 30)
{
    cpu_set_t allowed = set_of(0, 1), out;
    const int bad[] = {-1, -1000, CPU_SETSIZE, CPU_SETSIZE + 1, 1 << 30};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(mxop__placement_away(bad[i], bad[i], &allowed, &out), 0, "hint %d", bad[i]);
    /* CPU 5 is not allowed: this side cannot be there in the first place; nothing moves. */
    cr_assert_eq(mxop__placement_away(5, 5, &allowed, &out), 0);
    /* Only one CPU allowed: nowhere else to go. */
    cpu_set_t one = set_of(1, -1);
    cr_assert_eq(mxop__placement_away(1, 1, &one, &out), 0);
}

Test(placement_rule, near_is_the_peers_cpu_within_the_allowed_set, .timeout = 30)
{
    cpu_set_t allowed = set_of(0, 1), out;
    cr_assert_eq(mxop__placement_near(1, &allowed, &out), 1);
    cr_assert(CPU_ISSET(1, &out) && CPU_COUNT(&out) == 1);
    const int bad[] = {-1, -1000, 5, CPU_SETSIZE, CPU_SETSIZE + 1, 1 << 30};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(mxop__placement_near(bad[i], &allowed, &out), 0, "hint %d", bad[i]);
}

/* ---- in a process: keep_off moves the caller, and ignores bad hints ---- */

static int first_two_cpus(int *a, int *b)
{
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s) != 0)
        return -1;
    *a = *b = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &s)) {
            if (*a < 0)
                *a = i;
            else {
                *b = i;
                return 0;
            }
        }
    return -1;
}

static void pin_self(int a, int b)
{
    cpu_set_t s = set_of(a, b);
    cr_assert_eq(sched_setaffinity(0, sizeof s, &s), 0, "sched_setaffinity: %s", strerror(errno));
}

Test(placement_rule, keep_off_moves_the_caller_and_ignores_bad_hints, .timeout = 30)
{
    int a, b;
    if (first_two_cpus(&a, &b) != 0)
        cr_skip_test("fewer than 2 CPUs allowed here");
    pin_self(a, b);
    unsetenv("MXOP_PLACEMENT"); /* on by default */
    mxop__placement_init();
    cr_assert_eq(mxop__placement_keep_off(-3), 0);
    cr_assert_eq(mxop__placement_keep_off(CPU_SETSIZE + 7), 0);
    int me = sched_getcpu();
    cr_assert_eq(mxop__placement_keep_off(me), 1, "on CPU %d, told the peer is there too", me);
    cpu_set_t now;
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(!CPU_ISSET(me, &now), "still allowed on the peer's CPU %d", me);
    cr_assert_eq(CPU_COUNT(&now), 1);
    /* Switched off, it never moves. */
    pin_self(a, b);
    setenv("MXOP_PLACEMENT", "0", 1);
    mxop__placement_init();
    cr_assert_eq(mxop__placement_keep_off(sched_getcpu()), 0);
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert_eq(CPU_COUNT(&now), 2);
}

Test(placement_rule, join_moves_the_caller_and_leaves_it_every_cpu, .timeout = 30)
{
    int a, b;
    if (first_two_cpus(&a, &b) != 0)
        cr_skip_test("fewer than 2 CPUs allowed here");
    pin_self(a, b);
    unsetenv("MXOP_PLACEMENT");
    mxop__placement_init();
    cpu_set_t now;
    const int bad[] = {-3, CPU_SETSIZE + 7, 1 << 30};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(mxop__placement_join(bad[i]), 0, "hint %d", bad[i]);
    /* Pinned to b (as a worker might be, by itself or anyone): told the peer is on a. */
    pin_self(b, -1);
    cr_assert_eq(mxop__placement_join(a), 1, "on CPU %d, told the peer is on %d", b, a);
    /* A move, not a pin: every CPU it started with is allowed again. */
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(CPU_ISSET(a, &now) && CPU_ISSET(b, &now) && CPU_COUNT(&now) == 2,
              "after the move the caller is held to %d CPU(s)", CPU_COUNT(&now));
    /* After keep_off (held off a), a join gives every thread back its CPUs. */
    pin_self(a, b);
    int me = sched_getcpu();
    cr_assert_eq(mxop__placement_keep_off(me), 1);
    cr_assert_eq(mxop__placement_join(me), 1);
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert_eq(CPU_COUNT(&now), 2);
    /* Switched off, it never moves. */
    pin_self(b, -1);
    setenv("MXOP_PLACEMENT", "0", 1);
    mxop__placement_init();
    cr_assert_eq(mxop__placement_join(a), 0);
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(CPU_ISSET(b, &now) && CPU_COUNT(&now) == 1);
    unsetenv("MXOP_PLACEMENT");
}

/* ---- through the daemon ---- */

static mxt_daemon_t daemon_;
static int cpu_a = -1, cpu_b = -1;
static cpu_set_t start_mask;

static void teardown(void)
{
    sched_setaffinity(0, sizeof start_mask, &start_mask);
    mxt_daemon_stop(&daemon_);
}

/* The daemon (and so every worker) may run on both CPUs; placement on (the default, said anyway).
 */
static void setup_two(void)
{
    sched_getaffinity(0, sizeof start_mask, &start_mask);
    if (first_two_cpus(&cpu_a, &cpu_b) == 0) {
        cpu_set_t s = set_of(cpu_a, cpu_b);
        sched_setaffinity(0, sizeof s, &s);
    }
    setenv("MXOP_PLACEMENT", "1", 1);
    mxt_daemon_start(&daemon_, NULL);
    unsetenv("MXOP_PLACEMENT");
}

/* The daemon, and so every worker, is allowed only the first CPU; placement asked for. */
static void setup_one(void)
{
    sched_getaffinity(0, sizeof start_mask, &start_mask);
    if (first_two_cpus(&cpu_a, &cpu_b) == 0) {
        cpu_set_t s = set_of(cpu_a, -1);
        sched_setaffinity(0, sizeof s, &s);
    }
    setenv("MXOP_PLACEMENT", "1", 1);
    mxt_daemon_start(&daemon_, NULL);
    unsetenv("MXOP_PLACEMENT");
}

static mxop_client_t *connect_shm(void)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {
        .struct_size = sizeof(o), .timeout_ms = 60000, .data_path = MXOP_DATA_PATH_SHM};
    int rc = mxop_connect(daemon_.sock, &o, &c);
    cr_assert_eq(rc, 0, "connect: %s", mxop_err_name(rc));
    rc = mxop_load_library(c, "relu.so");
    cr_assert_eq(rc, 0, "relu.so: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    rc = mxop_load_library(c, "noop.so");
    cr_assert_eq(rc, 0, "noop.so: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    return c;
}

/* `calls` null-op calls (the shortest calls, the ones placement is for). */
static void noop_calls(mxop_client_t *c, int calls)
{
    const mxop_op_t *op = NULL;
    cr_assert_eq(mxop_op_find(c, "noop", &op), 0, "no op noop");
    for (int k = 0; k < calls; k++) {
        int rc = mxop_forward(c, op, NULL, NULL, 0, NULL, 0);
        cr_assert_eq(rc, 0, "noop call %d: %s: %s", k, mxop_err_name(rc), mxop_last_error(c));
    }
}

Test(placement, the_worker_moves_off_its_clients_cpu, .init = setup_two, .fini = teardown,
     .timeout = 120)
{
    if (cpu_b < 0)
        cr_skip_test("fewer than 2 CPUs allowed here");
    char why[256];
    mxop_client_t *c = connect_shm();
    cr_assert_null(mxt_relu_calls(c, 0, 50, why, sizeof(why)), "%s", why);
    cr_assert_eq(mxop_data_path(c), MXOP_DATA_PATH_SHM, "the session has no mailbox");
    pid_t w = mxt_worker_pid(c);
    cr_assert_gt(w, 0);
    /* Client and worker on one CPU, the worker still allowed the other since its start. */
    pin_self(cpu_a, -1);
    cpu_set_t one = set_of(cpu_a, -1), now;
    cr_assert_eq(sched_setaffinity(w, sizeof one, &one), 0, "pinning the worker: %s",
                 strerror(errno));
    int moved = 0;
    /* Up to 30 s of rounds (how many calls a move takes depends on how fast they are). */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int elapsed = 0; elapsed < 30 && !moved;) {
        noop_calls(c, 500);
        clock_gettime(CLOCK_MONOTONIC, &t);
        elapsed = (int)(t.tv_sec - t0.tv_sec);
        cr_assert_eq(sched_getaffinity(w, sizeof now, &now), 0);
        moved = !CPU_ISSET(cpu_a, &now);
    }
    cr_assert(moved, "the worker stayed allowed on its client's CPU %d", cpu_a);
    cr_assert(CPU_ISSET(cpu_b, &now), "the worker left its allowed CPUs");
    /* Calls with data still get their own results with the worker moved. */
    cr_assert_null(mxt_relu_calls(c, 0, 200, why, sizeof(why)), "after the move: %s", why);
    mxop_close(c);
}

/* The daemon may run on every CPU this test may; placement on. */
static void setup_all(void)
{
    sched_getaffinity(0, sizeof start_mask, &start_mask);
    setenv("MXOP_PLACEMENT", "1", 1);
    mxt_daemon_start(&daemon_, NULL);
    unsetenv("MXOP_PLACEMENT");
}

/*
 * The calling thread held to CPU a, a new session, and its worker held to
 * CPU b from outside, before any call; *w gets the worker's pid.
 */
static mxop_client_t *client_on_a_worker_on_b(pid_t *w)
{
    pin_self(cpu_a, -1);
    mxop_client_t *c = connect_shm();
    *w = mxt_worker_pid(c);
    cr_assert_gt(*w, 0);
    cpu_set_t other = set_of(cpu_b, -1);
    cr_assert_eq(sched_setaffinity(*w, sizeof other, &other), 0, "pinning the worker: %s",
                 strerror(errno));
    return c;
}

typedef struct busy {
    mxop_client_t *c;
    atomic_int *stop;
    atomic_int called; /* 1 once its first calls are done */
    const char *fail;
    char why[256];
} busy_t;

/* Calls relu until told to stop: calls in flight beside the test's own. */
static void *busy_calls(void *p)
{
    busy_t *b = p;
    while (!atomic_load(b->stop) && b->fail == NULL) {
        b->fail = mxt_relu_calls(b->c, 1, 20, b->why, sizeof(b->why));
        atomic_store(&b->called, 1);
    }
    atomic_store(&b->called, 1);
    return NULL;
}

/*
 * A client whose process has more calls in flight than CPUs sleeps through
 * each call (MXOP__MBOX_CROWDED): its worker moves to the client's CPU.
 * One thread per CPU calls at once (two calls' worth of CPUs each, thread
 * and worker).  The first calls are the other threads', which may run on
 * every CPU: the process reads from them that its CPUs are all the online
 * ones (client/spincap.c).  Only then is the test's own thread held to CPU
 * a, and its worker to CPU b from outside, before any call of theirs: the
 * worker, never beside its client, was never kept off its CPU (which a long
 * call would undo), so being allowed CPU a again is the move to its
 * crowded client.
 */
Test(placement, the_worker_moves_to_its_crowded_clients_cpu, .init = setup_all, .fini = teardown,
     .timeout = 120)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mine, now;
    cr_assert_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
    if (online < 2 || online > 8 || CPU_COUNT(&mine) != online ||
        first_two_cpus(&cpu_a, &cpu_b) != 0)
        cr_skip_test("needs 2 to 8 CPUs, all of them allowed here");
    char why[256];
    atomic_int stop = 0;
    busy_t busy[8];
    pthread_t th[8];
    int n_busy = (int)online - 1;
    for (int i = 0; i < n_busy; i++) {
        busy[i] = (busy_t){.c = connect_shm(), .stop = &stop};
        cr_assert_eq(pthread_create(&th[i], NULL, busy_calls, &busy[i]), 0);
    }
    for (int i = 0; i < n_busy; i++)
        while (!atomic_load(&busy[i].called))
            usleep(1000);
    pid_t w;
    mxop_client_t *c = client_on_a_worker_on_b(&w);
    int moved = 0;
    const char *fail = NULL;
    /* Rounds for up to 30 s, not a count of them: the move needs a call that finds its
     * client asleep CROWDED, and how many calls that takes depends on how fast they are. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int elapsed = 0; elapsed < 30 && !moved && fail == NULL;) {
        fail = mxt_relu_calls(c, 0, 20, why, sizeof(why));
        clock_gettime(CLOCK_MONOTONIC, &t);
        elapsed = (int)(t.tv_sec - t0.tv_sec);
        cr_assert_eq(sched_getaffinity(w, sizeof now, &now), 0);
        moved = CPU_ISSET(cpu_a, &now);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < n_busy; i++) {
        pthread_join(th[i], NULL);
        cr_assert_null(busy[i].fail, "a thread beside: %s", busy[i].why);
        mxop_close(busy[i].c);
    }
    cr_assert_null(fail, "%s", why);
    cr_assert_eq(mxop_data_path(c), MXOP_DATA_PATH_SHM, "the session has no mailbox");
    cr_assert(moved, "the worker stayed held to CPU %d, away from its crowded client on %d", cpu_b,
              cpu_a);
    /* A move, not a pin: the worker gives itself its CPUs back right after (it may have been
     * seen between the two steps). */
    int freed = 0;
    for (int i = 0; i < 200 && !freed; i++) {
        cr_assert_eq(sched_getaffinity(w, sizeof now, &now), 0);
        freed = CPU_ISSET(cpu_a, &now) && CPU_ISSET(cpu_b, &now);
        if (!freed)
            mxt_sleep_ms(10);
    }
    cr_assert(freed, "the worker was left held to %d CPU(s), without CPU %d", CPU_COUNT(&now),
              CPU_ISSET(cpu_a, &now) ? cpu_b : cpu_a);
    cr_assert_null(mxt_relu_calls(c, 0, 200, why, sizeof(why)), "after the move: %s", why);
    mxop_close(c);
}

/*
 * The same with the client's process held to one CPU: its CPU is the
 * engine's choice, not the scheduler's, and the worker is not drawn to it.
 * The worker is held to the other CPU before any call (so it is never kept
 * off its client's CPU, which a long call would undo).
 */
Test(placement, a_pinned_clients_worker_is_not_drawn_to_its_cpu, .init = setup_all,
     .fini = teardown, .timeout = 120)
{
    cpu_set_t now;
    if (first_two_cpus(&cpu_a, &cpu_b) != 0)
        cr_skip_test("fewer than 2 CPUs allowed here");
    char why[256];
    /* Before the first call, which reads the CPUs the process may use (client/spincap.c). */
    pid_t w;
    mxop_client_t *c = client_on_a_worker_on_b(&w);
    /* Each call's thread and worker want two CPUs of the one: every call sleeps for want of
     * CPUs, and says nothing of being crowded. */
    cr_assert_null(mxt_relu_calls(c, 0, 2000, why, sizeof(why)), "%s", why);
    cr_assert_eq(sched_getaffinity(w, sizeof now, &now), 0);
    cr_assert(!CPU_ISSET(cpu_a, &now) && CPU_COUNT(&now) == 1,
              "the worker was drawn to its pinned client's CPU %d", cpu_a);
    mxop_close(c);
}

Test(placement, a_worker_with_one_cpu_stays_and_calls_succeed, .init = setup_one, .fini = teardown,
     .timeout = 120)
{
    if (cpu_b < 0)
        cr_skip_test("fewer than 2 CPUs allowed here");
    char why[256];
    mxop_client_t *c = connect_shm();
    pid_t w = mxt_worker_pid(c);
    cr_assert_gt(w, 0);
    /* The client on the CPU the worker may not use, then on the worker's own CPU. */
    pin_self(cpu_b, -1);
    cr_assert_null(mxt_relu_calls(c, 0, 2000, why, sizeof(why)), "client on CPU %d: %s", cpu_b,
                   why);
    pin_self(cpu_a, -1);
    cr_assert_null(mxt_relu_calls(c, 0, 2000, why, sizeof(why)), "client on CPU %d: %s", cpu_a,
                   why);
    cpu_set_t now;
    cr_assert_eq(sched_getaffinity(w, sizeof now, &now), 0);
    cr_assert(CPU_ISSET(cpu_a, &now) && CPU_COUNT(&now) == 1,
              "a worker allowed only CPU %d changed its affinity", cpu_a);
    mxop_close(c);
}
