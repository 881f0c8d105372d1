/*
 * tests/test_opkit_dynamic.c - outputs whose shape is known only during
 * forward, through plugins/masked_select.c: the caller gets the
 * real shape in the array it allocated, the data without a copy, and
 * backward takes the real-shaped output and gradient.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"masked_select.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(opkit_dynamic, .init = setup, .fini = teardown, .timeout = 60);

static const uint8_t MASK[6] = {1, 0, 0, 1, 1, 0};

/* x (2 x 3 f64, from seed 1) and its mask; y allocated at its largest, [6]. */
static void operands(mxop_array_t *x, mxop_array_t *m, mxop_array_t *y)
{
    int64_t shape[] = {2, 3}, big[] = {6};
    mxt_array(client, MXOP_F64, 2, shape, 1, x);
    cr_assert_eq(mxop_array_alloc(client, MXOP_U8, 2, shape, m), 0);
    memcpy(m->data, MASK, sizeof(MASK));
    cr_assert_eq(mxop_array_alloc(client, MXOP_F64, 1, big, y), 0);
}

Test(opkit_dynamic, forward_gives_the_real_shape_in_place)
{
    const mxop_op_t *op = mxt_op(client, "masked_select");
    cr_assert_eq(mxop_op_dynamic_outputs(op), 1);
    mxop_array_t x, m, y;
    operands(&x, &m, &y);
    void *data = y.data;
    int32_t dt[2] = {MXOP_F64, MXOP_U8}, odt[1];
    mxop_shape_t sh[2] = {{2, {2, 3}}, {2, {2, 3}}}, osh[1];
    cr_assert_eq(mxop_infer(client, op, NULL, 2, dt, sh, 1, odt, osh), 0);
    cr_assert_eq(osh[0].dims[0], 6, "infer gives the largest shape");
    mxop_array_t in[] = {x, m};
    uint64_t staged_before;
    mxop_stats_t st = {0};
    mxop_stats(client, &st);
    staged_before = st.staged_bytes;
    int rc = mxop_forward(client, op, NULL, in, 2, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert_eq(y.ndim, 1);
    cr_assert_eq(y.shape[0], 3);
    cr_assert_eq(y.nbytes, 3 * sizeof(double));
    cr_assert_eq(y.data, data, "the output stays where it was allocated");
    mxop_stats(client, &st);
    cr_assert_eq(st.staged_bytes, staged_before, "nothing was copied");
    const int sel[3] = {0, 3, 4};
    for (int j = 0; j < 3; j++)
        cr_assert_eq(mxt_get(&y, (size_t)j), mxt_get(&x, (size_t)sel[j]));
    mxop_array_free(client, &x);
    mxop_array_free(client, &m);
    mxop_array_free(client, &y);
}

Test(opkit_dynamic, backward_takes_real_shaped_output_and_gradient)
{
    const mxop_op_t *op = mxt_op(client, "masked_select");
    mxop_array_t x, m, y;
    operands(&x, &m, &y);
    mxop_array_t in[] = {x, m};
    cr_assert_eq(mxop_forward(client, op, NULL, in, 2, &y, 1), 0, "%s", mxop_last_error(client));
    int64_t gshape[] = {3}, shape[] = {2, 3};
    mxop_array_t dy, dx, dm;
    mxt_array(client, MXOP_F64, 1, gshape, 5, &dy);
    mxt_array(client, MXOP_F64, 2, shape, 6, &dx);
    cr_assert_eq(mxop_array_alloc(client, MXOP_U8, 2, shape, &dm), 0);
    mxop_array_t bin[] = {dy, x, m, y};
    mxop_array_t bout[] = {dx, dm};
    int rc = mxop_backward(client, op, NULL, bin, 4, bout, 2);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    int j = 0;
    for (size_t i = 0; i < 6; i++)
        cr_assert_eq(mxt_get(&dx, i), MASK[i] ? mxt_get(&dy, (size_t)j++) : 0.0, "dx[%zu]", i);
    mxop_array_free(client, &x);
    mxop_array_free(client, &m);
    mxop_array_free(client, &y);
    mxop_array_free(client, &dy);
    mxop_array_free(client, &dx);
    mxop_array_free(client, &dm);
}

Test(opkit_dynamic, heap_output_gets_its_shape_too)
{
    double xb[4] = {1, 2, 3, 4}, yb[4] = {0};
    uint8_t mb[4] = {0, 1, 0, 1};
    mxop_array_t in[] = {{.data = xb, .dtype = MXOP_F64, .ndim = 1, .shape = {4}},
                         {.data = mb, .dtype = MXOP_U8, .ndim = 1, .shape = {4}}};
    mxop_array_t y = {.data = yb, .dtype = MXOP_F64, .ndim = 1, .shape = {4}};
    int rc = mxop_forward(client, mxt_op(client, "masked_select"), NULL, in, 2, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    cr_assert_eq(y.shape[0], 2);
    cr_assert_eq(yb[0], 2.0);
    cr_assert_eq(yb[1], 4.0);
}
