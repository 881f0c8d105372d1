/*
 * tests/test_fastpath.c - the data path: many calls in a row, several
 * sessions at once, a crash mid-call, frames too large for the mailbox, a
 * worker killed while idle, and an idle session that burns no CPU.
 *
 * The tests use the session's default path, which scripts/run-c-tests.sh
 * sets with MXOP_DATA_PATH (a pass with "shm" and one with "socket"); the
 * few that are about the mailbox itself ask for it explicitly.  Nothing
 * here is timed except the idle CPU check, which has a wide margin.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "harness.h"
#include "shm/region.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

/*
 * The libraries these tests load are not trusted by the default daemon, so
 * its sessions run in scratch mode, where the worker holds the regions
 * read-only.  The tests about the worker's writable views (first use of a
 * region) run again against a daemon that trusts them.
 */
static void setup_trusted(void)
{
    const char *args[] = {
        "--trusted-library", "relu.so", "--trusted-library", "noop.so", "--trusted-library",
        "crash.so",          NULL};
    mxt_daemon_start(&daemon_, args);
}

TestSuite(fastpath, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(fastpath_trusted, .init = setup_trusted, .fini = teardown, .timeout = 60);

/* The path a session takes by default in this run of the suite. */
static int expected_path(void)
{
    const char *e = getenv("MXOP_DATA_PATH");
    return e != NULL && strcmp(e, "socket") == 0 ? MXOP_DATA_PATH_SOCKET : MXOP_DATA_PATH_SHM;
}

static mxop_client_t *connect_path(int path)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {
        .struct_size = sizeof(opts), .timeout_ms = 20000, .data_path = path};
    int rc = mxop_connect(daemon_.sock, &opts, &c);
    cr_assert_eq(rc, 0, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    const char *libs[] = {"relu.so", "crash.so", "noop.so", NULL};
    for (int i = 0; libs[i] != NULL; i++) {
        rc = mxop_load_library(c, libs[i]);
        cr_assert_eq(rc, 0, "load %s: %s: %s", libs[i], mxop_err_name(rc), mxop_last_error(c));
    }
    if (path != MXOP_DATA_PATH_DEFAULT)
        cr_assert_eq(mxop_data_path(c), path, "the session did not take the path it asked for");
    else
        cr_assert_eq(mxop_data_path(c), expected_path());
    return c;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Fills x with values that differ per call, so a stale result cannot pass. */
static void fill(mxop_array_t *x, unsigned call)
{
    float *p = x->data;
    size_t n = mxt_elems(x);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((int)((i * 7 + call * 13) % 17) - 8) + (float)call * 1e-3f;
}

/* Runs relu `calls` times on fresh values; returns the first failure's text, or NULL. */
static const char *relu_calls(mxop_client_t *c, int calls, char *why, size_t len)
{
    const mxop_op_t *op = NULL;
    if (mxop_op_find(c, "relu", &op) != 0)
        return "no op relu";
    int64_t s[] = {64};
    mxop_array_t x, y;
    if (mxop_array_alloc(c, MXOP_F32, 1, s, &x) != 0 || mxop_array_alloc(c, MXOP_F32, 1, s, &y))
        return "mxop_array_alloc failed";
    const char *fail = NULL;
    for (int k = 0; k < calls && fail == NULL; k++) {
        fill(&x, (unsigned)k);
        memset(y.data, 0xff, y.nbytes);
        int rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
        if (rc != 0) {
            snprintf(why, len, "call %d: %s: %s", k, mxop_err_name(rc), mxop_last_error(c));
            fail = why;
            break;
        }
        const float *in = x.data, *out = y.data;
        for (int i = 0; i < 64; i++) {
            float want = in[i] > 0 ? in[i] : 0;
            if (out[i] != want) {
                snprintf(why, len, "call %d, element %d: got %g, expected %g", k, i, out[i], want);
                fail = why;
                break;
            }
        }
    }
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    return fail;
}

Test(fastpath, thousands_of_calls_in_a_row_are_all_right)
{
    char why[512];
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    const char *fail = relu_calls(c, 5000, why, sizeof(why));
    cr_assert_null(fail, "%s", fail);
    /* The null op, which has no tensors at all. */
    const mxop_op_t *noop = mxt_op(c, "noop");
    for (int k = 0; k < 2000; k++) {
        int rc = mxop_forward(c, noop, NULL, NULL, 0, NULL, 0);
        cr_assert_eq(rc, 0, "noop %d: %s: %s", k, mxop_err_name(rc), mxop_last_error(c));
    }
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.calls, 7000);
    cr_assert_eq(st.errors, 0);
    cr_assert_eq(mxop_data_path(c), expected_path());
    mxop_close(c);
}

Test(fastpath, calls_longer_than_the_spin_wake_the_client)
{
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    const char *attrs[] = {"ms", "3", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    for (int k = 0; k < 20; k++) {
        fill(&x, (unsigned)k);
        int rc = mxop_forward(c, mxt_op(c, "sleep"), &call, &x, 1, &y, 1);
        cr_assert_eq(rc, 0, "sleep %d: %s: %s", k, mxop_err_name(rc), mxop_last_error(c));
        cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0, "call %d: wrong result", k);
        /* And a gap longer than the worker's spin before the next call. */
        sleep_ms(1);
    }
    mxop_close(c);
}

typedef struct worker_arg {
    const char *sock;
    int calls;
    int path;
    char why[512];
    const char *fail;
} worker_arg_t;

/* One thread, one session: Criterion's asserts stay on the main thread. */
static void *session_thread(void *p)
{
    worker_arg_t *a = p;
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .timeout_ms = 20000};
    int rc = mxop_connect(a->sock, &opts, &c);
    if (rc != 0) {
        snprintf(a->why, sizeof(a->why), "connect: %s", mxop_connect_error());
        a->fail = a->why;
        return NULL;
    }
    if (mxop_load_library(c, "relu.so") != 0) {
        snprintf(a->why, sizeof(a->why), "load: %s", mxop_last_error(c));
        a->fail = a->why;
    } else {
        a->path = mxop_data_path(c);
        a->fail = relu_calls(c, a->calls, a->why, sizeof(a->why));
    }
    mxop_close(c);
    return NULL;
}

Test(fastpath, several_sessions_at_once_each_get_their_own_results)
{
    enum { N = 4 };
    pthread_t t[N];
    worker_arg_t a[N];
    for (int i = 0; i < N; i++) {
        memset(&a[i], 0, sizeof(a[i]));
        a[i].sock = daemon_.sock;
        a[i].calls = 1500;
        cr_assert_eq(pthread_create(&t[i], NULL, session_thread, &a[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_assert_null(a[i].fail, "session %d: %s", i, a[i].fail);
        cr_assert_eq(a[i].path, expected_path(), "session %d took path %d", i, a[i].path);
    }
}

Test(fastpath, crash_mid_call_is_reported_and_the_next_call_succeeds)
{
    char why[512];
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    for (int round = 0; round < 3; round++) {
        cr_assert_null(relu_calls(c, 50, why, sizeof(why)), "%s", why);
        mxop_stats_t before, after;
        cr_assert_eq(mxop_stats(c, &before), 0);
        int rc = mxop_forward(c, mxt_op(c, "segv"), NULL, &x, 1, &y, 1);
        cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
        const char *msg = mxop_last_error(c);
        cr_assert(strstr(msg, "segv") != NULL && strstr(msg, "SIGSEGV") != NULL,
                  "message '%s' names neither the op nor the signal", msg);
        cr_assert_null(relu_calls(c, 50, why, sizeof(why)), "after the crash: %s", why);
        cr_assert_eq(mxop_stats(c, &after), 0);
        cr_assert_eq(after.worker_restarts, before.worker_restarts + 1);
        cr_assert_neq(after.worker_pid, before.worker_pid);
        /* The new worker got a mailbox of its own. */
        cr_assert_eq(mxop_data_path(c), expected_path());
    }
    mxop_close(c);
}

static pid_t worker_of(mxop_client_t *c)
{
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    return (pid_t)st.worker_pid;
}

static int restarted(void *arg)
{
    pid_t *pids = arg;
    pid_t kids[8];
    int n = mxt_children(daemon_.pid, kids, 8);
    for (int i = 0; i < n; i++)
        if (kids[i] != pids[0])
            return 1;
    return 0;
}

Test(fastpath, worker_killed_while_idle_does_not_fail_the_next_call)
{
    char why[512];
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    cr_assert_null(relu_calls(c, 20, why, sizeof(why)), "%s", why);
    pid_t old = worker_of(c);
    cr_assert_eq(kill(old, SIGKILL), 0);
    cr_assert(mxt_wait_until(restarted, &old, 5000), "the daemon did not replace the worker");
    /* The dead worker never saw this call, so it goes to the replacement. */
    cr_assert_null(relu_calls(c, 20, why, sizeof(why)), "after the kill: %s", why);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.worker_restarts, 1);
    cr_assert_eq(st.errors, 0);
    cr_assert_neq((pid_t)st.worker_pid, old);
    cr_assert_eq(mxop_data_path(c), expected_path());
    mxop_close(c);
}

Test(fastpath, frames_too_large_for_the_mailbox_take_the_socket)
{
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_SHM);
    /* 64 attributes of 1.2 KB: a call of about 77 KB, more than a slot holds. */
    enum { N_ATTRS = 64, VLEN = 1200 };
    static char keys[N_ATTRS][8], vals[N_ATTRS][VLEN + 1];
    const char *attrs[2 * N_ATTRS + 1];
    for (int i = 0; i < N_ATTRS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        memset(vals[i], 'a' + i % 26, VLEN);
        vals[i][VLEN] = '\0';
        attrs[2 * i] = keys[i];
        attrs[2 * i + 1] = vals[i];
    }
    attrs[2 * N_ATTRS] = NULL;
    mxop_call_t big = {.struct_size = sizeof(big), .attrs = attrs};
    int64_t s[] = {256};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 3, &x);
    mxt_array(c, MXOP_F32, 1, s, 4, &y);
    for (int k = 0; k < 10; k++) {
        fill(&x, (unsigned)k);
        memset(y.data, 0, y.nbytes);
        /* Large and small calls in turn: the mailbox stays in use between them. */
        int rc = mxop_forward(c, mxt_op(c, "identity"), k % 2 ? &big : NULL, &x, 1, &y, 1);
        cr_assert_eq(rc, 0, "call %d: %s: %s", k, mxop_err_name(rc), mxop_last_error(c));
        cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0, "call %d: wrong result", k);
    }
    cr_assert_eq(mxop_data_path(c), MXOP_DATA_PATH_SHM);
    mxop_close(c);
}

Test(fastpath, the_socket_path_can_be_chosen_per_session)
{
    char why[512];
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_SOCKET);
    cr_assert_null(relu_calls(c, 200, why, sizeof(why)), "%s", why);
    cr_assert_eq(mxop_data_path(c), MXOP_DATA_PATH_SOCKET);
    mxop_close(c);
}

Test(fastpath, a_bad_data_path_is_refused)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .data_path = 7};
    cr_assert_eq(mxop_connect(daemon_.sock, &opts, &c), MXOP_EINVAL);
    cr_assert_null(c);
    cr_assert(strstr(mxop_connect_error(), "data_path") != NULL, "%s", mxop_connect_error());

    setenv("MXOP_DATA_PATH", "carrier-pigeon", 1);
    opts.data_path = MXOP_DATA_PATH_DEFAULT;
    cr_assert_eq(mxop_connect(daemon_.sock, &opts, &c), MXOP_EINVAL);
    cr_assert(strstr(mxop_connect_error(), "MXOP_DATA_PATH") != NULL, "%s", mxop_connect_error());
    /* An explicit choice does not read the variable. */
    opts.data_path = MXOP_DATA_PATH_SOCKET;
    cr_assert_eq(mxop_connect(daemon_.sock, &opts, &c), 0, "%s", mxop_connect_error());
    mxop_close(c);
    /* An old caller's struct, without data_path, gets the default. */
    unsetenv("MXOP_DATA_PATH");
    opts.struct_size = offsetof(mxop_connect_opts_t, data_path);
    opts.data_path = 7;
    cr_assert_eq(mxop_connect(daemon_.sock, &opts, &c), 0, "%s", mxop_connect_error());
    cr_assert_eq(mxop_data_path(c), MXOP_DATA_PATH_SHM);
    mxop_close(c);
}

/* utime + stime of a process in milliseconds, from /proc. */
static long cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command name, which is in parentheses and may hold spaces. */
    const char *p = strrchr(buf, ')');
    cr_assert_not_null(p);
    unsigned long ut = 0, st = 0;
    cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
    return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

static long self_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

Test(fastpath, an_idle_session_burns_no_cpu)
{
    char why[512];
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    cr_assert_null(relu_calls(c, 2000, why, sizeof(why)), "%s", why);
    pid_t w = worker_of(c);
    /* Both sides were just busy; now neither may spin or wake up. */
    long c0 = self_cpu_ms(), w0 = cpu_ms(w);
    sleep_ms(1000);
    long c1 = self_cpu_ms(), w1 = cpu_ms(w);
    cr_assert_lt(c1 - c0, 50, "the idle client used %ld ms of CPU in a second", c1 - c0);
    cr_assert_lt(w1 - w0, 50, "the idle worker used %ld ms of CPU in a second", w1 - w0);
    /* And it still answers. */
    cr_assert_null(relu_calls(c, 10, why, sizeof(why)), "after the pause: %s", why);
    mxop_close(c);
}

/*
 * A new region's writable view is faulted in by a background thread of the
 * worker after the map is answered (server/worker/prefill.c), and by the
 * first call under its outputs.  Calls into regions being faulted in get
 * their results whole; regions released while the thread works on them
 * (their views unmapped under it) cost no crash, and the worker stays.
 */
/* New regions, as inputs and outputs, while their views are faulted in; some released at once. */
static void new_regions_while_faulted_in(void)
{
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    pid_t worker = mxt_worker_pid(c);
    const size_t bytes = 24u << 20, n = bytes / sizeof(float);
    const int64_t shape[1] = {(int64_t)n};
    for (int round = 0; round < 3; round++) {
        uint32_t rin, rout;
        void *bin, *bout;
        cr_assert_eq(mxop_region_create(c, bytes, &rin, &bin), 0, "%s", mxop_last_error(c));
        float *x = bin;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((int)((i * 7 + (size_t)round) % 17) - 8);
        /* The output region is new: its first call runs while it is faulted in. */
        cr_assert_eq(mxop_region_create(c, bytes, &rout, &bout), 0, "%s", mxop_last_error(c));
        mxop_array_t ax, ay;
        cr_assert_eq(mxop_array_view(c, rin, 0, MXOP_F32, 1, shape, &ax), 0);
        cr_assert_eq(mxop_array_view(c, rout, 0, MXOP_F32, 1, shape, &ay), 0);
        int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &ax, 1, &ay, 1);
        cr_assert_eq(rc, 0, "relu: %s: %s", mxop_err_name(rc), mxop_last_error(c));
        const float *y = bout;
        for (size_t i = 0; i < n; i++) {
            float want = x[i] > 0 ? x[i] : 0;
            if (y[i] != want)
                cr_assert_fail("round %d, element %zu: got %g, expected %g", round, i, y[i], want);
        }
        cr_assert_eq(mxop_region_release(c, rin), 0);
        cr_assert_eq(mxop_region_release(c, rout), 0);
    }
    /* Released at once, while their views are being faulted in. */
    for (int i = 0; i < 8; i++) {
        uint32_t r;
        void *b;
        cr_assert_eq(mxop_region_create(c, 32u << 20, &r, &b), 0, "%s", mxop_last_error(c));
        cr_assert_eq(mxop_region_release(c, r), 0, "%s", mxop_last_error(c));
    }
    char why[256];
    const char *fail = relu_calls(c, 50, why, sizeof(why));
    cr_assert_null(fail, "%s", fail);
    cr_assert_eq(mxt_worker_pid(c), worker, "the worker was replaced");
    mxop_close(c);
}

Test(fastpath, new_regions_are_right_while_faulted_in_and_released_at_once)
{
    new_regions_while_faulted_in();
}

/* The same with writable views in the worker, which it faults in behind the answer. */
Test(fastpath_trusted, new_regions_are_right_while_faulted_in_and_released_at_once)
{
    new_regions_while_faulted_in();
}

/*
 * Registers `fd` by hand (the client library would pick reserved_from
 * itself, shm/region.h), so that a test can leave the head unreserved.
 * With `device`, the request also carries the form of a device region (a
 * 64-byte CUDA IPC handle, device 0).  Returns the status; *id gets the
 * region on success, *msg the daemon's words on failure.
 */
static int register_by_hand(mxop_client_t *c, int fd, size_t bytes, size_t reserved_from,
                            int device, uint32_t *id, const char **msg)
{
    static uint8_t handle[64];
    Mxop__RegisterRegion body = MXOP__REGISTER_REGION__INIT;
    body.size = bytes;
    body.reserved_from = reserved_from;
    if (device) {
        body.cuda_ipc_handle.data = handle;
        body.cuda_ipc_handle.len = sizeof(handle);
        body.device = 0;
    }
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_REGISTER_REGION;
    req.register_region = &body;
    Mxop__Reply *r;
    int rc = mxop__ctl_request(c, &req, &fd, 1, 20000, &r, NULL);
    *msg = mxop_last_error(c);
    if (rc == 0)
        *id = r->register_region->region;
    return rc;
}

/*
 * A client reserves the head of a large region while its registration is
 * on its way (client/regions.c).  Faulting that head in before then would
 * allocate the engine's pages in the worker (its cgroup pays), so the
 * worker leaves it alone until a call writes there: the region's memfd
 * keeps exactly the pages the client reserved, well after the worker
 * faulted in the rest.
 */
Test(fastpath_trusted, the_worker_leaves_alone_the_head_a_client_still_reserves)
{
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    const size_t bytes = 32u << 20, half = bytes / 2;
    int fd = -1;
    cr_assert_eq(mxop__region_create_fd_sealable("mxop-test", bytes, 1, half, &fd), 0);
    uint32_t id = 0;
    const char *msg;
    int rc = register_by_hand(c, fd, bytes, half, 0, &id, &msg);
    cr_assert_eq(rc, 0, "register: %s: %s", mxop_err_name(rc), msg);
    /*
     * Ample time for the worker to fault in the upper half (and the lower if
     * it would), and for the session's warm spare to start and map it too.
     */
    mxt_sleep_ms(500);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq((size_t)st.st_blocks * 512, half,
                 "the memfd holds %lld bytes; the client reserved %zu of them",
                 (long long)st.st_blocks * 512, half);
    /* The session goes on; closing it releases the region. */
    char why[256];
    const char *fail = relu_calls(c, 20, why, sizeof(why));
    cr_assert_null(fail, "%s", fail);
    mxop_close(c);
    close(fd);
}

/* A reserved_from past the region, or on a device region, is refused by name. */
Test(fastpath, a_reserved_from_past_the_region_is_refused)
{
    /* A first session, closed, so that the daemon's lazily made state is in the baseline. */
    mxop_close(connect_path(MXOP_DATA_PATH_DEFAULT));
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    const size_t bytes = 8u << 20;
    int fd = -1;
    cr_assert_eq(mxop__region_create_fd_sealable("mxop-test", bytes, 1, 0, &fd), 0);
    uint32_t id = 0;
    const char *msg;
    int rc = register_by_hand(c, fd, bytes, bytes + 4096, 0, &id, &msg);
    cr_assert_eq(rc, MXOP_EINVAL, "past the region: got %s", mxop_err_name(rc));
    cr_assert(strstr(msg, "reserved_from") != NULL, "the error does not name the field: %s", msg);
    rc = register_by_hand(c, fd, bytes, 4096, 1, &id, &msg);
    cr_assert_eq(rc, MXOP_EINVAL, "on a device region: got %s", mxop_err_name(rc));
    cr_assert(strstr(msg, "reserved_from") != NULL, "the error does not name the field: %s", msg);
    /* The session goes on, another one is untouched, and nothing is left. */
    char why[256];
    const char *fail = relu_calls(c, 5, why, sizeof(why));
    cr_assert_null(fail, "%s", fail);
    mxt_other_session_correct(&daemon_);
    close(fd);
    mxop_close(c);
    mxt_baseline_expect(&base);
}

/*
 * With a mailbox, a client says how far it has reserved the region it
 * registers (the mailbox's reserve words, shm/mailbox.h), and the worker
 * faults in each part as soon as it is said to be reserved, before any
 * call.  Here the words claim the whole region is reserved though only the
 * upper half is: the worker's faults then allocate the lower half too, so
 * the memfd fills up without a call.  (A client's words are believed: the
 * engine is trusted, and a wrong word only moves who allocates a page.)
 */
Test(fastpath_trusted, the_worker_follows_a_clients_word_on_what_it_reserved)
{
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_DEFAULT);
    char why[256];
    const char *fail = relu_calls(c, 2, why, sizeof(why));
    cr_assert_null(fail, "%s", fail);
    if (c->mbox.sh == NULL)
        cr_skip_test("the session has no mailbox");
    const size_t bytes = 32u << 20, half = bytes / 2;
    int fd = -1;
    cr_assert_eq(mxop__region_create_fd_sealable("mxop-test", bytes, 1, half, &fd), 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    atomic_store(&c->mbox.sh->reserve_from, 0);
    atomic_store(&c->mbox.sh->reserve_ino, (uint64_t)st.st_ino);
    uint32_t id = 0;
    const char *msg;
    int rc = register_by_hand(c, fd, bytes, half, 0, &id, &msg);
    cr_assert_eq(rc, 0, "register: %s: %s", mxop_err_name(rc), msg);
    size_t held = 0;
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(fstat(fd, &st), 0);
        held = (size_t)st.st_blocks * 512;
        if (held == bytes)
            break;
        mxt_sleep_ms(10);
    }
    atomic_store(&c->mbox.sh->reserve_ino, 0);
    cr_assert_eq(held, bytes,
                 "the memfd holds %zu of %zu bytes: the worker did not fault in the "
                 "part it was told is reserved",
                 held, bytes);
    fail = relu_calls(c, 20, why, sizeof(why));
    cr_assert_null(fail, "%s", fail);
    mxop_close(c);
    close(fd);
}
