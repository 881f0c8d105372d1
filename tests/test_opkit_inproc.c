/*
 * tests/test_opkit_inproc.c - the in-process runner: op
 * libraries run inside this test process, with the worker's checks, and no
 * daemon.  Linked against build/lib/libmxop-inproc.a only.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "mxop/client.h" /* mxop_err_name only (common/errors.c is in the archive) */
#include "mxop/inproc.h"

static void load(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", MXOP_TEST_BUILD_DIR, rel);
    int rc = mxop_inproc_load(path);
    cr_assert_eq(rc, 0, "load %s: %s: %s", rel, mxop_err_name(rc), mxop_inproc_error());
}

TestSuite(opkit_inproc, .timeout = 60);

Test(opkit_inproc, runs_forward_and_backward_in_process)
{
    load("plugins/softmax.so");
    double x[6] = {1, 2, 3, -1, 0, 1}, y[6], dy[6] = {1, 0, 0, 0, 1, 0}, dx[6];
    int64_t shape[] = {2, 3};
    mxop_tensor_t tx = mxop_inproc_tensor(x, MXOP_F64, 2, shape);
    mxop_tensor_t ty = mxop_inproc_tensor(y, MXOP_F64, 2, shape);
    int rc = mxop_inproc_call("softmax", 0, NULL, 1, &tx, 1, &ty);
    cr_assert_eq(rc, 0, "%s", mxop_inproc_error());
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int c = 0; c < 3; c++)
            s += y[r * 3 + c];
        cr_assert_float_eq(s, 1.0, 1e-12);
    }
    cr_assert(y[2] > y[1] && y[1] > y[0]);
    mxop_tensor_t bin[] = {mxop_inproc_tensor(dy, MXOP_F64, 2, shape), tx, ty};
    mxop_tensor_t tdx = mxop_inproc_tensor(dx, MXOP_F64, 2, shape);
    rc = mxop_inproc_call("softmax", 1, NULL, 3, bin, 1, &tdx);
    cr_assert_eq(rc, 0, "%s", mxop_inproc_error());
    /* dx = y * (dy - sum(dy * y)) */
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int c = 0; c < 3; c++)
            s += dy[r * 3 + c] * y[r * 3 + c];
        for (int c = 0; c < 3; c++)
            cr_assert_float_eq(dx[r * 3 + c], y[r * 3 + c] * (dy[r * 3 + c] - s), 1e-12);
    }
}

Test(opkit_inproc, applies_the_workers_checks)
{
    load("plugins/softmax.so");
    float x[4] = {0}, y[3];
    int64_t xs[] = {4}, ys[] = {3};
    mxop_tensor_t tx = mxop_inproc_tensor(x, MXOP_F32, 1, xs);
    mxop_tensor_t ty = mxop_inproc_tensor(y, MXOP_F32, 1, ys);
    int rc = mxop_inproc_call("softmax", 0, NULL, 1, &tx, 1, &ty);
    cr_assert_eq(rc, MXOP_ESHAPE, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_inproc_error(), "output 0 is f32 [3]") != NULL, "%s",
              mxop_inproc_error());
    const char *attrs[] = {"dim", "0", NULL};
    ty = mxop_inproc_tensor(y, MXOP_F32, 1, xs);
    rc = mxop_inproc_call("softmax", 0, attrs, 1, &tx, 1, &ty);
    cr_assert_eq(rc, MXOP_EATTR, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_inproc_error(), "'dim'") != NULL, "%s", mxop_inproc_error());
    rc = mxop_inproc_call("nosuch", 0, NULL, 1, &tx, 1, &ty);
    cr_assert_eq(rc, MXOP_EUNKNOWN_OP);
    rc = mxop_inproc_call("softmax", 0, NULL, 2, (mxop_tensor_t[]){tx, tx}, 1, &ty);
    cr_assert_eq(rc, MXOP_EARITY);
}

Test(opkit_inproc, infer_and_op_errors)
{
    load("plugins/gemm.so");
    int32_t dt[2] = {MXOP_F32, MXOP_F32}, odt[1];
    mxop_shape_t sh[2] = {{2, {2, 3}}, {2, {3, 5}}}, osh[1];
    int rc = mxop_inproc_infer("gemm", NULL, 2, dt, sh, 1, odt, osh);
    cr_assert_eq(rc, 0, "%s", mxop_inproc_error());
    cr_assert_eq(odt[0], MXOP_F32);
    cr_assert_eq(osh[0].ndim, 2);
    cr_assert_eq(osh[0].dims[0], 2);
    cr_assert_eq(osh[0].dims[1], 5);
    const char *inf[] = {"alpha", "inf", NULL};
    rc = mxop_inproc_infer("gemm", inf, 2, dt, sh, 1, odt, osh);
    cr_assert_eq(rc, MXOP_EATTR, "got %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_inproc_error(), "finite") != NULL, "%s", mxop_inproc_error());
}

Test(opkit_inproc, cpp_exceptions_stay_codes)
{
    load("tests/plugins/opkit_cpp.so");
    float x[2] = {1, 2}, y[2];
    int64_t shape[] = {2};
    mxop_tensor_t tx = mxop_inproc_tensor(x, MXOP_F32, 1, shape);
    mxop_tensor_t ty = mxop_inproc_tensor(y, MXOP_F32, 1, shape);
    const char *attrs[] = {"kind", "std", NULL};
    int rc = mxop_inproc_call("cpp_throw", 0, attrs, 1, &tx, 1, &ty);
    cr_assert_eq(rc, MXOP_EOP_FAILED);
    cr_assert(strstr(mxop_inproc_error(), "runtime says no") != NULL, "%s", mxop_inproc_error());
}
