/*
 * tests/test_blas_used.c - the worker's count of the BLAS threads its
 * products used (server/worker/blas.c), which it says with each result so
 * that the client does not spin on a CPU its op's threads want
 * (client/spincap.c).  Linked against build/lib/libmxop-inproc.a, which
 * holds the worker's objects.
 */
#include <criterion/criterion.h>

#include "server/worker/blas.h"

TestSuite(blas_used, .timeout = 60);

/* A BLAS with the thread switch, or the test has nothing to count. */
static void need_blas(void)
{
    const char *why = NULL;
    cr_assert_not_null(mxop__blas_get(&why), "no BLAS: %s", why ? why : "?");
}

Test(blas_used, nothing_run_counts_one_thread)
{
    need_blas();
    (void)mxop__blas_take_threads_used();
    cr_assert_eq(mxop__blas_take_threads_used(), 1);
}

Test(blas_used, a_small_product_counts_one_thread)
{
    need_blas();
    (void)mxop__blas_take_threads_used();
    mxop__blas_fit_threads(64, 64, 64);
    cr_assert_eq(mxop__blas_take_threads_used(), 1);
}

/*
 * A large product runs on the library's own thread count (at least one),
 * the most of the products since the last take counts, and taking starts
 * the count again.
 */
Test(blas_used, the_most_threads_since_the_last_take_count_once)
{
    need_blas();
    (void)mxop__blas_take_threads_used();
    mxop__blas_fit_threads(1024, 1024, 1024);
    int big = mxop__blas_take_threads_used();
    cr_assert_geq(big, 1);
    mxop__blas_fit_threads(1024, 1024, 1024);
    mxop__blas_fit_threads(8, 8, 8);
    cr_assert_eq(mxop__blas_take_threads_used(), big, "a small product after a large one");
    cr_assert_eq(mxop__blas_take_threads_used(), 1, "taken twice");
}
