/*
 * tests/test_opkit_cpp.c - the C++ header: the example library
 * plugins/leaky_relu.cpp (a class and a lambda) computes and declares its
 * attributes, and C++ exceptions become error codes with their messages,
 * never a crash of the worker.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"leaky_relu.so", "opkit_cpp.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(opkit_cpp, .init = setup, .fini = teardown, .timeout = 60);

Test(opkit_cpp, leaky_relu_forward_and_backward)
{
    int64_t shape[] = {6};
    mxop_array_t x, y, dy, dx;
    mxt_array(client, MXOP_F64, 1, shape, 1, &x);
    mxt_array(client, MXOP_F64, 1, shape, 2, &y);
    mxt_array(client, MXOP_F64, 1, shape, 3, &dy);
    mxt_array(client, MXOP_F64, 1, shape, 4, &dx);
    const char *attrs[] = {"alpha", "0.5", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    const mxop_op_t *op = mxt_op(client, "leaky_relu");
    int rc = mxop_forward(client, op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    for (size_t i = 0; i < 6; i++) {
        double v = mxt_get(&x, i);
        cr_assert_float_eq(mxt_get(&y, i), v > 0 ? v : 0.5 * v, 1e-12);
    }
    mxop_array_t bin[] = {dy, x, y};
    rc = mxop_backward(client, op, &call, bin, 3, &dx, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    for (size_t i = 0; i < 6; i++)
        cr_assert_float_eq(mxt_get(&dx, i),
                           mxt_get(&x, i) > 0 ? mxt_get(&dy, i) : 0.5 * mxt_get(&dy, i), 1e-12);
    /* The declared default (0.01) when alpha is not given. */
    rc = mxop_forward(client, op, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(client));
    for (size_t i = 0; i < 6; i++) {
        double v = mxt_get(&x, i);
        cr_assert_float_eq(mxt_get(&y, i), v > 0 ? v : 0.01 * v, 1e-12);
    }
    mxop_attr_info_t a = {.struct_size = sizeof(a)};
    cr_assert_eq(mxop_op_attr(op, 0, &a), 0);
    cr_assert_str_eq(a.name, "alpha");
    cr_assert_str_eq(a.default_value, "0.01");
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
    mxop_array_free(client, &dy);
    mxop_array_free(client, &dx);
}

static int run(const char *opname, const char *const *attrs, int32_t dtype)
{
    int64_t shape[] = {4};
    mxop_array_t x, y;
    mxt_array(client, dtype, 1, shape, 1, &x);
    mxt_array(client, dtype, 1, shape, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, opname), &call, &x, 1, &y, 1);
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
    return rc;
}

static void expect(const char *opname, const char *const *attrs, int32_t dtype, int code,
                   const char *needle)
{
    pid_t before = mxt_worker_pid(client);
    int rc = run(opname, attrs, dtype);
    cr_assert_eq(rc, code, "%s: got %s (%s), want %s", opname, mxop_err_name(rc),
                 mxop_last_error(client), mxop_err_name(code));
    if (needle != NULL)
        cr_assert(strstr(mxop_last_error(client), needle) != NULL, "'%s' lacks '%s'",
                  mxop_last_error(client), needle);
    cr_assert_eq(mxt_worker_pid(client), before, "the worker was replaced: it crashed");
}

Test(opkit_cpp, lambda_op_with_required_attributes)
{
    const char *ok[] = {"lo", "-0.5", "hi", "0.5", NULL};
    expect("clamp", ok, MXOP_F32, 0, NULL);
    const char *missing[] = {"lo", "0", NULL};
    expect("clamp", missing, MXOP_F32, MXOP_EATTR, "required attribute 'hi'");
    const char *swapped[] = {"lo", "1", "hi", "0", NULL};
    expect("clamp", swapped, MXOP_F32, MXOP_EATTR, "lo is greater than hi");
}

Test(opkit_cpp, exceptions_become_codes)
{
    const char *e[] = {"kind", "error", NULL};
    expect("cpp_throw", e, MXOP_F32, MXOP_ESHAPE, "shape says no");
    const char *s[] = {"kind", "std", NULL};
    expect("cpp_throw", s, MXOP_F32, MXOP_EOP_FAILED, "runtime says no");
    const char *i[] = {"kind", "int", NULL};
    expect("cpp_throw", i, MXOP_F32, MXOP_EOP_FAILED, "unknown type");
    const char *v[] = {"kind", "view", NULL};
    expect("cpp_throw", v, MXOP_F32, MXOP_EDTYPE, "x is f32, expected i32");
    expect("cpp_throw", NULL, MXOP_F32, 0, NULL);
    expect("leaky_relu", NULL, MXOP_I32, MXOP_EDTYPE, "x is i32, expected f32");
}
