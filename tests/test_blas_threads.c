/*
 * tests/test_blas_threads.c - the worker runs small products on one BLAS
 * thread and larger ones on the library's default count
 * (server/worker/blas.c): products that switch the count back and forth
 * on one worker, and two sessions doing so at once, each get the right
 * result.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
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

TestSuite(blas_threads, .init = setup, .fini = teardown, .timeout = 180);

/*
 * C = A B for square f64 matrices of side n through the worker, checked
 * against a loop in double; NULL or what was wrong, written into why.
 */
static const char *product_ok(mxop_client_t *c, int64_t n, unsigned seed, char *why, size_t len)
{
    int64_t shape[] = {n, n};
    mxop_array_t a, b, out;
    mxt_array(c, MXOP_F64, 2, shape, seed, &a);
    mxt_array(c, MXOP_F64, 2, shape, seed + 1, &b);
    mxt_array(c, MXOP_F64, 2, shape, seed + 2, &out);
    mxop_array_t in[] = {a, b};
    const char *fail = NULL;
    int rc = mxop_forward(c, mxt_op(c, "gemm"), NULL, in, 2, &out, 1);
    if (rc != 0) {
        snprintf(why, len, "gemm %lldx%lld: %s: %s", (long long)n, (long long)n, mxop_err_name(rc),
                 mxop_last_error(c));
        fail = why;
    }
    for (int64_t i = 0; i < n && fail == NULL; i++)
        for (int64_t j = 0; j < n && fail == NULL; j++) {
            double s = 0;
            for (int64_t k = 0; k < n; k++)
                s += mxt_get(&a, (size_t)(i * n + k)) * mxt_get(&b, (size_t)(k * n + j));
            double got = mxt_get(&out, (size_t)(i * n + j));
            if (fabs(got - s) > 1e-9 * (1 + fabs(s))) {
                snprintf(why, len, "gemm %lldx%lld, C[%lld][%lld]: got %.17g, expected %.17g",
                         (long long)n, (long long)n, (long long)i, (long long)j, got, s);
                fail = why;
            }
        }
    mxop_array_free(c, &a);
    mxop_array_free(c, &b);
    mxop_array_free(c, &out);
    return fail;
}

/* 48^3 is under the one-thread line (128^3), 160^3 over it. */
static const int64_t sides[] = {48, 160, 32, 200, 96, 129};

static const char *alternate(mxop_client_t *c, unsigned seed, char *why, size_t len)
{
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof(sides) / sizeof(sides[0]); i++) {
            const char *fail = product_ok(c, sides[i], seed + (unsigned)(round * 10 + i), why, len);
            if (fail != NULL)
                return fail;
        }
    return NULL;
}

Test(blas_threads, products_that_switch_the_thread_count_stay_right)
{
    const char *libs[] = {"gemm.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    char why[512];
    cr_assert_null(alternate(c, 1, why, sizeof(why)), "%s", why);
    mxop_close(c);
}

typedef struct session_arg {
    mxop_client_t *c;
    unsigned seed;
    char why[512];
    const char *fail;
} session_arg_t;

static void *session_main(void *p)
{
    session_arg_t *s = p;
    s->fail = alternate(s->c, s->seed, s->why, sizeof(s->why));
    return NULL;
}

Test(blas_threads, two_sessions_switching_at_once_stay_right)
{
    const char *libs[] = {"gemm.so", NULL};
    static session_arg_t s[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        s[i] = (session_arg_t){.c = mxt_connect_with(&daemon_, libs), .seed = 100u * (unsigned)i};
        cr_assert_eq(pthread_create(&t[i], NULL, session_main, &s[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        cr_expect_null(s[i].fail, "session %d: %s", i, s[i].why);
        mxop_close(s[i].c);
    }
}
