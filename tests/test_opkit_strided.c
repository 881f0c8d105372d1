/*
 * tests/test_opkit_strided.c - strides end to end: a strided
 * array in shared memory reaches an MXOP_OP_STRIDED op as it is, without a
 * copy; other ops, and heap arrays, get contiguous data the client stages
 * (counted in staged_bytes) and, for outputs, scatters back.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"opkit_strided.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(opkit_strided, .init = setup, .fini = teardown, .timeout = 60);

static uint64_t staged(void)
{
    mxop_stats_t st;
    memset(&st, 0, sizeof(st));
    cr_assert_eq(mxop_stats(client, &st), 0);
    return st.staged_bytes;
}

/*
 * A 4 x 6 f64 array in shared memory; x = its columns 1, 3, 5 (a 4 x 3 view:
 * offset one element, strides {6, 2}).
 */
static void column_view(mxop_array_t *base, mxop_array_t *x)
{
    int64_t shape[] = {4, 6};
    mxt_array(client, MXOP_F64, 2, shape, 7, base);
    *x = *base;
    x->data = (double *)base->data + 1;
    x->offset = base->offset + sizeof(double);
    x->shape[1] = 3;
    x->nbytes = 12 * sizeof(double);
}

static double base_at(const mxop_array_t *base, int r, int c)
{
    return ((const double *)base->data)[r * 6 + c];
}

static void run_scale(const char *opname, int expect_staging)
{
    mxop_array_t base, x, y;
    column_view(&base, &x);
    int64_t yshape[] = {4, 3};
    mxt_array(client, MXOP_F64, 2, yshape, 8, &y);
    int64_t st[] = {6, 2};
    const int64_t *in_st[] = {st};
    mxop_call_t call = {.struct_size = sizeof(call), .in_strides = in_st};
    uint64_t before = staged();
    int rc = mxop_forward(client, mxt_op(client, opname), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s: %s", opname, mxop_err_name(rc), mxop_last_error(client));
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            cr_assert_eq(mxt_get(&y, (size_t)(r * 3 + c)), 2.0 * base_at(&base, r, 2 * c + 1),
                         "%s: y[%d][%d]", opname, r, c);
    if (expect_staging)
        cr_assert_eq(staged() - before, 12 * sizeof(double), "%s: staged %llu bytes", opname,
                     (unsigned long long)(staged() - before));
    else
        cr_assert_eq(staged(), before, "%s: a strided op's input was staged", opname);
    mxop_array_free(client, &y);
    mxop_array_free(client, &base);
}

Test(opkit_strided, strided_input_to_strided_op_is_not_copied)
{
    cr_assert(mxop_op_flags(mxt_op(client, "strided_scale")) & MXOP_OP_STRIDED);
    run_scale("strided_scale", 0);
}

Test(opkit_strided, strided_input_to_dense_op_is_staged_contiguous)
{
    cr_assert_eq(mxop_op_flags(mxt_op(client, "dense_scale")), 0);
    run_scale("dense_scale", 1);
}

Test(opkit_strided, strided_op_sees_the_strides)
{
    mxop_array_t base, x, y;
    column_view(&base, &x);
    int64_t yshape[] = {4};
    mxt_array(client, MXOP_F64, 1, yshape, 8, &y);
    int64_t st[] = {6, 2};
    const int64_t *in_st[] = {st};
    mxop_call_t call = {.struct_size = sizeof(call), .in_strides = in_st};
    int rc = mxop_forward(client, mxt_op(client, "strides_seen"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    const double want[] = {4, 3, 6, 2};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(mxt_get(&y, (size_t)i), want[i], "y[%d] = %g", i, mxt_get(&y, (size_t)i));
    mxop_array_free(client, &y);
    mxop_array_free(client, &base);
}

Test(opkit_strided, strided_output_of_dense_op_is_scattered_back)
{
    /* y is every other column of a 2 x 4 heap array: x (2 x 2) doubled lands there. */
    double x[4] = {1, 2, 3, 4};
    double ybuf[8] = {0};
    mxop_array_t xa = {.data = x, .dtype = MXOP_F64, .ndim = 2, .shape = {2, 2}};
    mxop_array_t ya = {.data = ybuf, .dtype = MXOP_F64, .ndim = 2, .shape = {2, 2}};
    int64_t st[] = {4, 2};
    const int64_t *out_st[] = {st};
    mxop_call_t call = {.struct_size = sizeof(call), .out_strides = out_st};
    int rc = mxop_forward(client, mxt_op(client, "dense_scale"), &call, &xa, 1, &ya, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    const double want[8] = {2, 0, 4, 0, 6, 0, 8, 0};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(ybuf[i], want[i], "ybuf[%d] = %g", i, ybuf[i]);
}

Test(opkit_strided, negative_strides_are_gathered)
{
    /* x reversed: data at the last element, stride -1. */
    double buf[5] = {1, 2, 3, 4, 5};
    mxop_array_t xa = {.data = &buf[4], .dtype = MXOP_F64, .ndim = 1, .shape = {5}};
    int64_t yshape[] = {5};
    mxop_array_t y;
    mxt_array(client, MXOP_F64, 1, yshape, 8, &y);
    int64_t st[] = {-1};
    const int64_t *in_st[] = {st};
    mxop_call_t call = {.struct_size = sizeof(call), .in_strides = in_st};
    int rc = mxop_forward(client, mxt_op(client, "strided_scale"), &call, &xa, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mxt_get(&y, (size_t)i), 2.0 * (5 - i));
    mxop_array_free(client, &y);
}

Test(opkit_strided, strides_reaching_outside_the_region_are_ebounds)
{
    int64_t shape[] = {4};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F64, 1, shape, 1, &x);
    mxt_array(client, MXOP_F64, 1, shape, 2, &y);
    int64_t st[] = {1 << 30};
    const int64_t *in_st[] = {st};
    mxop_call_t call = {.struct_size = sizeof(call), .in_strides = in_st};
    int rc = mxop_forward(client, mxt_op(client, "strided_scale"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EBOUNDS, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(client), "in[0]") != NULL, "%s", mxop_last_error(client));
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
}
