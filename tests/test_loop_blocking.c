/*
 * tests/test_loop_blocking.c - the daemon's loop never waits for a process
 * it started (server/daemon/worker/spawn.c, worker/worker.c, session/deadline.c).
 *
 * One client (B, session 1) is served while the start of another
 * session's worker (A, session 2) is stopped (SIGSTOP) at each stage of
 * its start: between clone and exec, at the worker's own start, before its
 * sandbox, in a library's init; its live worker and its warm spare.  B's
 * control requests (Stats, a library load) and calls must be answered
 * within their deadlines while A's process stays stopped; the stopped
 * process must be killed, and A's session must recover (a request that
 * was waiting on the stopped worker fails with an error naming the stop).
 * Nothing stays stopped or running after.
 *
 * The stages before a library runs have no observable mark from outside,
 * so the stop comes from the test-only hook of common/test_stop.h
 * (MXOP_TEST_STOP, MXOP_TEST_STOP_DIR: the hook leaves a file there when it
 * fires, once per stage).  The worker stops itself at "start" and
 * "sandbox", which a pid 1 of its own namespace cannot do: those run under
 * --sandbox basic.  A library's init stops its worker with
 * tests/plugins/stop_init.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* B's deadline for every call and control request (generous: the machine is shared). */
#define B_DEADLINE_MS 3000
/* How long B is served after the stop was seen. */
#define B_SERVED_MS 2500

static mxt_daemon_t daemon_;
static char stop_dir[64];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void teardown(void)
{
    /* The files first: the daemon's stop asserts, and an assertion ends the teardown. */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", stop_dir);
    if (stop_dir[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", stop_dir);
    unsetenv("MXOP_TEST_STOP");
    unsetenv("MXOP_TEST_STOP_DIR");
    mxt_daemon_stop(&daemon_);
}

/* The directory the hook marks its stages in (and other files of a test), made once. */
static void make_stop_dir(void)
{
    if (stop_dir[0] != '\0')
        return;
    snprintf(stop_dir, sizeof(stop_dir), "/tmp/mxt-stop-XXXXXX");
    cr_assert(mkdtemp(stop_dir) != NULL);
    chmod(stop_dir, 0777); /* a worker may run as another uid */
}

/* Starts the daemon with the stop hook at `stage` of session 2's worker of `generation`. */
static void start_with(const char *sandbox, const char *stage, int generation,
                       const char *const *more)
{
    make_stop_dir();
    if (stage != NULL) {
        char v[64];
        snprintf(v, sizeof(v), "%s:2:%d", stage, generation);
        setenv("MXOP_TEST_STOP", v, 1);
        setenv("MXOP_TEST_STOP_DIR", stop_dir, 1);
    }
    const char *args[16] = {"--sandbox", sandbox};
    for (int i = 0; more != NULL && more[i] != NULL && i < 13; i++)
        args[2 + i] = more[i];
    mxt_daemon_start(&daemon_, args);
}

static void start(const char *sandbox, const char *stage, int generation)
{
    start_with(sandbox, stage, generation, NULL);
}

static mxop_client_t *connect_b(void)
{
    mxop_connect_opts_t o;
    memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
    o.timeout_ms = B_DEADLINE_MS;
    o.connect_timeout_ms = B_DEADLINE_MS;
    mxop_client_t *c = NULL;
    int rc = mxop_connect(daemon_.sock, &o, &c);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_connect_error());
    rc = mxop_load_library(c, "relu.so");
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    return c;
}

typedef struct stage_file {
    char path[128];
} stage_file_t;

static int exists(void *arg)
{
    return access(((stage_file_t *)arg)->path, F_OK) == 0;
}

/* Waits until the hook has fired for `stage` of session 2's worker `generation`. */
static void wait_stopped(const char *stage, int generation)
{
    stage_file_t f;
    snprintf(f.path, sizeof(f.path), "%s/%s-2-%d", stop_dir, stage, generation);
    cr_assert(mxt_wait_until(exists, &f, 10000), "the start never reached stage '%s'", stage);
}

/*
 * B for B_SERVED_MS: Stats, a control request the worker answers (a library
 * load), calls; each must succeed within its deadline.
 */
static void serve_b(mxop_client_t *b)
{
    int64_t until = now_ms() + B_SERVED_MS;
    int rounds = 0;
    while (now_ms() < until || rounds < 3) {
        int64_t t0 = now_ms();
        mxop_stats_t st;
        int rc = mxop_stats(b, &st);
        int64_t took = now_ms() - t0;
        cr_assert_eq(rc, 0, "B's Stats: %s: %s (after %lld ms)", mxop_err_name(rc),
                     mxop_last_error(b), (long long)took);
        cr_assert_lt(took, B_DEADLINE_MS, "B's Stats took %lld ms", (long long)took);

        t0 = now_ms();
        rc = mxop_load_library(b, rounds % 2 ? "relu.so" : "gemm.so");
        took = now_ms() - t0;
        cr_assert_eq(rc, 0, "B's LoadLibrary: %s: %s (after %lld ms)", mxop_err_name(rc),
                     mxop_last_error(b), (long long)took);
        cr_assert_lt(took, B_DEADLINE_MS, "B's LoadLibrary took %lld ms", (long long)took);

        t0 = now_ms();
        char why[256];
        const char *fail = mxt_relu_calls(b, 1, 3, why, sizeof(why));
        took = now_ms() - t0;
        cr_assert_null(fail, "B's calls: %s", fail);
        cr_assert_lt(took, B_DEADLINE_MS, "B's calls took %lld ms", (long long)took);
        rounds++;
        mxt_sleep_ms(50);
    }
}

/* A's side, in a thread: connect, then load relu.so until it works, then call it. */
typedef struct victim {
    int connect_rc;
    int first_load_rc;
    char first_load_err[512];
    int load_rc;
    char err[512];
    const char *call_fail;
    char why[256];
    const char *first_lib; /* loaded first, expected to fail (a library that stops), or NULL */
    const char *linger;    /* a stage file: A waits for it, is served on, then closes */
} victim_t;

static void *victim_main(void *arg)
{
    victim_t *v = arg;
    mxop_client_t *a = NULL;
    v->connect_rc = mxop_connect(daemon_.sock, NULL, &a);
    if (v->connect_rc != 0) {
        snprintf(v->err, sizeof(v->err), "%s", mxop_connect_error());
        return NULL;
    }
    v->first_load_rc = mxop_load_library(a, v->first_lib != NULL ? v->first_lib : "relu.so");
    snprintf(v->first_load_err, sizeof(v->first_load_err), "%s",
             v->first_load_rc ? mxop_last_error(a) : "");
    /* The session recovers: a new worker serves it within a few attempts. */
    v->load_rc = v->first_lib == NULL ? v->first_load_rc : -1;
    int64_t until = now_ms() + 20000;
    while (v->load_rc != 0 && now_ms() < until) {
        v->load_rc = mxop_load_library(a, "relu.so");
        if (v->load_rc != 0) {
            snprintf(v->err, sizeof(v->err), "%s", mxop_last_error(a));
            mxt_sleep_ms(100);
        }
    }
    if (v->load_rc == 0)
        v->call_fail = mxt_relu_calls(a, 2, 3, v->why, sizeof(v->why));
    if (v->linger != NULL && v->call_fail == NULL) {
        /* Its spare's start is stopped meanwhile: the session serves on. */
        stage_file_t f;
        snprintf(f.path, sizeof(f.path), "%s", v->linger);
        if (mxt_wait_until(exists, &f, 10000)) {
            int64_t end = now_ms() + B_SERVED_MS;
            while (v->call_fail == NULL && now_ms() < end) {
                v->call_fail = mxt_relu_calls(a, 2, 3, v->why, sizeof(v->why));
                mxt_sleep_ms(50);
            }
        }
    }
    mxop_close(a);
    return NULL;
}

static int none_stopped(void *arg)
{
    (void)arg;
    pid_t kids[64];
    int n = mxt_children(daemon_.pid, kids, 64);
    for (int i = 0; i < n; i++) {
        char state[32];
        if (mxt_proc_field(kids[i], "status", "State", state, sizeof(state)) == 0 &&
            (state[0] == 'T' || state[0] == 't'))
            return 0;
    }
    return 1;
}

static int no_children(void *arg)
{
    (void)arg;
    pid_t kids[8];
    return mxt_children(daemon_.pid, kids, 8) == 0;
}

/* Nothing the daemon started stays stopped; with both sessions closed, nothing runs. */
static void expect_nothing_left(mxop_client_t *b)
{
    cr_assert(mxt_wait_until(none_stopped, NULL, 10000), "a stopped process was left");
    mxop_close(b);
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    cr_assert(mxt_wait_until(no_children, NULL, 10000), "a process of the daemon is still running");
}

/*
 * Session 2's live worker (generation 1) stopped at `stage`: B is served
 * meanwhile, and A's session recovers.  A's first request may meet the
 * stopped worker and fail, naming the stop.
 */
static void live_worker_stopped(const char *sandbox, const char *stage)
{
    start(sandbox, stage, 1);
    mxop_client_t *b = connect_b();
    victim_t v = {0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, victim_main, &v), 0);
    wait_stopped(stage, 1);
    serve_b(b);
    pthread_join(th, NULL);
    cr_assert_eq(v.connect_rc, 0, "A's connect: %s: %s", mxop_err_name(v.connect_rc), v.err);
    if (v.first_load_rc != 0)
        cr_assert(strstr(v.first_load_err, "stopped") != NULL,
                  "A's request failed without naming the stop: %s: %s",
                  mxop_err_name(v.first_load_rc), v.first_load_err);
    cr_assert_eq(v.load_rc, 0, "A's session did not recover: %s: %s", mxop_err_name(v.load_rc),
                 v.err);
    cr_assert_null(v.call_fail, "A's calls: %s", v.call_fail);
    expect_nothing_left(b);
}

/* Session 2's spare (generation 2) stopped at `stage`: B and A are served; the spare is replaced.
 */
static void spare_stopped(const char *sandbox, const char *stage)
{
    start(sandbox, stage, 2);
    mxop_client_t *b = connect_b();
    char linger[128];
    snprintf(linger, sizeof(linger), "%s/%s-2-2", stop_dir, stage);
    victim_t v = {.linger = linger};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, victim_main, &v), 0);
    wait_stopped(stage, 2);
    serve_b(b);
    pthread_join(th, NULL);
    cr_assert_eq(v.connect_rc, 0, "A's connect: %s: %s", mxop_err_name(v.connect_rc), v.err);
    cr_assert_eq(v.first_load_rc, 0, "A's load: %s: %s", mxop_err_name(v.first_load_rc),
                 v.first_load_err);
    cr_assert_null(v.call_fail, "A's calls: %s", v.call_fail);
    expect_nothing_left(b);
}

Test(loop_blocking, stopped_between_clone_and_exec_strict, .fini = teardown, .timeout = 90)
{
    live_worker_stopped("strict", "exec");
}

Test(loop_blocking, stopped_between_clone_and_exec_basic, .fini = teardown, .timeout = 90)
{
    live_worker_stopped("basic", "exec");
}

Test(loop_blocking, spare_stopped_between_clone_and_exec, .fini = teardown, .timeout = 90)
{
    spare_stopped("strict", "exec");
}

Test(loop_blocking, stopped_at_the_workers_own_start, .fini = teardown, .timeout = 90)
{
    live_worker_stopped("basic", "start");
}

Test(loop_blocking, stopped_before_its_sandbox, .fini = teardown, .timeout = 90)
{
    live_worker_stopped("basic", "sandbox");
}

Test(loop_blocking, spare_stopped_at_its_own_start, .fini = teardown, .timeout = 90)
{
    spare_stopped("basic", "start");
}

/* A library's init stops its worker: the load fails naming the stop; the session goes on. */
Test(loop_blocking, stopped_in_a_librarys_init, .fini = teardown, .timeout = 90)
{
    start("basic", NULL, 0);
    mxop_client_t *b = connect_b();
    victim_t v = {.first_lib = "stop_init.so"};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, victim_main, &v), 0);
    serve_b(b);
    pthread_join(th, NULL);
    cr_assert_eq(v.connect_rc, 0, "A's connect: %s: %s", mxop_err_name(v.connect_rc), v.err);
    cr_assert_neq(v.first_load_rc, 0, "a library that stops its worker loaded");
    cr_assert(strstr(v.first_load_err, "stopped") != NULL, "%s: %s", mxop_err_name(v.first_load_rc),
              v.first_load_err);
    cr_assert_eq(v.load_rc, 0, "A's session did not recover: %s: %s", mxop_err_name(v.load_rc),
                 v.err);
    cr_assert_null(v.call_fail, "A's calls: %s", v.call_fail);
    expect_nothing_left(b);
}

/* ------------------------------------------------------------------------ */
/* The audit's findings: each system call of the loop that could wait on someone else. */

static int file_exists(void *arg)
{
    return access((const char *)arg, F_OK) == 0;
}

/*
 * A FIFO planted under the temporary name of --metrics-file: open() for
 * writing would wait for a reader, in the loop (metrics.c).  The daemon
 * replaces it and serves on.
 */
Test(loop_blocking, a_fifo_at_the_metrics_files_name_does_not_hold_the_loop, .fini = teardown,
     .timeout = 60)
{
    make_stop_dir();
    char metrics[128];
    snprintf(metrics, sizeof(metrics), "%s/metrics.prom", stop_dir);
    const char *more[] = {"--metrics-file", metrics, "--metrics-interval-ms", "100", NULL};
    start_with("strict", NULL, 0, more);
    char fifo[160];
    snprintf(fifo, sizeof(fifo), "%s.tmp.%d", metrics, (int)daemon_.pid);
    cr_assert(mxt_wait_until(file_exists, metrics, 5000), "no metrics file");
    cr_assert_eq(mkfifo(fifo, 0666), 0, "mkfifo: %s", strerror(errno));
    cr_assert_eq(unlink(metrics), 0);
    mxop_client_t *b = connect_b();
    serve_b(b);
    cr_assert(mxt_wait_until(file_exists, metrics, 5000), "the metrics file was not written again");
    expect_nothing_left(b);
}

/* A: loads flood_sup.so and calls its op, which crashes its worker (in a thread). */
typedef struct flooder {
    int rc;
    char err[512];
} flooder_t;

static void *flooder_main(void *arg)
{
    flooder_t *f = arg;
    mxop_client_t *a = NULL;
    f->rc = mxop_connect(daemon_.sock, NULL, &a);
    if (f->rc != 0)
        return NULL;
    f->rc = mxop_load_library(a, "flood_sup.so");
    const mxop_op_t *op = NULL;
    if (f->rc == 0)
        f->rc = mxop_op_find(a, "flood_sup_crash", &op);
    if (f->rc == 0) {
        int64_t shape[] = {4};
        mxop_array_t x, y;
        if (mxop_array_alloc(a, MXOP_F32, 1, shape, &x) == 0 &&
            mxop_array_alloc(a, MXOP_F32, 1, shape, &y) == 0) {
            f->rc = mxop_forward(a, op, NULL, &x, 1, &y, 1);
            snprintf(f->err, sizeof(f->err), "%s", mxop_last_error(a));
        }
    }
    mxop_close(a);
    return NULL;
}

/*
 * A process an op left behind writes into its dead worker's supervisor
 * channel without pause: the daemon's read of what the channel holds at
 * the worker's exit (conn.c, mxop__conn_drain) is bounded, so the loop goes
 * on serving, reports the death and sweeps the writer.
 */
Test(loop_blocking, a_writer_on_a_dead_workers_channel_does_not_hold_the_loop, .fini = teardown,
     .timeout = 60)
{
    start("basic", NULL, 0);
    mxop_client_t *b = connect_b();
    flooder_t f = {0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, flooder_main, &f), 0);
    serve_b(b);
    pthread_join(th, NULL);
    cr_assert_eq(f.rc, MXOP_EWORKER_CRASHED, "%s: %s", mxop_err_name(f.rc), f.err);
    expect_nothing_left(b);
}
