/*
 * tests/test_opkit_attrs.c - declared attributes: the worker
 * refuses unknown keys, wrong types and missing required attributes before
 * any callback, the typed readers return the declared defaults, the client
 * exposes the declarations, and ops without declarations behave as before.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"opkit_attrs.so", "softmax.so", "gemm.so", "relu.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(opkit_attrs, .init = setup, .fini = teardown, .timeout = 60);

/* Runs attrs_echo (or `opname`) with `attrs`; out gets the f64[16] echo. */
static int echo(const char *opname, const char *const *attrs, mxop_array_t *out)
{
    int64_t xs[] = {4}, ys[] = {16};
    mxop_array_t x;
    mxt_array(client, MXOP_F32, 1, xs, 1, &x);
    mxt_array(client, MXOP_F64, 1, ys, 2, out);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, opname), &call, &x, 1, out, 1);
    mxop_array_free(client, &x);
    return rc;
}

static void expect_eattr(const char *opname, const char *const *attrs, const char *const *needles)
{
    mxop_array_t y;
    int rc = echo(opname, attrs, &y);
    mxop_array_free(client, &y);
    cr_assert_eq(rc, MXOP_EATTR, "got %s (%s)", mxop_err_name(rc), mxop_last_error(client));
    for (int i = 0; needles[i] != NULL; i++)
        cr_assert(strstr(mxop_last_error(client), needles[i]) != NULL,
                  "message '%s' does not mention '%s'", mxop_last_error(client), needles[i]);
}

Test(opkit_attrs, unknown_key_is_refused_naming_op_key_and_known)
{
    const char *attrs[] = {"k", "1", "sclae", "2", NULL};
    const char *needles[] = {"attrs_echo",           "'sclae'", "k (int, required)", "scale (float",
                             "weights (float list)", NULL};
    expect_eattr("attrs_echo", attrs, needles);
}

Test(opkit_attrs, wrong_type_is_refused_for_every_type)
{
    static const char *const cases[][2] = {
        {"k", "x1"},          {"scale", "fast"},    {"flag", "maybe"},
        {"sizes", "1,two,3"}, {"weights", "0.5;1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *attrs[] = {"k", "1", cases[i][0], cases[i][1], NULL};
        if (strcmp(cases[i][0], "k") == 0) {
            attrs[0] = cases[i][0];
            attrs[1] = cases[i][1];
            attrs[2] = NULL;
        }
        char key[64];
        snprintf(key, sizeof(key), "'%s'", cases[i][0]);
        const char *needles[] = {"attrs_echo", key, cases[i][1], "it knows", NULL};
        expect_eattr("attrs_echo", attrs, needles);
    }
}

/* strtod reads these, but a float attribute is documented as a finite number. */
Test(opkit_attrs, non_finite_float_is_refused_naming_op_and_attribute)
{
    static const char *const values[] = {"nan", "inf", "-inf", "NaN", "Infinity", "-nan(1)"};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        const char *attrs[] = {"k", "1", "scale", values[i], NULL};
        const char *needles[] = {"attrs_echo", "'scale'", values[i], "not a finite number", NULL};
        expect_eattr("attrs_echo", attrs, needles);
    }
    const char *list[] = {"k", "1", "weights", "0.5, inf", NULL};
    const char *list_needles[] = {"attrs_echo", "'weights'", "not a list of finite numbers", NULL};
    expect_eattr("attrs_echo", list, list_needles);
}

/* An op without declarations reads through the same parser: its reader refuses them too. */
Test(opkit_attrs, non_finite_float_is_refused_by_the_reader)
{
    const char *attrs[] = {"scale", "-inf", NULL};
    const char *needles[] = {"'scale'", "-inf", "not a finite number", NULL};
    expect_eattr("attrs_none", attrs, needles);
}

Test(opkit_attrs, missing_required_is_refused)
{
    const char *attrs[] = {"scale", "1", NULL};
    const char *needles[] = {"attrs_echo", "required attribute 'k'", "missing", NULL};
    expect_eattr("attrs_echo", attrs, needles);
}

Test(opkit_attrs, refused_before_any_callback)
{
    const char *bad[] = {"k", "1", "nope", "1", NULL};
    const char *good[] = {"k", "1", NULL};
    mxop_array_t y;
    cr_assert_eq(echo("attrs_echo", bad, &y), MXOP_EATTR);
    mxop_array_free(client, &y);
    cr_assert_eq(echo("attrs_echo", good, &y), 0, "%s", mxop_last_error(client));
    /* check_attrs ran for the good call only: the bad one never reached the op. */
    cr_assert_eq(mxt_get(&y, 13), 1.0, "check_attrs ran %g times", mxt_get(&y, 13));
    mxop_array_free(client, &y);
}

Test(opkit_attrs, typed_readers_return_declared_defaults)
{
    const char *attrs[] = {"k", "42", NULL};
    mxop_array_t y;
    int rc = echo("attrs_echo", attrs, &y);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    const double want[] = {42, 2.5, 1, 3, 's', 3, 1, 2, 3, 0, 0, 0, 1};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert_eq(mxt_get(&y, i), want[i], "out[%zu] = %g, want %g", i, mxt_get(&y, i), want[i]);
    mxop_array_free(client, &y);
}

Test(opkit_attrs, given_values_are_read)
{
    const char *attrs[] = {"k",    "-3",    "scale",  "0.25",    "flag",        "False", "mode",
                           "mean", "sizes", "[7, 8]", "weights", "(0.5, -1.5)", NULL};
    mxop_array_t y;
    int rc = echo("attrs_echo", attrs, &y);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    const double want[] = {-3, 0.25, 0, 4, 'm', 2, 7, 8, 0, 2, 0.5, -1.5, 6};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert_eq(mxt_get(&y, i), want[i], "out[%zu] = %g, want %g", i, mxt_get(&y, i), want[i]);
    mxop_array_free(client, &y);
}

Test(opkit_attrs, list_longer_than_reader_capacity_is_eattr)
{
    const char *attrs[] = {"k", "1", "weights", "1,2,3", NULL};
    mxop_array_t y;
    int rc = echo("attrs_echo", attrs, &y);
    mxop_array_free(client, &y);
    cr_assert_eq(rc, MXOP_EATTR, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(client), "more than 2 entries") != NULL, "%s",
              mxop_last_error(client));
}

Test(opkit_attrs, op_without_declarations_takes_anything)
{
    const char *attrs[] = {"anything", "goes", "k", "5", NULL};
    mxop_array_t y;
    int rc = echo("attrs_none", attrs, &y);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert_eq(mxt_get(&y, 0), 5.0);
    cr_assert_eq(mxt_get(&y, 1), -7.0, "no declared default: the reader's own applies");
    cr_assert_eq(mxt_get(&y, 12), 2.0);
    mxop_array_free(client, &y);
    cr_assert_eq(mxop_op_attr_count(mxt_op(client, "attrs_none")), 0);
}

Test(opkit_attrs, declarations_are_exposed_to_the_client)
{
    const mxop_op_t *op = mxt_op(client, "attrs_echo");
    cr_assert_eq(mxop_op_attr_count(op), 6);
    mxop_attr_info_t a = {.struct_size = sizeof(a)};
    cr_assert_eq(mxop_op_attr(op, 0, &a), 0);
    cr_assert_str_eq(a.name, "k");
    cr_assert_eq(a.type, MXOP_ATTR_INT);
    cr_assert_eq(a.required, 1);
    cr_assert_null(a.default_value);
    cr_assert_str_eq(a.doc, "how many");
    cr_assert_eq(mxop_op_attr(op, 4, &a), 0);
    cr_assert_str_eq(a.name, "sizes");
    cr_assert_eq(a.type, MXOP_ATTR_INT_LIST);
    cr_assert_eq(a.required, 0);
    cr_assert_str_eq(a.default_value, "(1, 2, 3)");
    cr_assert_eq(mxop_op_attr(op, 5, &a), 0);
    cr_assert_str_eq(a.doc, "");
    cr_assert_eq(mxop_op_attr(op, 6, &a), MXOP_EINVAL);
    cr_assert_eq(mxop_op_attr(op, -1, &a), MXOP_EINVAL);

    /* A caller compiled with a shorter struct gets only what it has room for. */
    mxop_attr_info_t small;
    memset(&small, 0xab, sizeof(small));
    small.struct_size = (uint32_t)offsetof(mxop_attr_info_t, required);
    cr_assert_eq(mxop_op_attr(op, 1, &small), 0);
    cr_assert_str_eq(small.name, "scale");
    cr_assert_eq(small.required, (int32_t)0xabababab, "wrote beyond struct_size");

    const mxop_op_t *sm = mxt_op(client, "softmax");
    cr_assert_eq(mxop_op_attr_count(sm), 1);
    cr_assert_eq(mxop_op_attr(sm, 0, &a), 0);
    cr_assert_str_eq(a.name, "axis");
    cr_assert_str_eq(a.default_value, "-1");
    cr_assert_eq(mxop_op_attr_count(mxt_op(client, "gemm")), 3);
}

Test(opkit_attrs, softmax_refuses_a_misspelt_axis)
{
    /* The case: softmax(x, dim=0) used to compute over the last axis. */
    int64_t shape[] = {2, 3};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 2, shape, 1, &x);
    mxt_array(client, MXOP_F32, 2, shape, 2, &y);
    const char *attrs[] = {"dim", "0", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, "softmax"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EATTR, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(client), "'dim'") != NULL, "%s", mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "axis (int, default '-1')") != NULL, "%s",
              mxop_last_error(client));
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
}

Test(opkit_attrs, infer_checks_declarations_too)
{
    const char *attrs[] = {"transposeA", "1", NULL};
    int32_t dt[2] = {MXOP_F32, MXOP_F32}, odt[1];
    mxop_shape_t sh[2] = {{2, {2, 3}}, {2, {3, 4}}}, osh[1];
    int rc = mxop_infer(client, mxt_op(client, "gemm"), attrs, 2, dt, sh, 1, odt, osh);
    cr_assert_eq(rc, MXOP_EATTR, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(client), "transpose_a (bool") != NULL, "%s",
              mxop_last_error(client));
    const char *ok[] = {"transpose_b", "true", NULL};
    mxop_shape_t sh2[2] = {{2, {2, 3}}, {2, {4, 3}}};
    rc = mxop_infer(client, mxt_op(client, "gemm"), ok, 2, dt, sh2, 1, odt, osh);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    cr_assert_eq(osh[0].dims[1], 4);
}

Test(opkit_attrs, bad_declaration_refused_at_load)
{
    int rc = mxop_load_library(client, "opkit_bad_decl.so");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(mxop_last_error(client), "attribute 'axis'") != NULL, "%s",
              mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "'last'") != NULL, "%s", mxop_last_error(client));
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_array_t y;
    const char *attrs[] = {"k", "1", NULL};
    cr_assert_eq(echo("attrs_echo", attrs, &y), 0, "%s", mxop_last_error(client));
    mxop_array_free(client, &y);
}

Test(opkit_attrs, non_finite_default_refused_at_load)
{
    int rc = mxop_load_library(client, "opkit_nan_default.so");
    cr_assert_neq(rc, 0);
    const char *msg = mxop_last_error(client);
    cr_assert(strstr(msg, "op 'nan_default'") != NULL, "%s", msg);
    cr_assert(strstr(msg, "attribute 'eps'") != NULL, "%s", msg);
    cr_assert(strstr(msg, "not a finite number") != NULL, "%s", msg);
    cr_assert(mxt_daemon_alive(&daemon_));
}

Test(opkit_attrs, v2_structs_carry_struct_size)
{
    const mxop_op_t *op = mxt_op(client, "attrs_echo");
    mxop_op_info_v2_t info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    cr_assert_eq(mxop_op_info_v2(op, &info), 0);
    cr_assert_str_eq(info.name, "attrs_echo");
    cr_assert_eq(info.num_attrs, 6);
    cr_assert_eq(info.num_outputs, 1);
    info.struct_size = 0;
    cr_assert_eq(mxop_op_info_v2(op, &info), MXOP_EINVAL);

    /* An older, shorter caller struct: nothing beyond it is written. */
    mxop_op_info_v2_t small;
    memset(&small, 0xab, sizeof(small));
    small.struct_size = (uint32_t)offsetof(mxop_op_info_v2_t, name);
    cr_assert_eq(mxop_op_info_v2(op, &small), 0);
    cr_assert_eq(small.num_outputs, 1);
    cr_assert_eq((uintptr_t)small.name, (uintptr_t)0xabababababababababull & UINTPTR_MAX);

    mxop_stats_v2_t st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    cr_assert_eq(mxop_stats_v2(client, &st), 0, "%s", mxop_last_error(client));
    cr_assert_gt(st.worker_pid, 0);
    cr_assert_geq(st.daemon_sessions, 1);
    st.struct_size = 0;
    cr_assert_eq(mxop_stats_v2(client, &st), MXOP_EINVAL);
}
