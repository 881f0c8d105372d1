/*
 * tests/test_opkit_dtypes.c - every dtype: the public helpers of
 * types.h against known values, and the host's routines on bf16 (which
 * NumPy lacks, so only C tests it) and the integers against references
 * computed here.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "harness.h"

Test(opkit_dtypes, table_gives_names_and_sizes, .timeout = 10)
{
    static const char *const names[] = {"f32", "f64", "f16", "bf16", "i32",
                                        "i64", "u8",  "i8",  "bool"};
    static const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1, 1, 1};
    for (int d = 0; d < MXOP_DTYPE_COUNT; d++) {
        cr_assert_str_eq(mxop_dtype_name(d), names[d]);
        cr_assert_eq(mxop_dtype_size(d), sizes[d]);
    }
    cr_assert_str_eq(mxop_dtype_name(MXOP_DTYPE_COUNT), "unknown");
    cr_assert_eq(mxop_dtype_size(-1), 0);
}

Test(opkit_dtypes, half_conversions_round_to_nearest_even, .timeout = 10)
{
    cr_assert_eq(mxop_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(mxop_f32_to_f16(-2.0f), 0xc000);
    cr_assert_eq(mxop_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(mxop_f32_to_f16(65520.0f), 0x7c00, "rounds to inf");
    cr_assert_eq(mxop_f32_to_f16(5.9604644775390625e-8f), 0x0001, "smallest subnormal");
    cr_assert_eq(mxop_f32_to_f16(2.98e-8f), 0x0000, "below half the smallest: zero");
    cr_assert_eq(mxop_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00, "a tie goes to even");
    cr_assert(isnan(mxop_f16_to_f32(mxop_f32_to_f16(NAN))));
    cr_assert_eq(mxop_f16_to_f32(0x0001), 5.9604644775390625e-8f);
    cr_assert_eq(mxop_f16_to_f32(0x3555), 0.333251953125f);
    cr_assert_eq(mxop_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(mxop_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80, "a tie goes to even");
    cr_assert_eq(mxop_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    cr_assert_eq(mxop_bf16_to_f32(0xc040), -3.0f);
    cr_assert(isnan(mxop_bf16_to_f32(mxop_f32_to_bf16(NAN))));
    char buf[32];
    int64_t dims[] = {2, -3, 40};
    cr_assert_str_eq(mxop_shape_format(buf, sizeof(buf), 3, dims), "[2,-3,40]");
    cr_assert_str_eq(mxop_shape_format(buf, sizeof(buf), 0, dims), "[]");
    cr_assert_str_eq(mxop_shape_format(buf, 4, 3, dims), "[2,");
}

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"opkit_host.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

/* Runs host_apply on two 4-element arrays of `dt`; out of dtype `odt`. */
static void apply(const char *const *attrs, int32_t dt, const void *a, const void *b, int32_t odt,
                  int64_t on, void *result)
{
    int64_t shape[] = {4}, oshape[] = {on};
    mxop_array_t x, y, z;
    cr_assert_eq(mxop_array_alloc(client, dt, 1, shape, &x), 0);
    cr_assert_eq(mxop_array_alloc(client, dt, 1, shape, &y), 0);
    cr_assert_eq(mxop_array_alloc(client, odt, 1, oshape, &z), 0);
    memcpy(x.data, a, 4 * mxop_dtype_size(dt));
    memcpy(y.data, b, 4 * mxop_dtype_size(dt));
    mxop_array_t in[] = {x, y};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, "host_apply"), &call, in, 2, &z, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    memcpy(result, z.data, (size_t)on * mxop_dtype_size(odt));
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
    mxop_array_free(client, &z);
}

Test(opkit_dtypes, bf16_routines_match_a_reference, .init = setup, .fini = teardown, .timeout = 60)
{
    const float av[4] = {1.5f, -2.0f, 0.25f, 100.0f}, bv[4] = {0.5f, 3.0f, -0.75f, 28.0f};
    uint16_t a[4], b[4], out[4];
    for (int i = 0; i < 4; i++) {
        a[i] = mxop_f32_to_bf16(av[i]);
        b[i] = mxop_f32_to_bf16(bv[i]);
    }
    const char *add[] = {"fn", "add", NULL};
    apply(add, MXOP_BF16, a, b, MXOP_BF16, 4, out);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], mxop_f32_to_bf16(av[i] + bv[i]), "add[%d]", i);
    const char *mul[] = {"fn", "mul", NULL};
    apply(mul, MXOP_BF16, a, b, MXOP_BF16, 4, out);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], mxop_f32_to_bf16(av[i] * bv[i]), "mul[%d]", i);
    const char *axpy[] = {"fn", "axpy", "alpha", "-2", NULL};
    apply(axpy, MXOP_BF16, a, b, MXOP_BF16, 4, out);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], mxop_f32_to_bf16(bv[i] - 2 * av[i]), "axpy[%d]", i);
    const char *sum[] = {"fn", "sum", NULL};
    double s;
    apply(sum, MXOP_BF16, a, b, MXOP_F64, 1, &s);
    cr_assert_eq(s, 1.5 - 2.0 + 0.25 + 100.0);
    const char *conv[] = {"fn", "convert", "to", "1", NULL};
    double d[4];
    apply(conv, MXOP_BF16, a, b, MXOP_F64, 4, d);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(d[i], av[i]);
}

Test(opkit_dtypes, integer_routines_wrap_and_saturate, .init = setup, .fini = teardown,
     .timeout = 60)
{
    const int8_t a[4] = {100, -100, 5, 127}, b[4] = {100, -100, -7, 1};
    int8_t out[4];
    const char *add[] = {"fn", "add", NULL};
    apply(add, MXOP_I8, a, b, MXOP_I8, 4, out);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], (int8_t)(uint8_t)((uint8_t)a[i] + (uint8_t)b[i]), "add wraps [%d]", i);
    const char *axpy[] = {"fn", "axpy", "alpha", "1", NULL};
    apply(axpy, MXOP_I8, a, b, MXOP_I8, 4, out);
    const int8_t sat[4] = {127, -128, -2, 127};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], sat[i], "axpy saturates [%d]: %d", i, out[i]);
    const int64_t big[4] = {INT64_MAX, -5, 1, 0}, zero[4] = {0};
    int64_t big_out[4];
    const char *copy[] = {"fn", "convert", "to", "5", NULL};
    apply(copy, MXOP_I64, big, zero, MXOP_I64, 4, big_out);
    cr_assert_eq(big_out[0], INT64_MAX, "i64 to i64 is exact");
    int32_t narrow[4];
    const char *to32[] = {"fn", "convert", "to", "4", NULL};
    apply(to32, MXOP_I64, big, zero, MXOP_I32, 4, narrow);
    cr_assert_eq(narrow[0], INT32_MAX);
    cr_assert_eq(narrow[1], -5);
}
