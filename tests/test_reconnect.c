/*
 * tests/test_reconnect.c - a client whose daemon goes away (stopped after a
 * hand-over to a new daemon, killed and restarted) reconnects to the same
 * socket by itself (client/reconnect.c): its libraries, regions and op
 * handles carry over, op states answer MXOP_ESTATE_LOST until made again;
 * with reconnection off, or no daemon coming back, the call fails clearly.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tests/harness.h"

static mxt_daemon_t d_;
static pid_t new_pid;

static void reap(pid_t pid, int ms)
{
    int status;
    for (int i = 0; i < ms / 10; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return;
        mxt_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

static void fini(void)
{
    if (new_pid > 0) {
        kill(new_pid, SIGTERM);
        reap(new_pid, 10000);
        new_pid = 0;
    }
    /* Stops the first daemon if it still runs, and removes the directory. */
    mxt_daemon_stop(&d_);
}

/* A client on `d` with relu.so (and `more`, may be NULL) and the given reconnect option. */
static mxop_client_t *client_on(int reconnect, int32_t timeout_ms, const char *more)
{
    mxop_connect_opts_t o = {
        .struct_size = sizeof(o), .timeout_ms = timeout_ms, .reconnect = reconnect};
    mxop_client_t *c = NULL;
    int rc = mxop_connect(d_.sock, &o, &c);
    cr_assert_eq(rc, 0, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    if (more != NULL)
        cr_assert_eq(mxop_load_library(c, more), 0, "%s", mxop_last_error(c));
    return c;
}

/* The parent process of `pid`, or -1. */
static long parent_of(pid_t pid)
{
    char v[64];
    if (mxt_proc_field(pid, "status", "PPid", v, sizeof(v)) != 0)
        return -1;
    return strtol(v, NULL, 10);
}

/* A daemon that takes over `d_`'s socket, as an upgrade starts it. */
static pid_t start_new(void)
{
    char prog[512];
    snprintf(prog, sizeof(prog), "%s/bin/mxop-serverd", mxt_build_dir());
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        execl(prog, prog, "--socket", d_.sock, "--plugin-dir", d_.plugins, "--log-level",
              getenv("MXOP_TEST_LOG") ? "debug" : "warn", "--take-over", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int old_gone(void *arg)
{
    (void)arg;
    return waitpid(d_.pid, NULL, WNOHANG) == d_.pid;
}

/*
 * The upgrade: a new daemon takes the socket over, the old one is told to
 * stop (SIGTERM, a short drain): the session's relu loop runs on through
 * it with no error and the same results, and ends up on the new daemon.
 */
Test(reconnect, a_loop_runs_through_take_over_and_stop_of_the_old_daemon, .timeout = 120,
     .fini = fini)
{
    const char *extra[] = {"--drain-timeout-ms", "300", NULL};
    mxt_daemon_start(&d_, extra);
    mxt_relu_caller_t k = {
        .c = client_on(MXOP_RECONNECT_DEFAULT, 20000, NULL), .who = 5, .calls = 10};
    pid_t old_worker = mxt_worker_pid(k.c);
    pthread_t th;
    cr_assert(pthread_create(&th, NULL, mxt_relu_caller, &k) == 0);

    new_pid = start_new();
    /* The new daemon holds the socket once a fresh client lands on one of its workers. */
    int moved = 0;
    for (int i = 0; i < 500 && !moved; i++) {
        mxop_client_t *f = NULL;
        mxop_connect_opts_t o = {.struct_size = sizeof(o), .reconnect = MXOP_RECONNECT_OFF};
        if (mxop_connect(d_.sock, &o, &f) == 0) {
            moved = parent_of(mxt_worker_pid(f)) == (long)new_pid;
            mxop_close(f);
        }
        if (!moved)
            mxt_sleep_ms(20);
    }
    cr_assert(moved, "the new daemon never took the socket over");

    kill(d_.pid, SIGTERM);
    cr_assert(mxt_wait_until(old_gone, NULL, 30000), "the old daemon did not stop");
    d_.pid = 0;
    int before = k.rounds;
    for (int i = 0; i < 1000 && k.rounds < before + 5 && k.why[0] == '\0'; i++)
        mxt_sleep_ms(10);
    k.stop = 1;
    pthread_join(th, NULL);
    cr_assert(k.why[0] == '\0', "the session's calls through the upgrade: %s", k.why);
    cr_assert(k.rounds >= before + 5, "the session made no calls after the old daemon stopped");
    pid_t w = mxt_worker_pid(k.c);
    cr_expect_neq(w, old_worker, "the session still names the old daemon's worker");
    cr_expect_eq(parent_of(w), (long)new_pid, "the session's worker %d is not the new daemon's",
                 (int)w);
    mxop_close(k.c);
}

typedef struct {
    mxop_client_t *c;
    const mxop_op_t *op;
    mxop_array_t *x, *y;
    int rc;
} call_t;

/* One forward, from another thread (the daemon is restarted from the test's own). */
static void *call_thread(void *arg)
{
    call_t *k = arg;
    k->rc = mxop_forward(k->c, k->op, NULL, k->x, 1, k->y, 1);
    return NULL;
}

/*
 * A daemon killed and started again on the same socket: the next call
 * succeeds, with the op handle, the user region and its id the engine
 * held before.
 */
Test(reconnect, a_restarted_daemon_serves_the_next_call, .timeout = 120, .fini = fini)
{
    mxt_daemon_start(&d_, NULL);
    mxop_client_t *c = client_on(MXOP_RECONNECT_DEFAULT, 20000, NULL);
    const mxop_op_t *op = mxt_op(c, "relu");
    /* A user region the engine keeps using by its id. */
    uint32_t reg;
    void *base;
    cr_assert_eq(mxop_region_create(c, 4096, &reg, &base), 0, "%s", mxop_last_error(c));
    int64_t s[] = {16};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_view(c, reg, 0, MXOP_F32, 1, s, &x), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_view(c, reg, 1024, MXOP_F32, 1, s, &y), 0, "%s", mxop_last_error(c));
    char why[512];
    cr_assert(mxt_relu_calls(c, 1, 3, why, sizeof(why)) == NULL, "%s", why);

    mxt_daemon_kill(&d_, SIGKILL);
    mxt_daemon_restart(&d_, NULL);
    float *xf = x.data, *yf = y.data;
    for (int i = 0; i < 16; i++) {
        xf[i] = (float)(i - 8);
        yf[i] = -1;
    }
    int rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "the call after the restart: %s: %s", mxop_err_name(rc),
                 mxop_last_error(c));
    for (int i = 0; i < 16; i++)
        cr_assert_eq(yf[i], i > 8 ? (float)(i - 8) : 0.0f, "element %d: %g", i, yf[i]);

    /* Killed again, not back yet: the call that finds it gone fails, saying so... */
    mxt_daemon_kill(&d_, SIGKILL);
    rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EDISCONNECTED, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "could not reconnect") != NULL, "%s", mxop_last_error(c));
    /* ...and the next one waits for the daemon started 300 ms later. */
    call_t k = {.c = c, .op = op, .x = &x, .y = &y};
    pthread_t th;
    cr_assert(pthread_create(&th, NULL, call_thread, &k) == 0);
    mxt_sleep_ms(300);
    mxt_daemon_restart(&d_, NULL);
    pthread_join(th, NULL);
    cr_assert_eq(k.rc, 0, "the call waiting for the restart: %s: %s", mxop_err_name(k.rc),
                 mxop_last_error(c));
    cr_assert(mxt_relu_calls(c, 2, 3, why, sizeof(why)) == NULL, "%s", why);
    cr_assert_eq(mxop_region_release(c, reg), 0, "%s", mxop_last_error(c));
    mxop_close(c);
}

/* A stateful op's instance is lost with its daemon: MXOP_ESTATE_LOST naming it, then a new one
 * works. */
Test(reconnect, a_state_is_reported_lost_then_made_again, .timeout = 120, .fini = fini)
{
    mxt_daemon_start(&d_, NULL);
    mxop_client_t *c = client_on(MXOP_RECONNECT_DEFAULT, 20000, "running_mean.so");
    const mxop_op_t *op = mxt_op(c, "running_mean_norm");
    mxop_shape_t s = {2, {2, 2}};
    int32_t dt = MXOP_F64;
    uint64_t state;
    cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &s, &state), 0, "%s", mxop_last_error(c));
    int64_t shape[] = {2, 2};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 2, shape, 3, &x);
    mxt_array(c, MXOP_F64, 2, shape, 4, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .state = state};
    cr_assert_eq(mxop_forward(c, op, &call, &x, 1, &y, 1), 0, "%s", mxop_last_error(c));

    mxt_daemon_kill(&d_, SIGKILL);
    mxt_daemon_restart(&d_, NULL);
    int rc = mxop_forward(c, op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ESTATE_LOST, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "running_mean_norm") != NULL, "%s", mxop_last_error(c));
    /* Destroying the lost instance is fine; a new one works. */
    cr_assert_eq(mxop_state_destroy(c, state), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &s, &state), 0, "%s", mxop_last_error(c));
    call.state = state;
    cr_assert_eq(mxop_forward(c, op, &call, &x, 1, &y, 1), 0, "%s", mxop_last_error(c));
    mxop_close(c);
}

/*
 * After a restart without one of the client's libraries, the others are
 * loaded again and work; an op of the missing one fails naming itself.
 */
Test(reconnect, an_op_gone_after_the_restart_is_named, .timeout = 120, .fini = fini)
{
    mxt_daemon_start(&d_, NULL);
    mxop_client_t *c = client_on(MXOP_RECONNECT_DEFAULT, 20000, "running_mean.so");
    const mxop_op_t *gone = mxt_op(c, "running_mean_norm");
    char why[512];
    cr_assert(mxt_relu_calls(c, 1, 2, why, sizeof(why)) == NULL, "%s", why);
    mxt_daemon_kill(&d_, SIGKILL);
    char lib[600];
    snprintf(lib, sizeof(lib), "%s/running_mean.so", d_.plugins);
    cr_assert_eq(unlink(lib), 0, "%s: %s", lib, strerror(errno));
    mxt_daemon_restart(&d_, NULL);
    /* relu.so was loaded first, running_mean.so last: the session still has relu. */
    cr_assert(mxt_relu_calls(c, 2, 3, why, sizeof(why)) == NULL, "%s", why);
    int64_t shape[] = {2, 2};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 2, shape, 3, &x);
    mxt_array(c, MXOP_F64, 2, shape, 4, &y);
    int rc = mxop_forward(c, gone, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EUNKNOWN_OP, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "running_mean_norm") != NULL, "%s", mxop_last_error(c));
    mxop_close(c);
}

/* Reconnection off (the option, or MXOP_RECONNECT=0): MXOP_EDISCONNECTED after a restart. */
static void expect_no_reconnect(mxop_client_t *c)
{
    char why[512];
    cr_assert(mxt_relu_calls(c, 1, 2, why, sizeof(why)) == NULL, "%s", why);
    mxt_daemon_kill(&d_, SIGKILL);
    mxt_daemon_restart(&d_, NULL);
    const mxop_op_t *op = mxt_op(c, "relu");
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    for (int i = 0; i < 2; i++) {
        int rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
        cr_assert_eq(rc, MXOP_EDISCONNECTED, "call %d got %s: %s", i, mxop_err_name(rc),
                     mxop_last_error(c));
        cr_assert(strstr(mxop_last_error(c), "reconnection is off") != NULL, "call %d: %s", i,
                  mxop_last_error(c));
    }
    mxop_close(c);
}

Test(reconnect, off_by_option_the_call_fails_disconnected, .timeout = 60, .fini = fini)
{
    mxt_daemon_start(&d_, NULL);
    expect_no_reconnect(client_on(MXOP_RECONNECT_OFF, 20000, NULL));
}

Test(reconnect, off_by_environment_the_call_fails_disconnected, .timeout = 60, .fini = fini)
{
    setenv("MXOP_RECONNECT", "0", 1);
    mxt_daemon_start(&d_, NULL);
    expect_no_reconnect(client_on(MXOP_RECONNECT_DEFAULT, 20000, NULL));
}

/* No daemon comes back: a clear error within the call's timeout, and no descriptor left behind. */
Test(reconnect, no_daemon_back_fails_in_time_and_leaks_nothing, .timeout = 60, .fini = fini)
{
    mxt_daemon_start(&d_, NULL);
    int fds0 = mxt_fd_count(getpid());
    mxop_client_t *c = client_on(MXOP_RECONNECT_DEFAULT, 1500, NULL);
    const mxop_op_t *op = mxt_op(c, "relu");
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    cr_assert_eq(mxop_forward(c, op, NULL, &x, 1, &y, 1), 0, "%s", mxop_last_error(c));
    mxt_daemon_kill(&d_, SIGKILL);
    int fds1 = -1;
    for (int i = 0; i < 3; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s_taken = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        cr_assert_eq(rc, MXOP_EDISCONNECTED, "call %d got %s: %s", i, mxop_err_name(rc),
                     mxop_last_error(c));
        cr_assert(strstr(mxop_last_error(c), "could not reconnect") != NULL, "%s",
                  mxop_last_error(c));
        cr_assert(s_taken < 15.0, "call %d took %.1f s", i, s_taken);
        int n = mxt_fd_count(getpid());
        if (fds1 < 0)
            fds1 = n;
        cr_assert_eq(n, fds1, "call %d left descriptors: %d, then %d", i, fds1, n);
    }
    mxop_close(c);
    cr_assert_eq(mxt_fd_count(getpid()), fds0, "descriptors left after close");
    d_.pid = 0;
}
