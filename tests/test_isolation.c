/*
 * tests/test_isolation.c - every way an op can fail (tests/plugins/crash.c),
 * survived.  For each fixture: the named error (the signal or exit status,
 * the timeout, out of memory, input written), the caller's inputs
 * bit-identical, the daemon alive, another session calling all along and
 * getting correct results, the next call on the failed session succeeding,
 * and the daemon's descriptors and memfds back to where they were.
 *
 * Also: supervision (quarantine of a library that crashes on load, backoff
 * and giving up on a worker that dies before serving anything, the time
 * from a crash to the next successful call with and without the warm
 * spare), fixtures that the sandbox defuses and what they do without it,
 * and both directions of death (client killed or stopped mid-call, daemon
 * killed mid-call).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One session that calls relu and closes: what a daemon opens lazily is open from then on. */
static void warm_up(void)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0);
    mxop_close(c);
}

static void start_with(const char *const *args)
{
    mxt_daemon_start(&daemon_, args);
    warm_up();
}

static void setup(void)
{
    /* A small memory budget, so that the oom fixture reaches it quickly. */
    const char *args[] = {"--worker-memory-mb", "256", NULL};
    start_with(args);
}

static void setup_none(void)
{
    const char *args[] = {"--sandbox", "none", NULL};
    start_with(args);
}

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    start_with(args);
}

static void setup_no_spare(void)
{
    const char *args[] = {"--warm-spare", "off", NULL};
    start_with(args);
}

static void setup_plain(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(isolation, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(unsandboxed, .init = setup_none, .fini = teardown, .timeout = 60);
TestSuite(basic_sandbox, .init = setup_basic, .fini = teardown, .timeout = 60);
TestSuite(supervision, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(death, .init = setup_plain, .fini = teardown, .timeout = 60);
TestSuite(no_spare, .init = setup_no_spare, .fini = teardown, .timeout = 60);

/* ------------------------------------------------------------------------ */
/* The daemon's descriptors before and after. */

static mxt_baseline_t take_baseline(void)
{
    return mxt_baseline_take(&daemon_);
}

static void expect_back_to(const mxt_baseline_t *b)
{
    mxt_baseline_expect(b);
}

/* ------------------------------------------------------------------------ */
/* The other session: relu calls in a thread, each result checked. */

struct other {
    mxop_client_t *c;
    pid_t pid;
    atomic_int stop;
    atomic_int calls;
    atomic_int bad;
    char why[256];
    pthread_t thread;
};

static void *other_loop(void *arg)
{
    struct other *o = arg;
    int64_t s[] = {256};
    mxop_array_t x, y;
    mxt_array(o->c, MXOP_F32, 1, s, 7, &x);
    mxt_array(o->c, MXOP_F32, 1, s, 8, &y);
    const mxop_op_t *relu = mxt_op(o->c, "relu");
    while (!atomic_load(&o->stop)) {
        memset(y.data, 0xff, y.nbytes);
        int rc = mxop_forward(o->c, relu, NULL, &x, 1, &y, 1);
        if (rc != 0) {
            if (atomic_fetch_add(&o->bad, 1) == 0)
                snprintf(o->why, sizeof(o->why), "%s: %s", mxop_err_name(rc),
                         mxop_last_error(o->c));
            continue;
        }
        for (int i = 0; i < 256; i++) {
            double v = mxt_get(&x, (size_t)i);
            if (mxt_get(&y, (size_t)i) != (v > 0 ? v : 0)) {
                if (atomic_fetch_add(&o->bad, 1) == 0)
                    snprintf(o->why, sizeof(o->why), "wrong result at %d", i);
                break;
            }
        }
        atomic_fetch_add(&o->calls, 1);
        mxt_sleep_ms(1);
    }
    mxop_array_free(o->c, &x);
    mxop_array_free(o->c, &y);
    return NULL;
}

/* Heap-allocated: a failed assertion leaves the test's frame while the thread still runs. */
static struct other *other_start(void)
{
    struct other *o = calloc(1, sizeof(*o));
    cr_assert(o != NULL);
    const char *libs[] = {"relu.so", "crash.so", NULL};
    o->c = mxt_connect_with(&daemon_, libs);
    o->pid = mxt_worker_pid(o->c);
    cr_assert_eq(pthread_create(&o->thread, NULL, other_loop, o), 0);
    /* It is calling before the failure comes. */
    for (int i = 0; i < 500 && atomic_load(&o->calls) == 0 && atomic_load(&o->bad) == 0; i++)
        mxt_sleep_ms(2);
    return o;
}

static void other_stop(struct other *o)
{
    atomic_store(&o->stop, 1);
    pthread_join(o->thread, NULL);
    cr_assert_eq(atomic_load(&o->bad), 0, "the other session failed: %s", o->why);
    cr_assert(atomic_load(&o->calls) > 0, "the other session made no calls");
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(o->c, &st), 0);
    cr_assert_eq((pid_t)st.worker_pid, o->pid, "the other session's worker was replaced");
    cr_assert_eq(st.worker_restarts, 0);
    mxop_close(o->c);
    free(o);
}

/* ------------------------------------------------------------------------ */

static void next_call_succeeds(mxop_client_t *c)
{
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 9, &x);
    mxt_array(c, MXOP_F32, 1, s, 10, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "call after the failure: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (int i = 0; i < 64; i++) {
        double v = mxt_get(&x, (size_t)i);
        cr_assert_eq(mxt_get(&y, (size_t)i), v > 0 ? v : 0);
    }
    rc = mxop_forward(c, mxt_op(c, "identity"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "crash.so after the failure: %s: %s", mxop_err_name(rc),
                 mxop_last_error(c));
    cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
}

typedef struct fixture {
    const char *op;
    const char *const *attrs;
    int32_t timeout_ms;
    int code;            /* the error expected (0: the call succeeds) */
    const char *needle1; /* in the message; NULL: not checked */
    const char *needle2;
    int restarts; /* worker restarts the call causes (0 or 1) */
    float out[2]; /* code 0: what out[0], out[1] must hold; NaN: not checked */
} fixture_t;

static int restarted_once(void *arg)
{
    mxop_client_t *c = ((void **)arg)[0];
    uint64_t want = *(uint64_t *)((void **)arg)[1];
    mxop_stats_t st;
    return mxop_stats(c, &st) == 0 && st.worker_restarts >= want && st.worker_pid != 0;
}

/* Waits until the client's session has restarted its worker `want` times in all. */
static void wait_restarts(mxop_client_t *c, uint64_t want)
{
    void *arg[2] = {c, &want};
    cr_assert(mxt_wait_until(restarted_once, arg, 5000), "the worker was not restarted");
}

static void run_fixture(const fixture_t *f)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    struct other *other = other_start();

    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    static float saved[1024];
    memcpy(saved, x.data, sizeof(saved));

    mxop_call_t call = {
        .struct_size = sizeof(call), .attrs = f->attrs, .timeout_ms = f->timeout_ms};
    int rc = mxop_forward(c, mxt_op(c, f->op), &call, &x, 1, &y, 1);
    const char *msg = mxop_last_error(c);
    cr_assert_eq(rc, f->code, "op %s: got %s (%s), expected %s", f->op, mxop_err_name(rc), msg,
                 mxop_err_name(f->code));
    if (f->code != 0) {
        if (f->needle1)
            cr_assert(strstr(msg, f->needle1) != NULL, "message '%s' lacks '%s'", msg, f->needle1);
        if (f->needle2)
            cr_assert(strstr(msg, f->needle2) != NULL, "message '%s' lacks '%s'", msg, f->needle2);
    } else {
        for (int i = 0; i < 2; i++)
            if (f->out[i] == f->out[i])
                cr_assert_eq(((float *)y.data)[i], f->out[i], "op %s: out[%d] = %g, expected %g",
                             f->op, i, ((float *)y.data)[i], f->out[i]);
    }
    cr_assert_eq(memcmp(saved, x.data, sizeof(saved)), 0, "the caller's input changed");
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");

    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts + (uint64_t)f->restarts,
                 "%llu restarts, expected %llu", (unsigned long long)after.worker_restarts,
                 (unsigned long long)(before.worker_restarts + (uint64_t)f->restarts));
    if (f->restarts)
        cr_assert_neq(after.worker_pid, before.worker_pid, "the worker was not replaced");
    else
        cr_assert_eq(after.worker_pid, before.worker_pid, "the worker was replaced");
    next_call_succeeds(c);
    other_stop(other);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
    expect_back_to(&base);
}

#define NOOUT                                                                                      \
    {                                                                                              \
        __builtin_nanf(""), __builtin_nanf("")                                                     \
    }

Test(isolation, segfault)
{
    fixture_t f = {"segv", NULL, 0, MXOP_EWORKER_CRASHED, "segv", "SIGSEGV", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, abort)
{
    fixture_t f = {"abort", NULL, 0, MXOP_EWORKER_CRASHED, "abort", "SIGABRT", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, exit0_inside_op)
{
    fixture_t f = {"exit0", NULL, 0, MXOP_EWORKER_CRASHED, "exit0", "exited with status 0",
                   1,       NOOUT};
    run_fixture(&f);
}

Test(isolation, exit3_inside_op)
{
    fixture_t f = {"exit3", NULL, 0, MXOP_EWORKER_CRASHED, "exit3", "exited with status 3",
                   1,       NOOUT};
    run_fixture(&f);
}

Test(isolation, stack_overflow)
{
    fixture_t f = {"stack_overflow", NULL, 0,    MXOP_EWORKER_CRASHED, "SIGSEGV",
                   "stack overflow", 1,    NOOUT};
    run_fixture(&f);
}

Test(isolation, double_free)
{
    /* glibc's own check aborts; under ASan, its report aborts too (abort_on_error=1). */
    fixture_t f = {"double_free", NULL,      0, MXOP_EWORKER_CRASHED,
                   "double_free", "SIGABRT", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, infinite_loop)
{
    fixture_t f = {"hang", NULL, 300, MXOP_ETIMEOUT, "hang", "deadline", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, sleep_forever)
{
    fixture_t f = {"pause", NULL, 300, MXOP_ETIMEOUT, "pause", "deadline", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, memory_exhaustion)
{
    fixture_t f = {"oom", NULL, 0, MXOP_EWORKER_OOM, "oom", "memory limit", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, memory_exhaustion_checked_keeps_the_worker)
{
    fixture_t f = {"oom_checked", NULL, 0, MXOP_ENOMEM, "malloc failed", NULL, 0, NOOUT};
    run_fixture(&f);
}

Test(isolation, write_into_input)
{
    fixture_t f = {"write_input", NULL, 0, MXOP_EINPUT_WRITTEN, "write_input", "input 0", 1, NOOUT};
    run_fixture(&f);
}

Test(isolation, fork_bomb_is_refused)
{
    /* strict: not one process; the op sees EPERM. */
    fixture_t f = {"fork_bomb", NULL, 0, 0, NULL, NULL, 0, {0, (float)EPERM}};
    run_fixture(&f);
}

Test(isolation, closing_foreign_fds_is_refused)
{
    fixture_t f = {"close_fds", NULL, 0, 0, NULL, NULL, 0, {(float)EPERM, (float)EPERM}};
    run_fixture(&f);
}

Test(isolation, garbage_into_foreign_fds_is_refused)
{
    fixture_t f = {"garbage_fds", NULL, 0, 0, NULL, NULL, 0, {(float)EPERM, (float)EPERM}};
    run_fixture(&f);
}

Test(isolation, crash_on_nth_call)
{
    const char *attrs[] = {"n", "2", NULL};
    fixture_t ok = {"crash_nth", attrs, 0, 0, NULL, NULL, 0, NOOUT};
    fixture_t crash = {"crash_nth", attrs,     0, MXOP_EWORKER_CRASHED,
                       "crash_nth", "SIGSEGV", 1, NOOUT};
    /* Each run_fixture is a fresh session (a fresh worker): its call 1 works, call 2 crashes. */
    run_fixture(&ok);
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    const mxop_op_t *op = mxt_op(c, "crash_nth");
    cr_assert_eq(mxop_forward(c, op, &call, &x, 1, &y, 1), 0);
    int rc = mxop_forward(c, op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, crash.code, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(c), "SIGSEGV") != NULL);
    /* The new worker counts from 1 again: its first call works. */
    cr_assert_eq(mxop_forward(c, op, &call, &x, 1, &y, 1), 0);
    next_call_succeeds(c);
    mxop_close(c);
    expect_back_to(&base);
}

Test(isolation, crash_in_library_init)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    struct other *other = other_start();
    int rc = mxop_load_library(c, "init_crash.so");
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(c), "SIGSEGV") != NULL, "%s", mxop_last_error(c));
    cr_assert(mxt_daemon_alive(&daemon_));
    next_call_succeeds(c);
    other_stop(other);
    mxop_close(c);
    expect_back_to(&base);
}

Test(isolation, crash_in_state_destructor)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    struct other *other = other_start();
    const mxop_op_t *op = mxt_op(c, "destroy_crash");
    mxop_shape_t sh = {1, {16}};
    int32_t dt = MXOP_F32;
    uint64_t state;
    cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &sh, &state), 0);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .state = state};
    cr_assert_eq(mxop_forward(c, op, &call, &x, 1, &y, 1), 0);
    cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0);
    int rc = mxop_state_destroy(c, state);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "destroy_crash") != NULL, "%s", mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "SIGSEGV") != NULL, "%s", mxop_last_error(c));
    cr_assert(mxt_daemon_alive(&daemon_));
    next_call_succeeds(c);
    /* A new instance works (and is not destroyed here: its destructor would crash again). */
    cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &sh, &state), 0);
    call.state = state;
    cr_assert_eq(mxop_forward(c, op, &call, &x, 1, &y, 1), 0);
    other_stop(other);
    mxop_close(c);
    expect_back_to(&base);
}

Test(isolation, thread_that_crashes_later)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    struct other *other = other_start();
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    pid_t pid = mxt_worker_pid(c);
    const char *attrs[] = {"ms", "100", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    /* The call itself is fine; its thread takes the worker down 100 ms later. */
    int rc = mxop_forward(c, mxt_op(c, "thread_crash"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0);
    wait_restarts(c, 1);
    cr_assert_neq(mxt_worker_pid(c), pid, "the worker was not replaced");
    cr_assert(mxt_daemon_alive(&daemon_));
    next_call_succeeds(c);
    other_stop(other);
    mxop_close(c);
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* Without the sandbox's protection: what the daemon does about it. */

/* An op that breaks the worker's supervisor channel gets its worker killed and replaced. */
static void broken_channel(const char *op, const char *needle)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    struct other *other = other_start();
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"fds", "1", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    /* The result may come before the daemon notices; either way it is not a wrong one. */
    int rc = mxop_forward(c, mxt_op(c, op), &call, &x, 1, &y, 1);
    cr_assert(rc == 0 || rc == MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc),
              mxop_last_error(c));
    if (rc == 0)
        cr_assert_eq(((float *)y.data)[0], 0.0f, "the op's own %s(3) failed", op);
    else
        cr_assert(strstr(mxop_last_error(c), needle) != NULL, "%s", mxop_last_error(c));
    wait_restarts(c, 1);
    next_call_succeeds(c);
    other_stop(other);
    mxop_close(c);
    expect_back_to(&base);
}

Test(unsandboxed, closing_the_supervisor_channel_gets_the_worker_replaced)
{
    broken_channel("close_fds", "closed its supervisor channel");
}

Test(unsandboxed, garbage_into_the_supervisor_channel_gets_the_worker_replaced)
{
    broken_channel("garbage_fds", "supervisor channel");
}

static int session_empty(void *arg)
{
    return mxt_session_procs(*(pid_t *)arg) == 0;
}

Test(basic_sandbox, fork_bomb_children_die_with_their_worker)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t pid = mxt_worker_pid(c);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"max", "16", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, "fork_bomb"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    /* basic allows fork (as root nothing limits it): the fixture's own bound stops it. */
    cr_assert_eq(((float *)y.data)[0], 16.0f, "made %g children", ((float *)y.data)[0]);
    cr_assert_eq(mxt_session_procs(pid), 17, "the worker's session holds %d processes",
                 mxt_session_procs(pid));
    next_call_succeeds(c);
    mxop_close(c);
    cr_assert(mxt_wait_until(session_empty, &pid, 5000), "%d processes outlived their worker",
              mxt_session_procs(pid));
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* Supervision */

Test(supervision, library_that_crashes_on_load_is_quarantined)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    for (int i = 1; i <= 3; i++) {
        int rc = mxop_load_library(c, "init_crash.so");
        cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "load %d: got %s (%s)", i, mxop_err_name(rc),
                     mxop_last_error(c));
        if (i == 3)
            cr_assert(strstr(mxop_last_error(c), "quarantined") != NULL, "%s", mxop_last_error(c));
    }
    int rc = mxop_load_library(c, "init_crash.so");
    cr_assert_eq(rc, MXOP_EQUARANTINED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "init_crash.so") != NULL, "%s", mxop_last_error(c));
    /* In another session too: the record is the daemon's. */
    mxop_client_t *other = mxt_connect(&daemon_);
    rc = mxop_load_library(other, "init_crash.so");
    cr_assert_eq(rc, MXOP_EQUARANTINED, "got %s", mxop_err_name(rc));
    /* The session that met it works on. */
    const char *more[] = {"crash.so", NULL};
    cr_assert_eq(mxop_load_library(c, more[0]), 0);
    next_call_succeeds(c);
    /* A rebuilt library (another mtime) gets its chances again. */
    char path[600];
    snprintf(path, sizeof(path), "%s/init_crash.so", daemon_.plugins);
    struct timespec times[2] = {{0, UTIME_NOW}, {12345, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, path, times, 0), 0);
    rc = mxop_load_library(other, "init_crash.so");
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc),
                 mxop_last_error(other));
    mxop_close(other);
    mxop_close(c);
}

/* The session's worker restarts so far. */
static int restarts_now(mxop_client_t *c)
{
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    return (int)st.worker_restarts;
}

/*
 * A worker that dies before serving is restarted with a backoff (10, 20,
 * ... ms, capped at 2 s), never in a tight loop, and never given up on:
 * the cause may clear, and recovery never gives up while it is possible.
 */
Test(supervision, worker_dying_before_serving_backs_off_and_keeps_trying)
{
    struct other *other = other_start();
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    /* It loads; then every worker it is given to dies 30 ms later, before any call. */
    cr_assert_eq(mxop_load_library(c, "init_thread_crash.so"), 0);
    mxt_sleep_ms(4000);
    int at4 = restarts_now(c);
    mxt_sleep_ms(4500);
    int at8 = restarts_now(c);
    /* Backoffs 0, 10, 20 ... 1280 ms take 2.5 s; then one restart every 2 s or so. */
    cr_assert(at4 >= 5, "only %d restarts in 4 s", at4);
    cr_assert(at8 <= 40, "%d restarts in 8.5 s: no backoff", at8);
    cr_assert(at8 > at4, "the daemon stopped restarting (%d restarts at 4 s and at 8.5 s)", at4);
    cr_assert(mxt_daemon_alive(&daemon_));
    other_stop(other);
    mxop_close(c);
}

/* Median of n doubles (sorts them). */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * Crash -> next successful call, as the engine sees it: from the start of
 * a call whose op segfaults to the end of the next call, which succeeds on
 * the replacement worker.  Printed for docs/isolation.md.
 */
static void measure_recovery(const char *what, int rounds, double bound_ms)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4096};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const mxop_op_t *segv = mxt_op(c, "segv"), *relu = mxt_op(c, "relu");
    cr_assert_eq(mxop_forward(c, relu, NULL, &x, 1, &y, 1), 0);
    double total[64], err[64], next[64];
    cr_assert(rounds <= 64);
    for (int i = 0; i < rounds; i++) {
        /* Crashes are not back to back: the spare of the last one has started. */
        mxt_sleep_ms(150);
        double t0 = now_ms();
        int rc = mxop_forward(c, segv, NULL, &x, 1, &y, 1);
        double t1 = now_ms();
        cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "round %d: %s", i, mxop_err_name(rc));
        rc = mxop_forward(c, relu, NULL, &x, 1, &y, 1);
        double t2 = now_ms();
        cr_assert_eq(rc, 0, "round %d: the call after the crash: %s (%s)", i, mxop_err_name(rc),
                     mxop_last_error(c));
        total[i] = t2 - t0;
        err[i] = t1 - t0;
        next[i] = t2 - t1;
    }
    double m_total = median(total, rounds), m_err = median(err, rounds),
           m_next = median(next, rounds);
    fprintf(stderr,
            "recovery (%s): crash -> next successful call: median %.2f ms over %d crashes "
            "(crash -> error %.2f ms, error -> next success %.2f ms)\n",
            what, m_total, rounds, m_err, m_next);
    cr_assert(m_total < bound_ms, "median %.2f ms", m_total);
    mxop_close(c);
}

Test(supervision, recovery_latency_with_warm_spare)
{
    measure_recovery("warm spare", 30, 100);
}

Test(no_spare, recovery_latency_without_warm_spare)
{
    measure_recovery("no spare", 30, 1000);
}

/* ------------------------------------------------------------------------ */
/* Both directions of death. */

/*
 * A child process connects, says its worker's pid on `pipe_w`, and calls
 * `op` (which blocks) with the given deadline.  It never returns.
 */
static void child_client(int pipe_w, const char *op, const char *const *attrs, int timeout_ms)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .timeout_ms = 20000};
    if (mxop_connect(daemon_.sock, &opts, &c) != 0 || mxop_load_library(c, "crash.so") != 0)
        _exit(10);
    const mxop_op_t *o;
    if (mxop_op_find(c, op, &o) != 0)
        _exit(11);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    if (mxop_array_alloc(c, MXOP_F32, 1, s, &x) != 0 ||
        mxop_array_alloc(c, MXOP_F32, 1, s, &y) != 0)
        _exit(12);
    uint32_t region;
    void *base;
    if (mxop_region_create(c, 1 << 20, &region, &base) != 0)
        _exit(13);
    mxop_stats_t st;
    if (mxop_stats(c, &st) != 0)
        _exit(14);
    pid_t pid = (pid_t)st.worker_pid;
    if (write(pipe_w, &pid, sizeof(pid)) != sizeof(pid))
        _exit(15);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = timeout_ms};
    int rc = mxop_forward(c, o, &call, &x, 1, &y, 1);
    /* Say how the call ended, then stay until killed. */
    if (write(pipe_w, &rc, sizeof(rc)) != sizeof(rc))
        _exit(16);
    for (;;)
        pause();
}

static pid_t spawn_child_client(int *pipe_r, pid_t *worker, const char *op,
                                const char *const *attrs, int timeout_ms)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        close(p[0]);
        child_client(p[1], op, attrs, timeout_ms);
    }
    close(p[1]);
    cr_assert_eq(read(p[0], worker, sizeof(*worker)), (ssize_t)sizeof(*worker),
                 "the child client did not start");
    *pipe_r = p[0];
    return child;
}

static int pid_gone(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    if (kill(pid, 0) != 0)
        return 1;
    /* A zombie is gone too (reaping is the daemon's business). */
    char st[16];
    return mxt_proc_field(pid, "status", "State", st, sizeof(st)) == 0 && st[0] == 'Z';
}

Test(death, client_killed_mid_call_ends_its_session)
{
    warm_up();
    mxt_baseline_t base = take_baseline();
    int rd;
    pid_t worker;
    const char *attrs[] = {"ms", "20000", NULL};
    pid_t child = spawn_child_client(&rd, &worker, "sleep", attrs, 30000);
    mxt_sleep_ms(100); /* the call is running */
    cr_assert_eq(kill(worker, 0), 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(rd);
    /* The daemon ends the session: the worker (and the spare), the regions, every fd. */
    cr_assert(mxt_wait_until(pid_gone, &worker, 3000), "worker %d outlived its client",
              (int)worker);
    expect_back_to(&base);
    cr_assert(mxt_daemon_alive(&daemon_));
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    next_call_succeeds(c);
    mxop_close(c);
}

Test(death, watchdog_works_while_the_client_is_stopped)
{
    warm_up();
    mxt_baseline_t base = take_baseline();
    int rd;
    pid_t worker;
    pid_t child = spawn_child_client(&rd, &worker, "hang", NULL, 300);
    mxt_sleep_ms(50);
    /* The client cannot react to anything now; the daemon's watchdog still kills the op. */
    kill(child, SIGSTOP);
    double t0 = now_ms();
    cr_assert(mxt_wait_until(pid_gone, &worker, 3000), "the hung worker %d was not killed",
              (int)worker);
    double waited = now_ms() - t0;
    cr_assert(waited < 2000, "killed only after %.0f ms", waited);
    /* Its replacement is there, waiting for the client. */
    pid_t kids[16];
    cr_assert(mxt_children(daemon_.pid, kids, 16) >= 1);
    kill(child, SIGCONT);
    int rc = 0;
    cr_assert_eq(read(rd, &rc, sizeof(rc)), (ssize_t)sizeof(rc));
    cr_assert_eq(rc, MXOP_ETIMEOUT, "the stopped client's call ended with %s", mxop_err_name(rc));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(rd);
    expect_back_to(&base);
}

struct killer {
    mxt_daemon_t *d;
    int after_ms;
};

static void *kill_later(void *arg)
{
    struct killer *k = arg;
    mxt_sleep_ms(k->after_ms);
    kill(k->d->pid, SIGKILL);
    return NULL;
}

Test(death, daemon_killed_mid_call_then_reconnect)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t worker = mxt_worker_pid(c);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"ms", "5000", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 10000};
    struct killer k = {&daemon_, 200};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, kill_later, &k), 0);
    double t0 = now_ms();
    int rc = mxop_forward(c, mxt_op(c, "sleep"), &call, &x, 1, &y, 1);
    double took = now_ms() - t0;
    pthread_join(t, NULL);
    waitpid(daemon_.pid, NULL, 0);
    daemon_.pid = 0;
    cr_assert(rc == MXOP_EDISCONNECTED || rc == MXOP_EWORKER_CRASHED, "got %s (%s)",
              mxop_err_name(rc), mxop_last_error(c));
    /* Promptly: the worker dies with its daemon, the call does not sleep its 5 s out. */
    cr_assert(took < 2000, "the call took %.0f ms", took);
    cr_assert(mxt_wait_until(pid_gone, &worker, 3000), "the worker outlived its daemon");
    mxop_stats_t st;
    rc = mxop_stats(c, &st);
    cr_assert_eq(rc, MXOP_EDISCONNECTED, "got %s", mxop_err_name(rc));
    mxop_close(c);
    /* A daemon is back on the same socket: the client reconnects and works. */
    mxt_daemon_restart(&daemon_, NULL);
    c = mxt_connect_with(&daemon_, libs);
    next_call_succeeds(c);
    mxop_close(c);
}

/* Copies src over dst by rename, so that a worker that has dst mapped keeps the old file. */
static void replace_file(const char *src, const char *dst)
{
    char tmp[700], cmd[3000];
    snprintf(tmp, sizeof(tmp), "%s.new", dst);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && mv '%s' '%s'", src, tmp, tmp, dst);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(no_spare, library_that_no_longer_loads_ends_the_session_not_renumbers_it)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    /* relu.so is now a library of the wrong ABI: the replacement worker cannot load it. */
    char src[600], dst[600];
    snprintf(src, sizeof(src), "%s/bad_abi.so", daemon_.plugins);
    snprintf(dst, sizeof(dst), "%s/relu.so", daemon_.plugins);
    replace_file(src, dst);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "segv"), NULL, &x, 1, &y, 1), MXOP_EWORKER_CRASHED);
    /*
     * crash.so's ops would move up one index without relu.so: no call may
     * run on that.  The daemon's verdict is an event; stats takes it in
     * before the call.
     */
    mxt_sleep_ms(200);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    int rc = mxop_forward(c, mxt_op(c, "identity"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "no longer loads") != NULL, "%s", mxop_last_error(c));
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_close(c);
}
