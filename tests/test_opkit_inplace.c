/*
 * tests/test_opkit_inplace.c - an op that writes an input in place, from
 * C: a heap array the client stages is copied back after the
 * call (and counted as staging), a shared-memory array is written directly.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"opkit_inplace.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(opkit_inplace, .init = setup, .fini = teardown, .timeout = 60);

Test(opkit_inplace, staged_heap_input_is_copied_back)
{
    double x[5] = {1, 2, 3, 4, 5};
    mxop_array_t in = {
        .data = x, .dtype = MXOP_F64, .ndim = 1, .shape = {5}, .region = MXOP_REGION_HEAP};
    int64_t shape[] = {5};
    mxop_array_t y;
    mxt_array(client, MXOP_F64, 1, shape, 3, &y);
    mxop_stats_t before, after;
    memset(&before, 0, sizeof(before));
    memset(&after, 0, sizeof(after));
    cr_assert_eq(mxop_stats(client, &before), 0);
    int rc = mxop_forward(client, mxt_op(client, "double_inplace"), NULL, &in, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert_eq(mxop_stats(client, &after), 0);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(mxt_get(&y, i), i + 1.0);
        cr_assert_eq(x[i], 2.0 * (i + 1), "x[%d] = %g: the staged input was not copied back", i,
                     x[i]);
    }
    /* In and back: both directions are counted. */
    cr_assert_geq(after.staged_bytes - before.staged_bytes, 2 * sizeof(x));
    mxop_array_free(client, &y);
}

Test(opkit_inplace, shared_input_is_written_directly)
{
    int64_t shape[] = {4};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, shape, 1, &x);
    mxt_array(client, MXOP_F32, 1, shape, 2, &y);
    double orig[4];
    for (int i = 0; i < 4; i++)
        orig[i] = mxt_get(&x, i);
    int rc = mxop_forward(client, mxt_op(client, "double_inplace"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(mxt_get(&y, i), orig[i]);
        cr_assert_float_eq(mxt_get(&x, i), 2 * orig[i], 1e-6);
    }
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
}
