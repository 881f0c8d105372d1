/*
 * bench/bench_mxop.c - what an mxop call costs, against the fastest
 * alternatives measured in the same run.
 *
 *     bench_mxop [BUILD_DIR]        (make bench runs it)
 *
 * It starts a private mxop-serverd (bench/lib/daemon.c) and measures, each
 * pair interleaved in rounds so that drift of the machine hits both sides:
 *
 *   1. the null op ("noop": no tensors) through mxop vs a raw Unix-socket
 *      ping-pong between two processes;
 *   2. relu on 1 MiB and 64 MiB of f32 and gemm 1024x1024 f32 through mxop
 *      vs the same plugin function called in-process (the same .so); relu
 *      also as a framework with the shared heap on makes it: its input in
 *      a shared-heap block, its output from mxop_shared_alloc_output (a
 *      warm block, freed after each call);
 *   3. relu with plain heap pointers (staged through the arena) vs
 *      zero-copy shared-memory arrays; zero-copy relu whose result the
 *      caller leaves unread between calls vs in-process (what section 2's
 *      row, which reads each result, pays for moving it between CPUs);
 *   4. registering a 64 MiB region, and the first op on it vs later ones;
 *   5. a worker crash (crash.so's segv) to the next successful call;
 *   6. 1, 2, 4 and 8 client processes calling the null op at once, on
 *      both data paths (aggregate calls/s against one process's, and the
 *      shared-memory path against the socket path);
 *   7. two threads of one process calling relu 4 MiB and softmax 64x160
 *      (each about 100 us), then gemm 96x96 (a short call) and 256x256 (on
 *      two BLAS threads) without a target, through one client of 2
 *      sessions vs one thread;
 *   8. memory integrity: the null op and relu 1 MiB and 64 MiB in a session
 *      in scratch mode (it loaded an untrusted library: outputs go through
 *      the scratch region and are copied into place) vs the same calls in a
 *      session whose libraries are all trusted (zero-copy).
 *
 * Every result is checked (bit-equal for relu, close for gemm) before its
 * time counts (section 3's unread relu: after its timed calls).  The table goes to stdout and to
 * BUILD/bench/results.csv and results.json.  MXOP_BENCH_SCALE (default 1) scales the iteration
 * counts; MXOP_BENCH_ONLY (e.g. "14") runs only the sections it names. The exit status is 1 when a
 * measurement could not be made or an answer was wrong; a missed target is reported, not an error.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/lib/daemon.h"
#include "bench/lib/env.h"
#include "bench/lib/inproc.h"
#include "bench/lib/pingpong.h"
#include "bench/lib/report.h"
#include "bench/lib/stats.h"
#include "mxop/client.h"

#define MIB ((size_t)1 << 20)

typedef struct bench {
    char build[PATH_MAX];
    double scale;
    const char *only; /* MXOP_BENCH_ONLY: the sections to run ("146"), NULL for all */
    mxb_daemon_t daemon;
    mxop_client_t *c; /* the main session: noop, relu, gemm */
    const mxop_op_t *noop, *relu, *gemm;
    mxb_inproc_t *relu_lib, *gemm_lib;
    const mxop_op_def_t *relu_def, *gemm_def;
} bench_t;

_Noreturn __attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    /* exit() runs the daemon's clean-up (daemon.c registered it). */
    exit(1);
}

static void check(mxop_client_t *c, int rc, const char *what)
{
    if (rc != 0)
        die("%s: %s: %s", what, mxop_err_name(rc), c != NULL ? mxop_last_error(c) : "");
}

/* An iteration count scaled by MXOP_BENCH_SCALE, never below `min`. */
static int iters(const bench_t *b, int n, int min)
{
    double v = n * b->scale;
    return v < min ? min : (int)v;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int want(const bench_t *b, char section)
{
    return b->only == NULL || b->only[0] == '\0' || strchr(b->only, section) != NULL;
}

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        die("out of memory (%zu bytes)", bytes);
    /* Touched now, so that page faults of fresh heap memory time nothing. */
    memset(p, 0, bytes);
    return p;
}

/* Values in [-1, 1), never 0, so that relu(x) and relu(-x) differ everywhere. */
static void fill_random(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float v = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
        x[i] = v != 0.0f ? v : 0.5f;
    }
}

static void negate(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = -x[i];
}

static void relu_ref(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

static mxop_array_t heap_array(void *data, int32_t ndim, const int64_t *shape, size_t bytes)
{
    mxop_array_t a;
    memset(&a, 0, sizeof(a));
    a.data = data;
    a.dtype = MXOP_F32;
    a.ndim = ndim;
    for (int32_t i = 0; i < ndim; i++)
        a.shape[i] = shape[i];
    a.region = MXOP_REGION_HEAP;
    a.nbytes = bytes;
    a.req = MXOP_REQ_WRITE;
    return a;
}

static void alloc_array(mxop_client_t *c, int32_t ndim, const int64_t *shape, mxop_array_t *a)
{
    check(c, mxop_array_alloc(c, MXOP_F32, ndim, shape, a), "mxop_array_alloc");
}

static const mxop_op_t *find_op(mxop_client_t *c, const char *name)
{
    const mxop_op_t *op = NULL;
    check(c, mxop_op_find(c, name, &op), name);
    return op;
}

static mxop_client_t *connect_path(const bench_t *b, const char *name, int32_t data_path)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {
        .struct_size = sizeof(o), .timeout_ms = 60000, .client_name = name, .data_path = data_path};
    int rc = mxop_connect(b->daemon.sock, &o, &c);
    if (rc != 0)
        die("mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    if (data_path != MXOP_DATA_PATH_DEFAULT && mxop_data_path(c) != data_path)
        die("mxop_connect: session %s did not get data path %d", name, (int)data_path);
    return c;
}

/* A session on the default data path ($MXOP_DATA_PATH, else shared memory). */
static mxop_client_t *connect_client(const bench_t *b, const char *name)
{
    return connect_path(b, name, MXOP_DATA_PATH_DEFAULT);
}

/* ------------------------------------------------------------------------ */
/* 1. The null op vs a raw socket ping-pong. */

static void noop_calls(mxop_client_t *c, const mxop_op_t *noop, int n, mxb_samples_t *s)
{
    for (int i = 0; i < n; i++) {
        int64_t t0 = mxb_now_ns();
        int rc = mxop_forward(c, noop, NULL, NULL, 0, NULL, 0);
        int64_t t1 = mxb_now_ns();
        check(c, rc, "noop forward");
        if (s != NULL)
            mxb_samples_add(s, t1 - t0);
    }
}

static void bench_null(bench_t *b)
{
    char err[256];
    /* The floor, and two diagnostics: mxop's syscalls alone, and a leaner set. */
    static const int modes[] = {MXB_PING_RAW, MXB_PING_MXOP, MXB_PING_LEAN};
    enum { N_PING = 3 };
    mxb_pingpong_t pp[N_PING];
    mxb_samples_t ping[N_PING], mx, shm;
    int rounds = 40, per = iters(b, 500, 50), diag_per = per / 4 > 25 ? per / 4 : 25;
    /* The socket-path row needs a session that is on the socket whatever the default. */
    mxop_client_t *sock = connect_path(b, "bench-socket", MXOP_DATA_PATH_SOCKET);
    check(sock, mxop_load_library(sock, "noop.so"), "noop.so");
    const mxop_op_t *sock_noop = find_op(sock, "noop");

    for (int k = 0; k < N_PING; k++) {
        if (mxb_pingpong_start(&pp[k], modes[k], err, sizeof(err)) != 0)
            die("ping-pong: %s", err);
        if (mxb_samples_init(&ping[k], (size_t)rounds * per) != 0)
            die("out of memory");
        if (mxb_pingpong_run(&pp[k], 500, NULL) != 0)
            die("ping-pong: the echo peer went away");
    }
    if (mxb_samples_init(&mx, (size_t)rounds * per) != 0 ||
        mxb_samples_init(&shm, (size_t)rounds * per) != 0)
        die("out of memory");
    noop_calls(sock, sock_noop, 500, NULL);
    for (int r = 0; r < rounds; r++) {
        for (int half = 0; half < 2; half++) {
            if ((half ^ (r & 1)) == 0) {
                if (mxb_pingpong_run(&pp[0], per, &ping[0]) != 0)
                    die("ping-pong: the echo peer went away");
            } else {
                noop_calls(sock, sock_noop, per, &mx);
            }
        }
        for (int k = 1; k < N_PING; k++)
            if (mxb_pingpong_run(&pp[k], diag_per, &ping[k]) != 0)
                die("ping-pong: the echo peer went away");
    }
    for (int k = 0; k < N_PING; k++)
        mxb_pingpong_stop(&pp[k]);
    mxop_close(sock);

    /* The shared-memory path, if this session has it (the default). */
    int have_shm = mxop_data_path(b->c) == MXOP_DATA_PATH_SHM;
    if (have_shm) {
        noop_calls(b->c, b->noop, 500, NULL);
        for (int r = 0; r < rounds; r++)
            noop_calls(b->c, b->noop, per, &shm);
    }

    mxb_row_t *row = mxb_report_add("1", "null op round trip (socket path)", &mx,
                                    "unix socket ping-pong, 64 B", &ping[0]);
    mxb_row_target(row, MXB_RATIO_AT_MOST, 1.3);
    double floor_med = mxb_median(&ping[0]);
    row = mxb_report_value("1", "diag: ping-pong, 11 syscalls (first socket path)", MXB_TIME,
                           ping[1].n, mxb_median(&ping[1]), mxb_p99(&ping[1]),
                           "unix socket ping-pong, 64 B", ping[0].n, floor_med, mxb_p99(&ping[0]));
    mxb_row_note(row, "poll+sendmsg+poll+2 recv / poll+2x(poll+recvmsg)+sendmsg, nothing else");
    row = mxb_report_value("1", "diag: ping-pong, 5 syscalls (lean)", MXB_TIME, ping[2].n,
                           mxb_median(&ping[2]), mxb_p99(&ping[2]), "unix socket ping-pong, 64 B",
                           ping[0].n, floor_med, mxb_p99(&ping[0]));
    mxb_row_note(row, "sendmsg+recv / poll+recv+sendmsg: what a leaner socket path would cost");
    if (have_shm) {
        row = mxb_report_add("1", "null op round trip (shared-memory path)", &shm,
                             "unix socket ping-pong, 64 B", &ping[0]);
    } else {
        row = mxb_report_value("1", "null op round trip (shared-memory path)", MXB_TIME, 0, 0, 0,
                               NULL, 0, 0, 0);
        mxb_row_note(row, "not measured: the session is on the socket path (MXOP_DATA_PATH)");
    }
    mxb_row_target(row, MXB_TIME_AT_MOST, 3000);
    for (int k = 0; k < N_PING; k++)
        mxb_samples_free(&ping[k]);
    mxb_samples_free(&mx);
    mxb_samples_free(&shm);
}

/* ------------------------------------------------------------------------ */
/* 2 and 3. relu: in-process vs zero-copy vs heap (staged). */

/*
 * MODE_UNREAD: zero-copy, the caller leaving the result unread (checked
 * once, after the timed calls).  Shown beside MODE_ZEROCOPY, whose result
 * the caller reads after each call as an engine does: the gap between the
 * two is what moving the result between the worker's CPU and the
 * caller's costs, apart from the call itself.
 */
enum {
    MODE_INPROC = 0,
    MODE_ZEROCOPY = 1,
    MODE_HEAP = 2,
    MODE_UNREAD = 3,
    MODE_SHARED = 4, /* input in a shared-heap block, output from mxop_shared_alloc_output */
    N_MODES = 5
};

typedef struct relu_case {
    size_t n;
    int64_t shape[1];
    float *x[2], *ref[2]; /* heap inputs x and -x, and their expected outputs */
    float *y_inproc, *y_heap;
    mxop_array_t ax[2], ay; /* zero-copy arrays in the client's arena */
    mxop_array_t ay_unread; /* MODE_UNREAD's output, never read between calls */
    mxop_array_t hx[2], hy; /* heap arrays (region 0) */
    float *sx[2];           /* MODE_SHARED's inputs, in shared-heap blocks */
} relu_case_t;

static void relu_check(const float *got, const float *want, size_t n, const char *what)
{
    if (memcmp(got, want, n * sizeof(float)) == 0)
        return;
    size_t i = 0;
    while (i < n && memcmp(&got[i], &want[i], sizeof(float)) == 0)
        i++;
    die("%s: wrong result at element %zu: %.9g, expected %.9g", what, i, (double)got[i],
        (double)want[i]);
}

static void relu_call(bench_t *b, relu_case_t *rcase, int mode, int k, mxb_samples_t *s, int read)
{
    int64_t t0, t1;
    int rc;
    const float *got;
    const char *what;
    if (mode == MODE_INPROC) {
        mxop_tensor_t in = mxb_tensor(rcase->x[k], MXOP_F32, 1, rcase->shape);
        mxop_tensor_t out = mxb_tensor(rcase->y_inproc, MXOP_F32, 1, rcase->shape);
        t0 = mxb_now_ns();
        rc = mxb_inproc_forward(b->relu_lib, b->relu_def, NULL, 1, &in, 1, &out);
        t1 = mxb_now_ns();
        if (rc != 0)
            die("in-process relu: %s: %s", mxop_err_name(rc), mxb_inproc_error(b->relu_lib));
        got = rcase->y_inproc;
        what = "in-process relu";
    } else if (mode == MODE_SHARED) {
        /* As a framework's binding does it: a fresh output from the session's warm blocks. */
        size_t bytes = rcase->n * sizeof(float);
        t0 = mxb_now_ns();
        float *y = mxop_shared_alloc_output(b->c, bytes);
        if (y == NULL)
            die("mxop_shared_alloc_output: %s", strerror(errno));
        mxop_array_t in = heap_array(rcase->sx[k], 1, rcase->shape, bytes);
        mxop_array_t out = heap_array(y, 1, rcase->shape, bytes);
        rc = mxop_forward(b->c, b->relu, NULL, &in, 1, &out, 1);
        t1 = mxb_now_ns();
        check(b->c, rc, "relu forward (shared heap)");
        if (read)
            relu_check(y, rcase->ref[k], rcase->n, "relu through mxop (shared heap)");
        if (mxop_shared_free(y) != 0)
            die("mxop_shared_free refused its own block");
        if (s != NULL)
            mxb_samples_add(s, t1 - t0);
        return;
    } else {
        const mxop_array_t *in = mode == MODE_HEAP ? &rcase->hx[k] : &rcase->ax[k];
        mxop_array_t *out = mode == MODE_ZEROCOPY ? &rcase->ay
                            : mode == MODE_UNREAD ? &rcase->ay_unread
                                                  : &rcase->hy;
        t0 = mxb_now_ns();
        rc = mxop_forward(b->c, b->relu, NULL, in, 1, out, 1);
        t1 = mxb_now_ns();
        check(b->c, rc, "relu forward");
        got = out->data;
        what =
            mode == MODE_HEAP ? "relu through mxop (heap arrays)" : "relu through mxop (zero-copy)";
    }
    if (read)
        relu_check(got, rcase->ref[k], rcase->n, what);
    if (s != NULL)
        mxb_samples_add(s, t1 - t0);
}

static void bench_relu(bench_t *b, size_t bytes, const char *label, int rounds, int per,
                       double target)
{
    relu_case_t rcase;
    memset(&rcase, 0, sizeof(rcase));
    rcase.n = bytes / sizeof(float);
    rcase.shape[0] = (int64_t)rcase.n;
    for (int k = 0; k < 2; k++) {
        rcase.x[k] = xalloc(bytes);
        rcase.ref[k] = xalloc(bytes);
    }
    fill_random(rcase.x[0], rcase.n, bytes);
    negate(rcase.x[0], rcase.x[1], rcase.n);
    for (int k = 0; k < 2; k++)
        relu_ref(rcase.x[k], rcase.ref[k], rcase.n);
    rcase.y_inproc = xalloc(bytes);
    rcase.y_heap = xalloc(bytes);
    for (int k = 0; k < 2; k++) {
        alloc_array(b->c, 1, rcase.shape, &rcase.ax[k]);
        memcpy(rcase.ax[k].data, rcase.x[k], bytes);
        rcase.hx[k] = heap_array(rcase.x[k], 1, rcase.shape, bytes);
        rcase.sx[k] = mxop_shared_alloc(bytes);
        if (rcase.sx[k] == NULL)
            die("mxop_shared_alloc(%zu): %s", bytes, strerror(errno));
        memcpy(rcase.sx[k], rcase.x[k], bytes);
    }
    alloc_array(b->c, 1, rcase.shape, &rcase.ay);
    memset(rcase.ay.data, 0, bytes);
    alloc_array(b->c, 1, rcase.shape, &rcase.ay_unread);
    memset(rcase.ay_unread.data, 0, bytes);
    rcase.hy = heap_array(rcase.y_heap, 1, rcase.shape, bytes);

    mxb_samples_t s[N_MODES];
    for (int m = 0; m < N_MODES; m++) {
        if (mxb_samples_init(&s[m], (size_t)rounds * per) != 0)
            die("out of memory");
        /* Warm-up: the staging region is created by the first heap call. */
        for (int i = 0; i < 4; i++)
            relu_call(b, &rcase, m, i & 1, NULL, 1);
    }
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < N_MODES; j++) {
            int m = (r + j) % N_MODES;
            for (int i = 0; i < per; i++)
                relu_call(b, &rcase, m, i & 1, &s[m], m != MODE_UNREAD);
        }
    /* The unread results were right too (the last call's, and one more). */
    relu_call(b, &rcase, MODE_UNREAD, (per - 1) & 1, NULL, 1);
    relu_call(b, &rcase, MODE_UNREAD, per & 1, NULL, 1);

    char name[80];
    snprintf(name, sizeof(name), "relu f32 %s, zero-copy", label);
    mxb_row_t *row =
        mxb_report_add("2", name, &s[MODE_ZEROCOPY], "in-process, same .so", &s[MODE_INPROC]);
    if (target > 0)
        mxb_row_target(row, MXB_RATIO_AT_MOST, target);
    snprintf(name, sizeof(name), "relu f32 %s, heap arrays (staged)", label);
    mxb_report_add("3", name, &s[MODE_HEAP], "zero-copy arrays", &s[MODE_ZEROCOPY]);
    snprintf(name, sizeof(name), "relu f32 %s, zero-copy, result left unread", label);
    row = mxb_report_add("3", name, &s[MODE_UNREAD], "in-process, same .so", &s[MODE_INPROC]);
    mxb_row_note(row, "the call without moving its result to the caller's CPU; the row above "
                      "with a target reads each result, as an engine does");
    snprintf(name, sizeof(name), "relu f32 %s, shared heap (warm output)", label);
    row = mxb_report_add("2", name, &s[MODE_SHARED], "in-process, same .so", &s[MODE_INPROC]);
    mxb_row_note(row, "input in a shared-heap block, output from mxop_shared_alloc_output (timed "
                      "with the call) and freed after it, as the framework hooks do");

    for (int m = 0; m < N_MODES; m++)
        mxb_samples_free(&s[m]);
    for (int k = 0; k < 2; k++) {
        mxop_array_free(b->c, &rcase.ax[k]);
        (void)mxop_shared_free(rcase.sx[k]);
        free(rcase.x[k]);
        free(rcase.ref[k]);
    }
    mxop_array_free(b->c, &rcase.ay);
    mxop_array_free(b->c, &rcase.ay_unread);
    free(rcase.y_inproc);
    free(rcase.y_heap);
}

/* ------------------------------------------------------------------------ */
/* 8. Memory integrity: scratch mode vs trusted (zero-copy). */

static void integrity_relu(mxop_client_t *c, const mxop_op_t *relu, const mxop_array_t *x,
                           mxop_array_t *y, const float *ref, size_t n, mxb_samples_t *s)
{
    int64_t t0 = mxb_now_ns();
    int rc = mxop_forward(c, relu, NULL, x, 1, y, 1);
    int64_t t1 = mxb_now_ns();
    check(c, rc, "relu forward");
    relu_check(y->data, ref, n, "relu (memory integrity)");
    if (s != NULL)
        mxb_samples_add(s, t1 - t0);
}

static void bench_integrity(bench_t *b)
{
    /* A session that loads an untrusted library (sum_n.so, never called) besides noop and relu. */
    mxop_client_t *u = connect_client(b, "bench-untrusted");
    static const char *const libs[] = {"noop.so", "relu.so", "sum_n.so"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++)
        check(u, mxop_load_library(u, libs[i]), libs[i]);
    mxop_stats_v2_t st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    check(u, mxop_stats_v2(u, &st), "mxop_stats_v2");
    if (!st.confined)
        die("the session with sum_n.so is not in scratch mode");
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    check(b->c, mxop_stats_v2(b->c, &st), "mxop_stats_v2");
    if (st.confined)
        die("the session of trusted libraries is in scratch mode");
    const mxop_op_t *unoop = find_op(u, "noop"), *urelu = find_op(u, "relu");

    int rounds = 20, per = iters(b, 250, 25);
    mxb_samples_t nt, nu;
    if (mxb_samples_init(&nt, (size_t)rounds * per) != 0 ||
        mxb_samples_init(&nu, (size_t)rounds * per) != 0)
        die("out of memory");
    noop_calls(b->c, b->noop, 200, NULL);
    noop_calls(u, unoop, 200, NULL);
    for (int r = 0; r < rounds; r++) {
        noop_calls(r & 1 ? b->c : u, r & 1 ? b->noop : unoop, per, r & 1 ? &nt : &nu);
        noop_calls(r & 1 ? u : b->c, r & 1 ? unoop : b->noop, per, r & 1 ? &nu : &nt);
    }
    mxb_row_t *row = mxb_report_add("8", "null op, scratch mode (untrusted library loaded)", &nu,
                                    "null op, trusted (zero-copy)", &nt);
    mxb_row_note(row, "a call without outputs copies nothing");
    mxb_samples_free(&nt);
    mxb_samples_free(&nu);

    static const size_t sizes[] = {1 * MIB, 64 * MIB};
    for (size_t z = 0; z < 2; z++) {
        size_t bytes = sizes[z], n = bytes / sizeof(float);
        int64_t shape[1] = {(int64_t)n};
        float *x = xalloc(bytes), *ref = xalloc(bytes);
        fill_random(x, n, bytes + 8);
        relu_ref(x, ref, n);
        mxop_array_t tx, ty, ux, uy;
        alloc_array(b->c, 1, shape, &tx);
        alloc_array(b->c, 1, shape, &ty);
        alloc_array(u, 1, shape, &ux);
        alloc_array(u, 1, shape, &uy);
        memcpy(tx.data, x, bytes);
        memcpy(ux.data, x, bytes);
        memset(ty.data, 0, bytes);
        memset(uy.data, 0, bytes);
        int zr = z == 0 ? 20 : 10, zp = z == 0 ? iters(b, 50, 5) : iters(b, 2, 1);
        mxb_samples_t rt, ru;
        if (mxb_samples_init(&rt, (size_t)zr * zp) != 0 ||
            mxb_samples_init(&ru, (size_t)zr * zp) != 0)
            die("out of memory");
        /* Warm-up: the scratch region is made (and grown) by the first calls. */
        for (int i = 0; i < 3; i++) {
            integrity_relu(b->c, b->relu, &tx, &ty, ref, n, NULL);
            integrity_relu(u, urelu, &ux, &uy, ref, n, NULL);
        }
        for (int r = 0; r < zr; r++)
            for (int h = 0; h < 2; h++) {
                int untrusted = (h ^ (r & 1)) == 0;
                for (int i = 0; i < zp; i++) {
                    if (untrusted)
                        integrity_relu(u, urelu, &ux, &uy, ref, n, &ru);
                    else
                        integrity_relu(b->c, b->relu, &tx, &ty, ref, n, &rt);
                }
            }
        char name[96], base[64];
        snprintf(name, sizeof(name), "relu f32 %s, scratch mode (untrusted library loaded)",
                 z == 0 ? "1 MiB" : "64 MiB");
        snprintf(base, sizeof(base), "relu f32 %s, trusted (zero-copy)",
                 z == 0 ? "1 MiB" : "64 MiB");
        row = mxb_report_add("8", name, &ru, base, &rt);
        mxb_row_note(row, "the output is written into scratch and copied into place");
        mxb_samples_free(&rt);
        mxb_samples_free(&ru);
        mxop_array_free(b->c, &tx);
        mxop_array_free(b->c, &ty);
        mxop_array_free(u, &ux);
        mxop_array_free(u, &uy);
        free(x);
        free(ref);
    }
    mxop_close(u);
}

/* ------------------------------------------------------------------------ */
/* 2. gemm 1024 x 1024 f32. */

#define GEMM_N 1024

/* Longer than OpenBLAS's spin before sleeping (2^28 cycles, ~0.1 s). */
#define GEMM_PAUSE_MS 250

/* |got - want| small against the size of the numbers (k = 1024 products of [-1, 1)). */
static void gemm_check(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= 1e-3 + 1e-4 * fabs((double)want[i])))
            die("%s: wrong result at element %zu: %.9g, expected %.9g", what, i, (double)got[i],
                (double)want[i]);
    }
}

static void bench_gemm(bench_t *b)
{
    const size_t n2 = (size_t)GEMM_N * GEMM_N, bytes = n2 * sizeof(float);
    const int64_t shape[2] = {GEMM_N, GEMM_N};
    float *a = xalloc(bytes), *bm[2] = {xalloc(bytes), xalloc(bytes)};
    float *ref[2] = {xalloc(bytes), xalloc(bytes)}, *c_in = xalloc(bytes);
    fill_random(a, n2, 7);
    fill_random(bm[0], n2, 11);
    negate(bm[0], bm[1], n2);

    /* The in-process results are the reference; a few entries are checked
     * against a plain dot product in double first, so the reference is right. */
    for (int k = 0; k < 2; k++) {
        mxop_tensor_t in[2] = {mxb_tensor(a, MXOP_F32, 2, shape),
                               mxb_tensor(bm[k], MXOP_F32, 2, shape)};
        mxop_tensor_t out = mxb_tensor(ref[k], MXOP_F32, 2, shape);
        int rc = mxb_inproc_forward(b->gemm_lib, b->gemm_def, NULL, 2, in, 1, &out);
        if (rc != 0)
            die("in-process gemm: %s: %s", mxop_err_name(rc), mxb_inproc_error(b->gemm_lib));
    }
    for (int t = 0; t < 64; t++) {
        size_t i = (size_t)(t * 131) % GEMM_N, j = (size_t)(t * 977 + 5) % GEMM_N;
        double dot = 0;
        for (size_t p = 0; p < GEMM_N; p++)
            dot += (double)a[i * GEMM_N + p] * (double)bm[0][p * GEMM_N + j];
        if (fabs(dot - ref[0][i * GEMM_N + j]) > 1e-3 + 1e-4 * fabs(dot))
            die("in-process gemm: C[%zu,%zu] = %.9g, a dot product in double gives %.9g", i, j,
                (double)ref[0][i * GEMM_N + j], dot);
    }

    mxop_array_t ma, mb[2], mc;
    alloc_array(b->c, 2, shape, &ma);
    memcpy(ma.data, a, bytes);
    for (int k = 0; k < 2; k++) {
        alloc_array(b->c, 2, shape, &mb[k]);
        memcpy(mb[k].data, bm[k], bytes);
    }
    alloc_array(b->c, 2, shape, &mc);
    memset(mc.data, 0, bytes);

    int rounds = 12, per = iters(b, 4, 1);
    mxb_samples_t s_in, s_mx;
    if (mxb_samples_init(&s_in, (size_t)rounds * per) ||
        mxb_samples_init(&s_mx, (size_t)rounds * per))
        die("out of memory");
    for (int r = 0; r < rounds; r++) {
        for (int half = 0; half < 2; half++) {
            int inproc = (half ^ (r & 1)) == 0;
            /*
             * OpenBLAS's idle threads spin (sched_yield) for a while after a
             * product before they sleep; on two CPUs the other process's
             * spinners would slow this side down.  A pause lets them sleep,
             * and one untimed call warms this side up.
             */
            pause_ms(GEMM_PAUSE_MS);
            for (int i = -1; i < per; i++) {
                int k = (i + 2) & 1;
                int64_t t0, t1;
                if (inproc) {
                    mxop_tensor_t in[2] = {mxb_tensor(a, MXOP_F32, 2, shape),
                                           mxb_tensor(bm[k], MXOP_F32, 2, shape)};
                    mxop_tensor_t out = mxb_tensor(c_in, MXOP_F32, 2, shape);
                    t0 = mxb_now_ns();
                    int rc = mxb_inproc_forward(b->gemm_lib, b->gemm_def, NULL, 2, in, 1, &out);
                    t1 = mxb_now_ns();
                    if (rc != 0)
                        die("in-process gemm: %s", mxop_err_name(rc));
                    gemm_check(c_in, ref[k], n2, "in-process gemm");
                } else {
                    mxop_array_t in[2] = {ma, mb[k]};
                    t0 = mxb_now_ns();
                    int rc = mxop_forward(b->c, b->gemm, NULL, in, 2, &mc, 1);
                    t1 = mxb_now_ns();
                    check(b->c, rc, "gemm forward");
                    gemm_check(mc.data, ref[k], n2, "gemm through mxop");
                }
                if (i >= 0)
                    mxb_samples_add(inproc ? &s_in : &s_mx, t1 - t0);
            }
        }
    }
    mxb_row_t *row =
        mxb_report_add("2", "gemm f32 1024x1024, zero-copy", &s_mx, "in-process, same .so", &s_in);
    mxb_row_target(row, MXB_RATIO_AT_MOST, 1.05);

    mxb_samples_free(&s_in);
    mxb_samples_free(&s_mx);
    mxop_array_free(b->c, &ma);
    mxop_array_free(b->c, &mb[0]);
    mxop_array_free(b->c, &mb[1]);
    mxop_array_free(b->c, &mc);
    free(a);
    free(bm[0]);
    free(bm[1]);
    free(ref[0]);
    free(ref[1]);
    free(c_in);
}

/* ------------------------------------------------------------------------ */
/* 4. Registering a 64 MiB region until the worker uses it at full speed. */

static int64_t timed_relu(bench_t *b, const mxop_array_t *in, mxop_array_t *out, const float *want,
                          size_t n)
{
    int64_t t0 = mxb_now_ns();
    int rc = mxop_forward(b->c, b->relu, NULL, in, 1, out, 1);
    int64_t t1 = mxb_now_ns();
    check(b->c, rc, "relu forward");
    relu_check(out->data, want, n, "relu on a new region");
    return t1 - t0;
}

/*
 * What a fresh buffer costs the engine itself: mmap of `bytes`, a write to
 * every page (the page faults are most of it), munmap.  Fresh memory is
 * this dear in any process here, so a new region is held to this.
 */
static int64_t own_buffer_ns(size_t bytes)
{
    int64_t t0 = mxb_now_ns();
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap of %zu bytes: %s", bytes, strerror(errno));
    memset(p, 1, bytes);
    int64_t t1 = mxb_now_ns();
    munmap(p, bytes);
    return t1 - t0;
}

static void bench_region(bench_t *b)
{
    const size_t bytes = 64 * MIB, n = bytes / sizeof(float);
    const int64_t shape[1] = {(int64_t)n};
    int reps = iters(b, 5, 3), later = 5;
    float *x = xalloc(bytes), *want = xalloc(bytes);
    fill_random(x, n, 3);
    relu_ref(x, want, n);

    /* Warm arrays for the other side of each call. */
    mxop_array_t wx, wy;
    alloc_array(b->c, 1, shape, &wx);
    memcpy(wx.data, x, bytes);
    alloc_array(b->c, 1, shape, &wy);
    memset(wy.data, 0, bytes);
    timed_relu(b, &wx, &wy, want, n);

    mxb_samples_t reg, fill1, fill2, first_in, later_in, first_out, later_out, use_in, use_out, own;
    mxb_samples_t *all[] = {&reg,       &fill1,     &fill2,  &first_in, &later_in,
                            &first_out, &later_out, &use_in, &use_out,  &own};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (mxb_samples_init(all[i], (size_t)(2 * reps * later)) != 0)
            die("out of memory");

    for (int r = 0; r < reps; r++) {
        uint32_t rid_in, rid_out;
        void *base_in, *base_out;
        mxop_array_t vin, vout;
        mxb_samples_t lat;
        if (mxb_samples_init(&lat, (size_t)later) != 0)
            die("out of memory");

        /* The baseline: the engine allocating and first-touching a buffer of its own. */
        mxb_samples_add(&own, own_buffer_ns(bytes));

        /* The new region as the input: the engine writes it, then calls. */
        int64_t t0 = mxb_now_ns();
        check(b->c, mxop_region_create(b->c, bytes, &rid_in, &base_in), "mxop_region_create");
        int64_t t1 = mxb_now_ns();
        mxb_samples_add(&reg, t1 - t0);
        int64_t reg_in = t1 - t0;
        t0 = mxb_now_ns();
        memcpy(base_in, x, bytes);
        t1 = mxb_now_ns();
        mxb_samples_add(&fill1, t1 - t0);
        t0 = mxb_now_ns();
        memcpy(base_in, x, bytes);
        t1 = mxb_now_ns();
        mxb_samples_add(&fill2, t1 - t0);
        check(b->c, mxop_array_view(b->c, rid_in, 0, MXOP_F32, 1, shape, &vin), "mxop_array_view");
        int64_t first = timed_relu(b, &vin, &wy, want, n);
        mxb_samples_add(&first_in, first);
        lat.n = 0;
        for (int i = 0; i < later; i++) {
            int64_t t = timed_relu(b, &vin, &wy, want, n);
            mxb_samples_add(&later_in, t);
            mxb_samples_add(&lat, t);
        }
        double steady = mxb_median(&lat);
        mxb_samples_add(&use_in, reg_in + (first > steady ? first - (int64_t)steady : 0));

        /* The new region as the output: the op writes it first. */
        t0 = mxb_now_ns();
        check(b->c, mxop_region_create(b->c, bytes, &rid_out, &base_out), "mxop_region_create");
        t1 = mxb_now_ns();
        mxb_samples_add(&reg, t1 - t0);
        int64_t reg_out = t1 - t0;
        check(b->c, mxop_array_view(b->c, rid_out, 0, MXOP_F32, 1, shape, &vout),
              "mxop_array_view");
        first = timed_relu(b, &wx, &vout, want, n);
        mxb_samples_add(&first_out, first);
        lat.n = 0;
        for (int i = 0; i < later; i++) {
            int64_t t = timed_relu(b, &wx, &vout, want, n);
            mxb_samples_add(&later_out, t);
            mxb_samples_add(&lat, t);
        }
        steady = mxb_median(&lat);
        mxb_samples_add(&use_out, reg_out + (first > steady ? first - (int64_t)steady : 0));

        check(b->c, mxop_region_release(b->c, rid_in), "mxop_region_release");
        check(b->c, mxop_region_release(b->c, rid_out), "mxop_region_release");
        mxb_samples_free(&lat);
    }

    mxb_row_t *row = mxb_report_add("4", "64 MiB region: mxop_region_create", &reg, NULL, NULL);
    mxb_row_note(row, "memfd + fallocate + map here, then the daemon and the worker map it");
    mxb_report_add("4", "first relu 64 MiB, input in new region", &first_in,
                   "later relu, same region", &later_in);
    mxb_report_add("4", "first relu 64 MiB, output in new region", &first_out,
                   "later relu, same region", &later_out);
    mxb_samples_t own2;
    if (mxb_samples_init(&own2, own.n) != 0)
        die("out of memory");
    for (size_t i = 0; i < own.n; i++)
        mxb_samples_add(&own2, own.ns[i]);
    row = mxb_report_add("4", "64 MiB region usable (as input)", &use_in,
                         "engine's own 64 MiB first touch", &own);
    mxb_row_target(row, MXB_RATIO_AT_MOST, 1.2);
    mxb_row_note(row, "registration + (first call - later calls) per registration, against mmap "
                      "+ first write of every page of a 64 MiB buffer in this process");
    row = mxb_report_add("4", "64 MiB region usable (as output)", &use_out,
                         "engine's own 64 MiB first touch", &own2);
    mxb_row_target(row, MXB_RATIO_AT_MOST, 1.2);
    mxb_samples_free(&own2);
    row = mxb_report_add("4", "engine's first write of a new region", &fill1,
                         "later write, same region", &fill2);
    mxb_row_note(row, "memcpy of 64 MiB into the client's mapping of a new region");

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        mxb_samples_free(all[i]);
    mxop_array_free(b->c, &wx);
    mxop_array_free(b->c, &wy);
    free(x);
    free(want);
}

/* ------------------------------------------------------------------------ */
/* 5. A worker crash to the next successful call. */

static void crash_runs(bench_t *b, mxop_client_t *c, int reps, mxb_samples_t *noticed,
                       mxb_samples_t *next)
{
    const int64_t shape[1] = {64};
    const mxop_op_t *segv = find_op(c, "segv"), *identity = find_op(c, "identity");
    mxop_array_t in, out;
    alloc_array(c, 1, shape, &in);
    alloc_array(c, 1, shape, &out);
    fill_random(in.data, 64, 5);
    for (int i = 0; i < 3; i++)
        check(c, mxop_forward(c, identity, NULL, &in, 1, &out, 1), "identity forward");

    for (int r = 0; r < reps; r++) {
        memset(out.data, 0, 64 * sizeof(float));
        int64_t t0 = mxb_now_ns();
        int rc = mxop_forward(c, segv, NULL, &in, 1, &out, 1);
        int64_t t1 = mxb_now_ns();
        if (rc != MXOP_EWORKER_CRASHED)
            die("segv forward returned %s (%s), expected MXOP_EWORKER_CRASHED", mxop_err_name(rc),
                mxop_last_error(c));
        /* The call after the crash is expected to succeed at once; a few
         * tries allow for a daemon that answers before its worker is up. */
        int tries = 0;
        do {
            rc = mxop_forward(c, identity, NULL, &in, 1, &out, 1);
        } while (rc != 0 && ++tries < 100);
        int64_t t2 = mxb_now_ns();
        check(c, rc, "identity forward after a crash");
        if (memcmp(in.data, out.data, 64 * sizeof(float)) != 0)
            die("identity after a crash: wrong result");
        mxb_samples_add(noticed, t1 - t0);
        mxb_samples_add(next, t2 - t0);
    }
    mxop_array_free(c, &in);
    mxop_array_free(c, &out);
}

/*
 * mxop-serverd gives a session up when its worker dies 5 times within 2 s
 * (only deaths outside calls count since the respawn guard was narrowed,
 * but the benchmark should not depend on that policy), so the crashes are
 * spread over sessions of CRASHES_PER_SESSION each: a fresh session per
 * group, as a new engine process would have.
 */
#define CRASHES_PER_SESSION 4

static void bench_crash(bench_t *b)
{
    int reps = iters(b, 20, 4);
    mxb_samples_t noticed, next;
    if (mxb_samples_init(&noticed, (size_t)reps) || mxb_samples_init(&next, (size_t)reps))
        die("out of memory");
    mxop_stats_t st;
    memset(&st, 0, sizeof(st));
    for (int done = 0; done < reps; done += CRASHES_PER_SESSION) {
        int k = reps - done < CRASHES_PER_SESSION ? reps - done : CRASHES_PER_SESSION;
        mxop_client_t *c = connect_client(b, "bench-crash");
        check(c, mxop_load_library(c, "crash.so"), "load crash.so");
        crash_runs(b, c, k, &noticed, &next);
        check(c, mxop_stats(c, &st), "mxop_stats");
        mxop_close(c);
    }

    double noticed_med = mxb_median(&noticed);
    mxb_row_t *row = mxb_report_add("5", "crash -> next successful call", &next, NULL, NULL);
    mxb_row_target(row, MXB_TIME_AT_MOST, 20e6);
    mxb_row_note(row,
                 "fresh sessions with crash.so and %llu MiB of regions, %d crashes each; the "
                 "segv call itself returned after %.2f ms (median)",
                 (unsigned long long)(st.region_bytes >> 20), CRASHES_PER_SESSION,
                 noticed_med / 1e6);

    /* The same in the main session, whose regions every new worker maps again. */
    int reps2 = CRASHES_PER_SESSION - 1;
    mxb_samples_t n2, x2;
    if (mxb_samples_init(&n2, (size_t)reps2) || mxb_samples_init(&x2, (size_t)reps2))
        die("out of memory");
    check(b->c, mxop_load_library(b->c, "crash.so"), "load crash.so");
    memset(&st, 0, sizeof(st));
    check(b->c, mxop_stats(b->c, &st), "mxop_stats");
    crash_runs(b, b->c, reps2, &n2, &x2);
    char name[80];
    snprintf(name, sizeof(name), "crash -> next call, %llu MiB of regions",
             (unsigned long long)(st.region_bytes >> 20));
    row = mxb_report_add("5", name, &x2, NULL, NULL);
    mxb_row_note(row, "the main session (noop, relu, gemm, crash.so loaded; %llu regions)",
                 (unsigned long long)st.regions);
    mxb_samples_free(&noticed);
    mxb_samples_free(&next);
    mxb_samples_free(&n2);
    mxb_samples_free(&x2);
}

/* ------------------------------------------------------------------------ */
/* 6. Two client processes at once. */

typedef struct child_result {
    int rc;
    uint64_t calls;
    int64_t elapsed_ns;
    double median_ns;
} child_result_t;

#define CHILD_MAX_SAMPLES 200000

/* One client process: connect, warm up, wait for the start, call for `seconds`. */
_Noreturn static void client_child(const bench_t *b, int32_t path, int ready_fd, int go_fd,
                                   int res_fd, double seconds)
{
    child_result_t res = {0};
    mxb_samples_t s;
    char byte = 1;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);

    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {.struct_size = sizeof(o), .timeout_ms = 60000, .data_path = path};
    res.rc = mxop_connect(b->daemon.sock, &o, &c);
    const mxop_op_t *op = NULL;
    if (res.rc == 0)
        res.rc = mxop_load_library(c, "noop.so");
    if (res.rc == 0)
        res.rc = mxop_op_find(c, "noop", &op);
    for (int i = 0; res.rc == 0 && i < 500; i++)
        res.rc = mxop_forward(c, op, NULL, NULL, 0, NULL, 0);
    if (mxb_samples_init(&s, CHILD_MAX_SAMPLES) != 0 && res.rc == 0)
        res.rc = MXOP_ENOMEM;
    if (write(ready_fd, &byte, 1) != 1)
        _exit(1);
    /* The parent closes the go pipe: every child starts at once. */
    while (read(go_fd, &byte, 1) > 0) {
    }
    int64_t start = mxb_now_ns(), end = start + (int64_t)(seconds * 1e9), now = start;
    while (res.rc == 0 && now < end) {
        res.rc = mxop_forward(c, op, NULL, NULL, 0, NULL, 0);
        int64_t t = mxb_now_ns();
        mxb_samples_add(&s, t - now);
        now = t;
        res.calls++;
    }
    res.elapsed_ns = now - start;
    res.median_ns = mxb_median(&s);
    if (write(res_fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
        _exit(1);
    mxop_close(c);
    _exit(0);
}

#define MAX_CLIENTS 8

/* Runs `k` client processes at once; *rate gets their calls per second in all. */
static void run_clients(const bench_t *b, int32_t path, int k, double seconds, double *rate,
                        double *median)
{
    int ready[2], go[2], res[2];
    pid_t pids[MAX_CLIENTS];
    if (pipe(ready) || pipe(go) || pipe(res))
        die("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    for (int i = 0; i < k; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            close(ready[0]);
            close(go[1]);
            close(res[0]);
            client_child(b, path, ready[1], go[0], res[1], seconds);
        }
        pids[i] = pid;
        mxb_daemon_track_child(pid);
    }
    close(ready[1]);
    close(go[0]);
    close(res[1]);
    char byte;
    for (int i = 0; i < k; i++)
        if (read(ready[0], &byte, 1) != 1)
            die("a client process died before it was ready");
    close(go[1]);
    *rate = 0;
    *median = 0;
    for (int i = 0; i < k; i++) {
        child_result_t r;
        if (read(res[0], &r, sizeof(r)) != (ssize_t)sizeof(r))
            die("a client process died during the run");
        if (r.rc != 0)
            die("a client process failed: %s", mxop_err_name(r.rc));
        *rate += (double)r.calls / ((double)r.elapsed_ns / 1e9);
        *median += r.median_ns / k;
    }
    for (int i = 0; i < k; i++) {
        waitpid(pids[i], NULL, 0);
        mxb_daemon_untrack_child(pids[i]);
    }
    close(ready[0]);
    close(res[0]);
}

/*
 * Aggregate null-op calls/s of 1, 2, 4 and 8 client processes (each its own
 * session and worker) on both data paths, the counts and paths interleaved
 * in rounds so that the machine's drift hits them alike.  On a 2-CPU
 * machine, 2 processes already make 4 runnable processes with their
 * workers: this is where a spinning waiter starves the peer it waits for.
 */
static void bench_parallel(bench_t *b)
{
    static const int counts[] = {1, 2, 4, 8};
    static const int32_t paths[] = {MXOP_DATA_PATH_SHM, MXOP_DATA_PATH_SOCKET};
    static const char *const pname[] = {"shm", "socket"};
    enum { NC = 4, NP = 2 };
    double seconds = 0.6 * (b->scale < 1 ? b->scale : 1);
    int rounds = 2;
    double rate[NP][NC] = {{0}}, lat[NP][NC] = {{0}};
    for (int r = 0; r < rounds; r++)
        for (int ci = 0; ci < NC; ci++)
            for (int pi = 0; pi < NP; pi++) {
                double v, med;
                run_clients(b, paths[pi], counts[ci], seconds, &v, &med);
                rate[pi][ci] += v / rounds;
                lat[pi][ci] += med / rounds;
            }
    char name[80], base[80];
    for (int pi = 0; pi < NP; pi++)
        for (int ci = 0; ci < NC; ci++) {
            int n = counts[ci];
            snprintf(name, sizeof(name), "null op, %d process%s, %s (sum)", n, n > 1 ? "es" : "",
                     pname[pi]);
            snprintf(base, sizeof(base), "1 process, %s", pname[pi]);
            mxb_row_t *row =
                mxb_report_value("6", name, MXB_RATE, (size_t)rounds, rate[pi][ci], rate[pi][ci],
                                 base, (size_t)rounds, rate[pi][0], rate[pi][0]);
            if (n > 1)
                mxb_row_target(row, MXB_RATIO_AT_LEAST, 0.9);
            mxb_row_note(row, "calls/s over %.1f s runs (mean of %d); per-call median %.1f us",
                         seconds, rounds, lat[pi][ci] / 1e3);
        }
    /* Never below the socket path at the same count. */
    for (int ci = 0; ci < NC; ci++) {
        int n = counts[ci];
        snprintf(name, sizeof(name), "null op, %d process%s, shm (sum)", n, n > 1 ? "es" : "");
        snprintf(base, sizeof(base), "%d, socket", n);
        mxb_row_t *row =
            mxb_report_value("6", name, MXB_RATE, (size_t)rounds, rate[0][ci], rate[0][ci], base,
                             (size_t)rounds, rate[1][ci], rate[1][ci]);
        mxb_row_target(row, MXB_RATIO_AT_LEAST, 1.0);
        mxb_row_note(row, "shared memory against the socket path at the same count");
    }
}

/* ------------------------------------------------------------------------ */
/* 7. Several threads of one process sharing one client. */

#define THREAD_MAX 2

typedef struct thread_run {
    bench_t *b;
    mxop_client_t *c; /* the client the threads share */
    const mxop_op_t *op;
    mxop_array_t in[2], out;
    int n_in;
    int64_t end_ns;
    uint64_t calls;
    int rc;
} thread_run_t;

static void *thread_calls(void *p)
{
    thread_run_t *t = p;
    while (t->rc == 0 && mxb_now_ns() < t->end_ns) {
        t->rc = mxop_forward(t->c, t->op, NULL, t->in, t->n_in, &t->out, 1);
        t->calls++;
    }
    return NULL;
}

/* Calls/s of `k` threads calling their op on their own arrays through the one client. */
static double run_threads(bench_t *b, thread_run_t *t, int k, double seconds)
{
    pthread_t th[THREAD_MAX];
    int64_t start = mxb_now_ns();
    for (int i = 0; i < k; i++) {
        t[i].calls = 0;
        t[i].end_ns = start + (int64_t)(seconds * 1e9);
        if (pthread_create(&th[i], NULL, thread_calls, &t[i]) != 0)
            die("pthread_create failed");
    }
    for (int i = 0; i < k; i++)
        pthread_join(th[i], NULL);
    double total = 0;
    int64_t el = mxb_now_ns() - start;
    for (int i = 0; i < k; i++) {
        check(t[i].c, t[i].rc, "a call from a thread");
        total += (double)t[i].calls;
    }
    return total / ((double)el / 1e9);
}

/* The ops of section 7's rows, each checked in its own way. */
typedef enum { THREADS_RELU, THREADS_GEMM, THREADS_SOFTMAX } threads_op_t;

/* Whether `got` is the op's answer on thread `t`'s inputs; dies naming the element if not. */
static void threads_check(const thread_run_t *t, threads_op_t kind, int64_t rows, int64_t cols)
{
    const float *x = t->in[0].data, *got = t->out.data;
    const size_t elems = (size_t)(rows * cols);
    if (kind == THREADS_RELU) {
        float *want = xalloc(elems * sizeof(float));
        relu_ref(x, want, elems);
        relu_check(got, want, elems, "relu from a thread");
        free(want);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        double max = -INFINITY, total = 0;
        if (kind == THREADS_SOFTMAX) {
            for (int64_t k = 0; k < cols; k++)
                max = fmax(max, x[r * cols + k]);
            for (int64_t k = 0; k < cols; k++)
                total += exp((double)x[r * cols + k] - max);
        }
        for (int64_t col = 0; col < cols; col++) {
            double want = 0;
            if (kind == THREADS_SOFTMAX) {
                want = exp((double)x[r * cols + col] - max) / total;
            } else {
                const float *bb = t->in[1].data;
                for (int64_t k = 0; k < cols; k++)
                    want += (double)x[r * cols + k] * (double)bb[k * cols + col];
            }
            double g = got[r * cols + col];
            if (fabs(g - want) > 1e-3 * (kind == THREADS_GEMM) + 1e-4 * fabs(want) + 1e-7)
                die("%s from a thread: element (%lld, %lld) is %g, expected %g",
                    kind == THREADS_GEMM ? "gemm" : "softmax", (long long)r, (long long)col, g,
                    want);
        }
    }
}

/*
 * One row: 2 threads against 1 on an op over rows x cols floats (relu: one
 * axis of rows * cols; gemm: two square matrices, rows == cols; softmax:
 * over each row).  `target` is the ratio the row must reach, 0 for a row
 * shown without one.
 */
static void threads_row(bench_t *b, mxop_client_t *c, threads_op_t kind, int64_t rows, int64_t cols,
                        const char *label, double target)
{
    static const char *const names[] = {"relu", "gemm", "softmax"};
    const mxop_op_t *op = find_op(c, names[kind]);
    thread_run_t t[THREAD_MAX];
    const int64_t flat[1] = {rows * cols}, shape[2] = {rows, cols};
    const int ndim = kind == THREADS_RELU ? 1 : 2;
    const size_t elems = (size_t)(rows * cols);
    for (int i = 0; i < THREAD_MAX; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        t[i].b = b;
        t[i].c = c;
        t[i].op = op;
        t[i].n_in = kind == THREADS_GEMM ? 2 : 1;
        for (int j = 0; j < t[i].n_in; j++) {
            alloc_array(c, ndim, ndim == 1 ? flat : shape, &t[i].in[j]);
            fill_random(t[i].in[j].data, elems, 70 + (uint64_t)(2 * i + j));
        }
        alloc_array(c, ndim, ndim == 1 ? flat : shape, &t[i].out);
    }
    double seconds = 0.5 * (b->scale < 1 ? b->scale : 1);
    int rounds = 3;
    double one = 0, two = 0;
    run_threads(b, t, 2, 0.3); /* warm-up: opens the sibling session */
    for (int r = 0; r < rounds; r++) {
        one += run_threads(b, t, 1, seconds) / rounds;
        two += run_threads(b, t, 2, seconds) / rounds;
    }
    /* Each thread's last answer is its own. */
    for (int i = 0; i < THREAD_MAX; i++)
        threads_check(&t[i], kind, rows, cols);
    mxb_row_t *row = mxb_report_value("7", label, MXB_RATE, (size_t)rounds, two, two, "1 thread",
                                      (size_t)rounds, one, one);
    if (target > 0)
        mxb_row_target(row, MXB_RATIO_AT_LEAST, target);
    mxb_row_note(row, "calls/s over %.1f s runs (mean of %d); %.0f us a call with 1 thread",
                 seconds, rounds, 1e6 / one);
    for (int i = 0; i < THREAD_MAX; i++) {
        for (int j = 0; j < t[i].n_in; j++)
            mxop_array_free(c, &t[i].in[j]);
        mxop_array_free(c, &t[i].out);
    }
}

static void bench_threads(bench_t *b)
{
    /* A client with a pool of THREAD_MAX sessions (issue 15): a call made
     * while the other thread's holds the session runs on a sibling. */
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {.struct_size = sizeof(o),
                             .timeout_ms = 60000,
                             .client_name = "bench-threads",
                             .max_sessions = THREAD_MAX};
    int rc = mxop_connect(b->daemon.sock, &o, &c);
    if (rc != 0)
        die("mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    check(c, mxop_load_library(c, "relu.so"), "relu.so");
    check(c, mxop_load_library(c, "gemm.so"), "gemm.so");
    check(c, mxop_load_library(c, "softmax.so"), "softmax.so");
    /*
     * The target (issue 15) is for an op of about 100 us, one that keeps
     * one CPU busy.  relu of 4 MiB: about 90 us a call here, bound by memory
     * bandwidth, which the two threads share.  softmax of 64 x 160: about
     * 100 us of exp() on one thread, data in the cache, bound by the CPU.
     * Shown without a target: gemm 96x96, about 16 us on one OpenBLAS
     * thread, a short call where the hand-over between four threads on two
     * CPUs costs as much as the op; gemm 256x256, a product on two BLAS
     * threads (server/worker/blas.h), where one call already keeps both
     * CPUs busy and a second thread cannot add much.
     */
    threads_row(b, c, THREADS_RELU, 1, (int64_t)(4 * MIB / sizeof(float)),
                "relu 4 MiB, 2 threads, one client of 2 sessions (sum)", 1.6);
    threads_row(b, c, THREADS_SOFTMAX, 64, 160,
                "softmax 64x160, 2 threads, one client of 2 sessions (sum)", 1.6);
    threads_row(b, c, THREADS_GEMM, 96, 96, "gemm 96x96, 2 threads, one client of 2 sessions (sum)",
                0);
    threads_row(b, c, THREADS_GEMM, 256, 256,
                "gemm 256x256, 2 threads, one client of 2 sessions (sum)", 0);
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */

static void open_main_session(bench_t *b)
{
    char err[256], path[512];
    b->c = connect_client(b, "bench");
    static const char *const libs[] = {"noop.so", "relu.so", "gemm.so"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++)
        check(b->c, mxop_load_library(b->c, libs[i]), libs[i]);
    b->noop = find_op(b->c, "noop");
    b->relu = find_op(b->c, "relu");
    b->gemm = find_op(b->c, "gemm");

    /* The in-process side loads the very files the worker loaded. */
    if (mxb_inproc_open(mxb_daemon_plugin(&b->daemon, "relu.so", path, sizeof(path)), &b->relu_lib,
                        err, sizeof(err)) != 0 ||
        mxb_inproc_open(mxb_daemon_plugin(&b->daemon, "gemm.so", path, sizeof(path)), &b->gemm_lib,
                        err, sizeof(err)) != 0)
        die("in-process: %s", err);
    b->relu_def = mxb_inproc_op(b->relu_lib, "relu");
    b->gemm_def = mxb_inproc_op(b->gemm_lib, "gemm");
    if (b->relu_def == NULL || b->gemm_def == NULL)
        die("in-process: relu.so or gemm.so registered no op of its name");
}

int main(int argc, char **argv)
{
    static bench_t bench;
    bench_t *b = &bench;
    char err[256], machine[320], csv[PATH_MAX + 32], json[PATH_MAX + 32], dir[PATH_MAX + 16];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (mxb_build_dir(argc, argv, b->build, sizeof(b->build)) != 0)
        die("cannot find the build directory; pass it as the argument");
    b->only = getenv("MXOP_BENCH_ONLY");
    const char *scale = getenv("MXOP_BENCH_SCALE");
    b->scale = scale != NULL && atof(scale) > 0 ? atof(scale) : 1.0;
    mxb_machine_line(machine, sizeof(machine));
    printf("bench_mxop: %s\n", machine);
    int64_t t_start = mxb_now_ns();

    if (mxb_daemon_start(&b->daemon, b->build, err, sizeof(err)) != 0)
        die("%s", err);
    open_main_session(b);

    if (want(b, '1')) {
        printf("1/7 null op vs socket ping-pong\n");
        bench_null(b);
    }
    if (want(b, '2') || want(b, '3')) {
        printf("2/7 relu 1 MiB, relu 64 MiB, gemm 1024 (in-process, zero-copy, heap)\n");
        bench_relu(b, 1 * MIB, "1 MiB", 20, iters(b, 100, 5), 1.3);
        bench_relu(b, 64 * MIB, "64 MiB", 20, iters(b, 2, 1), 1.05);
        bench_gemm(b);
    }
    if (want(b, '4')) {
        printf("4/7 64 MiB region registration\n");
        bench_region(b);
    }
    if (want(b, '5')) {
        printf("5/7 worker crash to next call\n");
        bench_crash(b);
    }
    if (want(b, '6')) {
        printf("6/7 1, 2, 4, 8 client processes, both data paths\n");
        bench_parallel(b);
    }
    if (want(b, '7')) {
        printf("7/7 2 threads sharing one client\n");
        bench_threads(b);
    }
    if (want(b, '8')) {
        printf("8 memory integrity: scratch mode vs trusted (zero-copy)\n");
        bench_integrity(b);
    }

    mxb_inproc_close(b->relu_lib);
    mxb_inproc_close(b->gemm_lib);
    mxop_close(b->c);
    mxb_daemon_stop(&b->daemon);

    mxb_report_print(stdout);
    if (snprintf(dir, sizeof(dir), "%s/bench", b->build) >= (int)sizeof(dir) ||
        snprintf(csv, sizeof(csv), "%s/results.csv", dir) >= (int)sizeof(csv) ||
        snprintf(json, sizeof(json), "%s/results.json", dir) >= (int)sizeof(json))
        die("the build directory's path is too long");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("mkdir %s: %s", dir, strerror(errno));
    if (mxb_report_write(csv, json, machine) != 0)
        return 1;
    printf("\n%d target(s) missed; results in %s and %s (%.0f s)\n", mxb_report_missed(), csv, json,
           (double)(mxb_now_ns() - t_start) / 1e9);
    return 0;
}
