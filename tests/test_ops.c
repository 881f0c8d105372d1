/*
 * tests/test_ops.c - every example op, forward and backward, against a plain
 * double-precision reference, through the real daemon and worker.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"relu.so", "gemm.so", "softmax.so", "sum_n.so", "running_mean.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(ops, .init = setup, .fini = teardown, .timeout = 60);

static void forward_ok(const char *name, const char *const *attrs, const mxop_array_t *in, int n_in,
                       mxop_array_t *out, int n_out)
{
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, name), &call, in, n_in, out, n_out);
    cr_assert_eq(rc, 0, "%s forward: %s: %s", name, mxop_err_name(rc), mxop_last_error(client));
}

static void backward_ok(const char *name, const char *const *attrs, const mxop_array_t *in,
                        int n_in, mxop_array_t *out, int n_out)
{
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_backward(client, mxt_op(client, name), &call, in, n_in, out, n_out);
    cr_assert_eq(rc, 0, "%s backward: %s: %s", name, mxop_err_name(rc), mxop_last_error(client));
}

static void check_relu(int32_t dtype, double tol)
{
    int64_t shape[] = {7, 33};
    mxop_array_t x, y, dy, dx;
    mxt_array(client, dtype, 2, shape, 1, &x);
    mxt_array(client, dtype, 2, shape, 2, &y);
    mxt_array(client, dtype, 2, shape, 3, &dy);
    mxt_array(client, dtype, 2, shape, 4, &dx);
    size_t n = mxt_elems(&x);
    forward_ok("relu", NULL, &x, 1, &y, 1);
    double want[7 * 33], wantd[7 * 33];
    for (size_t i = 0; i < n; i++) {
        double v = mxt_get(&x, i);
        want[i] = v > 0 ? v : 0;
        wantd[i] = v > 0 ? mxt_get(&dy, i) : 0;
    }
    mxt_assert_close(&y, want, n, tol, tol);
    mxop_array_t bin[] = {dy, x, y};
    backward_ok("relu", NULL, bin, 3, &dx, 1);
    mxt_assert_close(&dx, wantd, n, tol, tol);
}

Test(ops, relu_forward_backward_f64)
{
    check_relu(MXOP_F64, 0);
}

Test(ops, relu_forward_backward_f32)
{
    check_relu(MXOP_F32, 0);
}

Test(ops, relu_backward_add_request_accumulates)
{
    int64_t shape[] = {64};
    mxop_array_t x, y, dy, dx;
    mxt_array(client, MXOP_F64, 1, shape, 5, &x);
    mxt_array(client, MXOP_F64, 1, shape, 6, &y);
    mxt_array(client, MXOP_F64, 1, shape, 7, &dy);
    mxt_array(client, MXOP_F64, 1, shape, 8, &dx);
    double want[64];
    for (int i = 0; i < 64; i++)
        want[i] = mxt_get(&dx, i) + (mxt_get(&x, i) > 0 ? mxt_get(&dy, i) : 0);
    forward_ok("relu", NULL, &x, 1, &y, 1);
    dx.req = MXOP_REQ_ADD;
    mxop_array_t bin[] = {dy, x, y};
    backward_ok("relu", NULL, bin, 3, &dx, 1);
    mxt_assert_close(&dx, want, 64, 1e-15, 1e-15);
}

/* op(A)[m][k] for a row-major A stored [M,K] or, transposed, [K,M]. */
static double opget(const mxop_array_t *a, int trans, int64_t r, int64_t c, int64_t rows,
                    int64_t cols)
{
    return trans ? mxt_get(a, (size_t)(c * rows + r)) : mxt_get(a, (size_t)(r * cols + c));
}

static void check_gemm(int ta, int tb, double alpha, int32_t dtype, double tol)
{
    const int64_t M = 5, K = 7, N = 3;
    int64_t ashape[] = {ta ? K : M, ta ? M : K};
    int64_t bshape[] = {tb ? N : K, tb ? K : N};
    int64_t cshape[] = {M, N};
    mxop_array_t a, b, c, dc, da, db;
    mxt_array(client, dtype, 2, ashape, 11, &a);
    mxt_array(client, dtype, 2, bshape, 12, &b);
    mxt_array(client, dtype, 2, cshape, 13, &c);
    mxt_array(client, dtype, 2, cshape, 14, &dc);
    mxt_array(client, dtype, 2, ashape, 15, &da);
    mxt_array(client, dtype, 2, bshape, 16, &db);
    char alpha_s[32];
    snprintf(alpha_s, sizeof(alpha_s), "%g", alpha);
    const char *attrs[] = {"transpose_a", ta ? "1" : "0", "transpose_b", tb ? "true" : "false",
                           "alpha",       alpha_s,        NULL};

    mxop_array_t in[] = {a, b};
    forward_ok("gemm", attrs, in, 2, &c, 1);
    double want[5 * 3];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += opget(&a, ta, m, k, M, K) * opget(&b, tb, k, n, K, N);
            want[m * N + n] = alpha * s;
        }
    mxt_assert_close(&c, want, (size_t)(M * N), tol, tol);

    mxop_array_t bin[] = {dc, a, b, c};
    mxop_array_t bout[] = {da, db};
    backward_ok("gemm", attrs, bin, 4, bout, 2);
    /* dopA = alpha * dC opB^T, dopB = alpha * opA^T dC, stored transposed when op is. */
    double wda[5 * 7], wdb[7 * 3];
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++)
                s += mxt_get(&dc, (size_t)(m * N + n)) * opget(&b, tb, k, n, K, N);
            wda[ta ? k * M + m : m * K + k] = alpha * s;
        }
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t m = 0; m < M; m++)
                s += opget(&a, ta, m, k, M, K) * mxt_get(&dc, (size_t)(m * N + n));
            wdb[tb ? n * K + k : k * N + n] = alpha * s;
        }
    mxt_assert_close(&bout[0], wda, (size_t)(M * K), tol, tol);
    mxt_assert_close(&bout[1], wdb, (size_t)(K * N), tol, tol);
}

Test(ops, gemm_nn)
{
    check_gemm(0, 0, 1.0, MXOP_F64, 1e-12);
}

Test(ops, gemm_tn)
{
    check_gemm(1, 0, 1.0, MXOP_F64, 1e-12);
}

Test(ops, gemm_nt)
{
    check_gemm(0, 1, 1.0, MXOP_F64, 1e-12);
}

Test(ops, gemm_tt)
{
    check_gemm(1, 1, 1.0, MXOP_F64, 1e-12);
}

Test(ops, gemm_alpha_f32)
{
    check_gemm(1, 0, 0.5, MXOP_F32, 1e-5);
}

static void softmax_ref(const mxop_array_t *x, int64_t rows, int64_t cols, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++)
            mx = fmax(mx, mxt_get(x, (size_t)(r * cols + j)));
        for (int64_t j = 0; j < cols; j++)
            s += exp(mxt_get(x, (size_t)(r * cols + j)) - mx);
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = exp(mxt_get(x, (size_t)(r * cols + j)) - mx) / s;
    }
}

Test(ops, softmax_forward_backward)
{
    int64_t shape[] = {4, 9};
    mxop_array_t x, y, dy, dx;
    mxt_array(client, MXOP_F64, 2, shape, 21, &x);
    for (size_t i = 0; i < mxt_elems(&x); i++)
        mxt_set(&x, i, mxt_get(&x, i) * 30); /* large values: stability matters */
    mxt_array(client, MXOP_F64, 2, shape, 22, &y);
    mxt_array(client, MXOP_F64, 2, shape, 23, &dy);
    mxt_array(client, MXOP_F64, 2, shape, 24, &dx);
    forward_ok("softmax", NULL, &x, 1, &y, 1);
    double want[36], wantd[36];
    softmax_ref(&x, 4, 9, want);
    mxt_assert_close(&y, want, 36, 1e-12, 1e-14);
    for (int r = 0; r < 4; r++) {
        double dot = 0;
        for (int j = 0; j < 9; j++)
            dot += mxt_get(&dy, r * 9 + j) * want[r * 9 + j];
        for (int j = 0; j < 9; j++)
            wantd[r * 9 + j] = want[r * 9 + j] * (mxt_get(&dy, r * 9 + j) - dot);
    }
    mxop_array_t bin[] = {dy, x, y};
    backward_ok("softmax", NULL, bin, 3, &dx, 1);
    mxt_assert_close(&dx, wantd, 36, 1e-12, 1e-14);
}

Test(ops, sum_n_takes_any_number_of_inputs)
{
    int64_t shape[] = {3, 4};
    for (int k = 1; k <= 5; k += 2) {
        mxop_array_t in[5], out, dy, dx[5];
        for (int i = 0; i < k; i++)
            mxt_array(client, MXOP_F64, 2, shape, 30 + (unsigned)i, &in[i]);
        mxt_array(client, MXOP_F64, 2, shape, 40, &out);
        forward_ok("sum_n", NULL, in, k, &out, 1);
        double want[12];
        for (int e = 0; e < 12; e++) {
            want[e] = 0;
            for (int i = 0; i < k; i++)
                want[e] += mxt_get(&in[i], e);
        }
        mxt_assert_close(&out, want, 12, 1e-15, 1e-15);

        mxt_array(client, MXOP_F64, 2, shape, 41, &dy);
        mxop_array_t bin[11];
        bin[0] = dy;
        for (int i = 0; i < k; i++)
            bin[1 + i] = in[i];
        bin[1 + k] = out;
        for (int i = 0; i < k; i++)
            mxt_array(client, MXOP_F64, 2, shape, 50 + (unsigned)i, &dx[i]);
        backward_ok("sum_n", NULL, bin, k + 2, dx, k);
        double wd[12];
        for (int e = 0; e < 12; e++)
            wd[e] = mxt_get(&dy, e);
        for (int i = 0; i < k; i++)
            mxt_assert_close(&dx[i], wd, 12, 0, 0);
    }
}

Test(ops, stateful_running_mean_persists_and_is_destroyed)
{
    const mxop_op_t *op = mxt_op(client, "running_mean_norm");
    mxop_op_info_t info;
    cr_assert_eq(mxop_op_info(op, &info), 0);
    cr_assert(info.stateful);

    int64_t shape[] = {4, 3};
    mxop_shape_t s = {2, {4, 3}};
    int32_t dt = MXOP_F64;
    const char *attrs[] = {"momentum", "0.5", NULL};
    uint64_t state = 0;
    int rc = mxop_state_create(client, op, attrs, 1, &dt, &s, &state);
    cr_assert_eq(rc, 0, "state_create: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert_neq(state, 0);

    double mean[3] = {0, 0, 0};
    for (int step = 0; step < 3; step++) {
        mxop_array_t x, y;
        mxt_array(client, MXOP_F64, 2, shape, 60 + (unsigned)step, &x);
        mxt_array(client, MXOP_F64, 2, shape, 70, &y);
        mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .state = state};
        rc = mxop_forward(client, op, &call, &x, 1, &y, 1);
        cr_assert_eq(rc, 0, "state forward: %s: %s", mxop_err_name(rc), mxop_last_error(client));
        for (int f = 0; f < 3; f++) {
            double bm = 0;
            for (int r = 0; r < 4; r++)
                bm += mxt_get(&x, r * 3 + f) / 4;
            mean[f] = step == 0 ? bm : 0.5 * mean[f] + 0.5 * bm;
        }
        double want[12];
        for (int i = 0; i < 12; i++)
            want[i] = mxt_get(&x, i) - mean[i % 3];
        /* The expected values depend on every earlier call: the state persisted. */
        mxt_assert_close(&y, want, 12, 1e-12, 1e-14);
        mxop_array_free(client, &x);
        mxop_array_free(client, &y);
    }

    cr_assert_eq(mxop_state_destroy(client, state), 0);
    rc = mxop_state_destroy(client, state);
    cr_assert_eq(rc, MXOP_EUNKNOWN_STATE, "second destroy: %s", mxop_err_name(rc));
    mxop_array_t x, y;
    mxt_array(client, MXOP_F64, 2, shape, 80, &x);
    mxt_array(client, MXOP_F64, 2, shape, 81, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .state = state};
    rc = mxop_forward(client, op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EUNKNOWN_STATE, "use after destroy: %s", mxop_err_name(rc));
}

Test(ops, infer_shape_and_type)
{
    const mxop_op_t *gemm = mxt_op(client, "gemm");
    int32_t dts[2] = {MXOP_F64, MXOP_F64}, odt = -1;
    mxop_shape_t in[2] = {{2, {7, 5}}, {2, {7, 3}}}, out;
    const char *attrs[] = {"transpose_a", "1", NULL};
    int rc = mxop_infer(client, gemm, attrs, 2, dts, in, 1, &odt, &out);
    cr_assert_eq(rc, 0, "infer: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert_eq(odt, MXOP_F64);
    cr_assert_eq(out.ndim, 2);
    cr_assert_eq(out.dims[0], 5);
    cr_assert_eq(out.dims[1], 3);

    const mxop_op_t *relu = mxt_op(client, "relu");
    int32_t f32 = MXOP_F32;
    mxop_shape_t s3 = {3, {2, 3, 4}};
    rc = mxop_infer(client, relu, NULL, 1, &f32, &s3, 1, &odt, &out);
    cr_assert_eq(rc, 0);
    cr_assert_eq(odt, MXOP_F32);
    cr_assert_eq(out.ndim, 3);
    cr_assert_eq(out.dims[2], 4);

    /* Inference reports incompatible inputs with the same codes as a call. */
    mxop_shape_t bad[2] = {{2, {7, 5}}, {2, {6, 3}}};
    rc = mxop_infer(client, gemm, attrs, 2, dts, bad, 1, &odt, &out);
    cr_assert_eq(rc, MXOP_ESHAPE, "got %s", mxop_err_name(rc));
    int32_t i32 = MXOP_I32;
    rc = mxop_infer(client, relu, NULL, 1, &i32, &s3, 1, &odt, &out);
    cr_assert_eq(rc, MXOP_EDTYPE, "got %s", mxop_err_name(rc));
}

Test(ops, op_signatures_are_listed)
{
    mxop_op_info_t info;
    cr_assert_eq(mxop_op_info(mxt_op(client, "sum_n"), &info), 0);
    cr_assert_eq(info.num_inputs, -1);
    cr_assert_eq(info.min_inputs, 1);
    cr_assert_eq(info.num_outputs, 1);
    cr_assert(info.has_backward);
    cr_assert_eq(mxop_op_info(mxt_op(client, "gemm"), &info), 0);
    cr_assert_eq(info.num_inputs, 2);
    cr_assert_str_eq(info.name, "gemm");
    cr_assert(mxop_op_count(client) >= 5);
}

Test(ops, heap_arrays_are_staged_and_counted)
{
    double xs[16], ys[16];
    for (int i = 0; i < 16; i++)
        xs[i] = i - 8.0, ys[i] = 99;
    mxop_array_t x = {.data = xs,
                      .dtype = MXOP_F64,
                      .ndim = 1,
                      .shape = {16},
                      .region = MXOP_REGION_HEAP,
                      .nbytes = sizeof(xs)};
    mxop_array_t y = x;
    y.data = ys;
    forward_ok("relu", NULL, &x, 1, &y, 1);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(ys[i], xs[i] > 0 ? xs[i] : 0);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(client, &st), 0);
    cr_assert_geq(st.staged_bytes, 2 * sizeof(xs));
}
