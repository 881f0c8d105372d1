/*
 * tests/test_pool.c - calls in flight from several threads on one client:
 * the pool of sibling sessions (client/pool.c).
 *
 * Not timed: each test checks that a call made while another thread's call
 * holds the client's session runs (on a sibling) and gets its own correct
 * result, with the libraries and regions the client has.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(pool, .init = setup, .fini = teardown, .timeout = 120);

static mxop_client_t *connect_pool(int sessions)
{
    mxop_connect_opts_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.timeout_ms = 60000;
    o.max_sessions = sessions;
    mxop_client_t *c = NULL;
    int rc = mxop_connect(daemon_.sock, &o, &c);
    cr_assert_eq(rc, 0, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    cr_assert_eq(mxop_load_library(c, "crash.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    return c;
}

/* A call of op 'sleep' (ms) on the client, in a thread of its own. */
typedef struct slow {
    mxop_client_t *c;
    int ms;
    int timeout_ms; /* the call's own deadline (0: the client's) */
    mxop_array_t x, y;
    atomic_int started, done;
    int rc;
} slow_t;

static void *slow_main(void *p)
{
    slow_t *s = p;
    const mxop_op_t *op = mxt_op(s->c, "sleep");
    char ms[32];
    snprintf(ms, sizeof ms, "%d", s->ms);
    const char *attrs[] = {"ms", ms, NULL};
    mxop_call_t call;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call;
    call.attrs = attrs;
    call.timeout_ms = s->timeout_ms;
    atomic_store(&s->started, 1);
    s->rc = mxop_forward(s->c, op, &call, &s->x, 1, &s->y, 1);
    atomic_store(&s->done, 1);
    return NULL;
}

static void slow_start_with(slow_t *s, mxop_client_t *c, int ms, int timeout_ms, pthread_t *t)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    s->ms = ms;
    s->timeout_ms = timeout_ms;
    int64_t shape[] = {64};
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &s->x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &s->y), 0);
    for (int i = 0; i < 64; i++)
        ((float *)s->x.data)[i] = (float)i - 20.5f;
    cr_assert_eq(pthread_create(t, NULL, slow_main, s), 0);
    while (!atomic_load(&s->started))
        mxt_sleep_ms(1);
    mxt_sleep_ms(300); /* well inside its call by now */
}

static void slow_start(slow_t *s, mxop_client_t *c, int ms, pthread_t *t)
{
    slow_start_with(s, c, ms, 0, t);
}

static void slow_finish(slow_t *s, pthread_t t)
{
    pthread_join(t, NULL);
    cr_assert_eq(s->rc, 0, "the sleeping call: %s: %s", mxop_err_name(s->rc),
                 mxop_last_error(s->c));
    for (int i = 0; i < 64; i++)
        cr_assert_eq(((float *)s->y.data)[i], (float)i - 20.5f, "sleep's output %d", i);
    mxop_array_free(s->c, &s->x);
    mxop_array_free(s->c, &s->y);
}

/* relu on `x` into `y`; checks the result against x. */
static void relu_checked(mxop_client_t *c, const mxop_op_t *relu, mxop_array_t *x, mxop_array_t *y,
                         float bias)
{
    size_t n = mxt_elems(x);
    for (size_t i = 0; i < n; i++)
        ((float *)x->data)[i] = (float)((int)(i % 11) - 5) + bias;
    memset(y->data, 0xff, y->nbytes);
    int rc = mxop_forward(c, relu, NULL, x, 1, y, 1);
    cr_assert_eq(rc, 0, "relu: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < n; i++) {
        float v = ((float *)x->data)[i];
        cr_assert_eq(((float *)y->data)[i], v > 0 ? v : 0, "relu element %zu", i);
    }
}

Test(pool, a_call_runs_while_another_threads_call_is_in_flight)
{
    mxop_client_t *c = connect_pool(3);
    const mxop_op_t *relu = mxt_op(c, "relu");
    slow_t s;
    pthread_t t;
    slow_start(&s, c, 12000, &t);
    /* The arena's first chunk is there (slow_start's arrays): these fit in it. */
    int64_t shape[] = {1000};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &y), 0);
    for (int k = 0; k < 20; k++)
        relu_checked(c, relu, &x, &y, (float)k * 0.25f);
    /* The sleeping call holds the client's session for 12 s: these ran beside it. */
    cr_assert_eq(atomic_load(&s.done), 0, "the relu calls waited for the sleeping call");
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_geq(st.daemon_sessions, 2, "no sibling session was opened");
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    slow_finish(&s, t);
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.calls, 21);
    cr_assert_eq(st.errors, 0);
    mxop_close(c);
}

Test(pool, user_regions_heap_arrays_and_later_libraries_reach_the_sibling)
{
    mxop_client_t *c = connect_pool(2);
    const mxop_op_t *relu = mxt_op(c, "relu");
    /* A user region, used for the first time by the sibling. */
    uint32_t rid;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 16, &rid, &base), 0, "%s", mxop_last_error(c));
    int64_t shape[] = {256};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_view(c, rid, 0, MXOP_F32, 1, shape, &x), 0);
    cr_assert_eq(mxop_array_view(c, rid, 4096, MXOP_F32, 1, shape, &y), 0);
    slow_t s;
    pthread_t t;
    slow_start(&s, c, 12000, &t);
    relu_checked(c, relu, &x, &y, 0.5f);
    /* Heap arrays: the sibling stages them itself. */
    float hx[8] = {-1, 2, -3, 4, -5, 6, -7, 8}, hy[8];
    mxop_array_t ax = {.data = hx, .dtype = MXOP_F32, .ndim = 1, .shape = {8}, .nbytes = 32};
    mxop_array_t ay = {.data = hy, .dtype = MXOP_F32, .ndim = 1, .shape = {8}, .nbytes = 32};
    cr_assert_eq(mxop_forward(c, relu, NULL, &ax, 1, &ay, 1), 0, "%s", mxop_last_error(c));
    for (int i = 0; i < 8; i++)
        cr_assert_eq(hy[i], hx[i] > 0 ? hx[i] : 0);
    /* A library loaded now: it waits for the client's session, then the
     * sibling loads it before its next call. */
    cr_assert_eq(atomic_load(&s.done), 0);
    slow_finish(&s, t);
    cr_assert_eq(mxop_load_library(c, "gemm.so"), 0, "%s", mxop_last_error(c));
    const mxop_op_t *gemm = mxt_op(c, "gemm");
    slow_start(&s, c, 12000, &t);
    int64_t sa[] = {2, 3}, sb[] = {3, 2}, sc[] = {2, 2};
    mxop_array_t a, b, o;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 2, sa, &a), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 2, sb, &b), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 2, sc, &o), 0);
    for (int i = 0; i < 6; i++) {
        ((float *)a.data)[i] = (float)(i + 1);
        ((float *)b.data)[i] = (float)(6 - i);
    }
    mxop_array_t ab[] = {a, b};
    cr_assert_eq(mxop_forward(c, gemm, NULL, ab, 2, &o, 1), 0, "%s", mxop_last_error(c));
    const float want[] = {20, 14, 56, 41}; /* [1 2 3; 4 5 6] x [6 5; 4 3; 2 1] */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(((float *)o.data)[i], want[i], "gemm element %d", i);
    cr_assert_eq(atomic_load(&s.done), 0, "gemm waited for the sleeping call");
    mxop_array_free(c, &a);
    mxop_array_free(c, &b);
    mxop_array_free(c, &o);
    slow_finish(&s, t);
    cr_assert_eq(mxop_region_release(c, rid), 0, "%s", mxop_last_error(c));
    mxop_close(c);
}

Test(pool, a_failed_call_on_a_sibling_names_its_error_in_the_calling_thread)
{
    mxop_client_t *c = connect_pool(2);
    const mxop_op_t *relu = mxt_op(c, "relu");
    slow_t s;
    pthread_t t;
    slow_start(&s, c, 12000, &t);
    int64_t shape[] = {4};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_alloc(c, MXOP_I32, 1, shape, &x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_I32, 1, shape, &y), 0);
    int rc = mxop_forward(c, relu, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EDTYPE, "relu on i32: %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(c), "relu") != NULL, "detail: '%s'", mxop_last_error(c));
    cr_assert_eq(atomic_load(&s.done), 0);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    slow_finish(&s, t);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.calls, 2);
    cr_assert_eq(st.errors, 1);
    /* A later failure on the client itself is what this thread sees next. */
    cr_assert_neq(mxop_load_library(c, "no_such_library.so"), 0);
    cr_assert(strstr(mxop_last_error(c), "no_such_library") != NULL, "detail: '%s'",
              mxop_last_error(c));
    mxop_close(c);
}

Test(pool, the_clients_deadline_applies_on_siblings)
{
    mxop_client_t *c = connect_pool(2);
    const mxop_op_t *sleep_op = mxt_op(c, "sleep");
    int64_t shape[] = {4};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &y), 0);
    cr_assert_eq(mxop_set_timeout(c, 1500), 0);
    slow_t s;
    pthread_t t;
    slow_start_with(&s, c, 12000, 60000, &t);
    /* On the sibling, with the client's default deadline of 1.5 s. */
    const char *attrs[] = {"ms", "8000", NULL};
    mxop_call_t call;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call;
    call.attrs = attrs;
    int rc = mxop_forward(c, sleep_op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ETIMEOUT, "an 8 s call under a 1.5 s deadline: %s: %s", mxop_err_name(rc),
                 mxop_last_error(c));
    cr_assert_eq(atomic_load(&s.done), 0, "it waited for the sleeping call");
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    slow_finish(&s, t);
    mxop_close(c);
}

#define THREADS 4
#define CALLS 300

typedef struct worker {
    mxop_client_t *c;
    unsigned who;
    char why[256];
    int fail;
} worker_t;

static void *worker_main(void *p)
{
    worker_t *w = p;
    int64_t shape[] = {512};
    mxop_array_t x, y;
    if (mxop_array_alloc(w->c, MXOP_F32, 1, shape, &x) != 0 ||
        mxop_array_alloc(w->c, MXOP_F32, 1, shape, &y) != 0) {
        snprintf(w->why, sizeof w->why, "mxop_array_alloc: %s", mxop_last_error(w->c));
        w->fail = 1;
        return NULL;
    }
    const mxop_op_t *op = NULL;
    mxop_op_find(w->c, "relu", &op);
    for (int k = 0; k < CALLS && !w->fail; k++) {
        float *in = x.data, *out = y.data;
        for (int i = 0; i < 512; i++)
            in[i] = (float)((i * 7 + k * 13 + (int)w->who * 5) % 17 - 8) + (float)w->who;
        memset(out, 0xff, y.nbytes);
        int rc = mxop_forward(w->c, op, NULL, &x, 1, &y, 1);
        if (rc != 0) {
            snprintf(w->why, sizeof w->why, "call %d: %s", k, mxop_err_name(rc));
            w->fail = 1;
            break;
        }
        for (int i = 0; i < 512; i++) {
            if (out[i] != (in[i] > 0 ? in[i] : 0)) {
                snprintf(w->why, sizeof w->why, "call %d element %d: %g for %g", k, i, out[i],
                         in[i]);
                w->fail = 1;
                break;
            }
        }
    }
    mxop_array_free(w->c, &x);
    mxop_array_free(w->c, &y);
    return NULL;
}

Test(pool, threads_calling_at_once_each_get_their_own_results)
{
    mxop_client_t *c = connect_pool(THREADS);
    pthread_t t[THREADS];
    static worker_t w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker_t){.c = c, .who = i + 1};
        cr_assert_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        cr_expect_eq(w[i].fail, 0, "thread %d: %s", i, w[i].why);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.calls, THREADS * CALLS);
    cr_assert_eq(st.errors, 0);
    mxop_close(c);
}

Test(pool, max_sessions_out_of_range_is_refused)
{
    mxop_connect_opts_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.max_sessions = 1000;
    mxop_client_t *c = (mxop_client_t *)&o;
    cr_assert_eq(mxop_connect(daemon_.sock, &o, &c), MXOP_EINVAL);
    cr_assert_null(c);
    cr_assert(strstr(mxop_connect_error(), "max_sessions") != NULL, "'%s'", mxop_connect_error());
    o.max_sessions = -2;
    cr_assert_eq(mxop_connect(daemon_.sock, &o, &c), MXOP_EINVAL);
}

/* A call of 'sleep' 60 s from a thread that names an in-flight slot. */
typedef struct watched {
    mxop_client_t *c;
    const mxop_op_t *op;
    mxop_array_t x, y;
    int32_t slot;
    int rc;
} watched_t;

static void *watched_main(void *p)
{
    watched_t *w = p;
    mxop_set_inflight_slot(&w->slot);
    const char *attrs[] = {"ms", "60000", NULL};
    mxop_call_t call;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call;
    call.attrs = attrs;
    w->rc = mxop_forward(w->c, w->op, &call, &w->x, 1, &w->y, 1);
    mxop_set_inflight_slot(NULL);
    return NULL;
}

Test(pool, the_inflight_slot_names_the_sibling_worker_running_the_call)
{
    /* What Python's Ctrl-C reads: killing the worker the slot
     * names abandons that call, and only that one. */
    mxop_client_t *c = connect_pool(2);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    int32_t own = (int32_t)st.worker_pid;
    watched_t w;
    memset(&w, 0, sizeof w);
    w.c = c;
    int64_t shape[] = {64};
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &w.x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &w.y), 0);
    w.op = mxt_op(c, "sleep"); /* looked up before the client's session is busy */
    slow_t s;
    pthread_t t, tw;
    slow_start(&s, c, 4000, &t);
    cr_assert_eq(pthread_create(&tw, NULL, watched_main, &w), 0);
    int32_t pid = 0;
    for (int i = 0; i < 30000 && pid == 0; i++) {
        pid = __atomic_load_n(&w.slot, __ATOMIC_ACQUIRE);
        if (pid == 0)
            mxt_sleep_ms(1);
    }
    cr_assert_gt(pid, 0, "the slot never named a worker");
    /* Well inside the call by then: a worker killed before it took the call
     * would see the call retried on its replacement (call.c), not abandoned. */
    mxt_sleep_ms(300);
    cr_assert_eq(__atomic_load_n(&w.slot, __ATOMIC_ACQUIRE), pid, "the slot changed mid-call");
    cr_assert_neq(pid, own, "the slot names the client's own worker %d, busy with another call",
                  (int)own);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    pthread_join(tw, NULL);
    cr_assert_eq(w.rc, MXOP_EWORKER_CRASHED, "the abandoned call: %s", mxop_err_name(w.rc));
    cr_assert_eq(w.slot, 0, "the slot still names a worker after the call");
    /* The other thread's call, on the client's own session, was not touched. */
    slow_finish(&s, t);
    const mxop_op_t *relu = mxt_op(c, "relu");
    relu_checked(c, relu, &w.x, &w.y, 0.5f);
    mxop_array_free(c, &w.x);
    mxop_array_free(c, &w.y);
    mxop_close(c);
}
