/*
 * plugins/softmax.c - op "softmax" over the last axis.
 *
 *     y[..., j] = exp(x[..., j] - max) / sum_j exp(x[..., j] - max)
 *     backward: dx = y * (dy - sum_j dy * y)      in = [dy, x, y], out = [dx]
 *
 * Subtracting the row's maximum keeps exp() from overflowing, so large
 * logits give exact probabilities instead of inf/inf = NaN.  The optional
 * attribute `axis` is declared (an int, default -1), so that the worker
 * refuses a misspelt key such as `dim`; it may only name the last axis (-1
 * or ndim - 1), and any other value is refused with MXOP_EATTR rather than
 * silently ignored.
 */
#include <math.h>

#include "mxop/op.h"

MXOP_PLUGIN("softmax", "1.0");

static const mxop_host_t *host;

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[MXOP_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32",
                                                        "i64", "u8",  "i8",  "bool"};
    return dtype >= 0 && dtype < MXOP_DTYPE_COUNT ? names[dtype] : "unknown";
}

static int softmax_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                               mxop_shape_t *out)
{
    int64_t axis;
    int rc = host->attr_int(ctx, "axis", -1, &axis);
    if (rc != 0)
        return rc;
    if (in[0].ndim < 1)
        return host->set_error(ctx, MXOP_ESHAPE, "x is a scalar; it needs at least one axis");
    if (axis != -1 && axis != in[0].ndim - 1)
        return host->set_error(ctx, MXOP_EATTR,
                               "attribute 'axis' is %lld but only the last axis (-1 or "
                               "%d) is supported",
                               (long long)axis, in[0].ndim - 1);
    out[0] = in[0];
    return 0;
}

static int softmax_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    for (int i = 0; i < n_in; i++) {
        if (in[i] != MXOP_F32 && in[i] != MXOP_F64)
            return host->set_error(ctx, MXOP_EDTYPE,
                                   "input %d is %s; only f32 and f64 are supported", i,
                                   dtype_name(in[i]));
        if (in[i] != in[0])
            return host->set_error(ctx, MXOP_EDTYPE, "input %d is %s but input 0 is %s", i,
                                   dtype_name(in[i]), dtype_name(in[0]));
    }
    for (int i = 0; i < n_out; i++)
        out[i] = in[0];
    return 0;
}

/*
 * One row at a time: find the maximum, sum the shifted exponentials in
 * double (so a long f32 row loses no precision), then write or add.
 */
#define SOFTMAX_FORWARD(T, EXP)                                                                    \
    do {                                                                                           \
        for (size_t r = 0; r < rows; r++) {                                                        \
            const T *xr = (const T *)x->data + r * cols;                                           \
            T *yr = (T *)y->data + r * cols;                                                       \
            T mx = xr[0];                                                                          \
            for (size_t j = 1; j < cols; j++)                                                      \
                mx = xr[j] > mx ? xr[j] : mx;                                                      \
            double s = 0;                                                                          \
            for (size_t j = 0; j < cols; j++)                                                      \
                s += EXP(xr[j] - mx);                                                              \
            for (size_t j = 0; j < cols; j++) {                                                    \
                T v = (T)(EXP(xr[j] - mx) / s);                                                    \
                yr[j] = add ? yr[j] + v : v;                                                       \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define SOFTMAX_BACKWARD(T)                                                                        \
    do {                                                                                           \
        for (size_t r = 0; r < rows; r++) {                                                        \
            const T *dyr = (const T *)dy->data + r * cols;                                         \
            const T *yr = (const T *)y->data + r * cols;                                           \
            T *dxr = (T *)dx->data + r * cols;                                                     \
            double dot = 0;                                                                        \
            for (size_t j = 0; j < cols; j++)                                                      \
                dot += (double)dyr[j] * yr[j];                                                     \
            for (size_t j = 0; j < cols; j++) {                                                    \
                T g = (T)(yr[j] * (dyr[j] - dot));                                                 \
                dxr[j] = add ? dxr[j] + g : g;                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static int softmax_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    const mxop_tensor_t *x = &in[0];
    mxop_tensor_t *y = &out[0];
    size_t cols = (size_t)x->shape[x->ndim - 1];

    if (y->req == MXOP_REQ_NULL || cols == 0)
        return 0;
    size_t rows = x->size / cols;
    int add = y->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        SOFTMAX_FORWARD(float, expf);
    else
        SOFTMAX_FORWARD(double, exp);
    return 0;
}

static int softmax_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    /* in = [dy, x, y]; out = [dx].  The gradient needs only y and dy. */
    const mxop_tensor_t *dy = &in[0];
    const mxop_tensor_t *y = &in[2];
    mxop_tensor_t *dx = &out[0];
    size_t cols = (size_t)y->shape[y->ndim - 1];

    if (dx->req == MXOP_REQ_NULL || cols == 0)
        return 0;
    size_t rows = y->size / cols;
    int add = dx->req == MXOP_REQ_ADD;
    if (y->dtype == MXOP_F32)
        SOFTMAX_BACKWARD(float);
    else
        SOFTMAX_BACKWARD(double);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const mxop_attr_decl_t softmax_attrs[] = {
        {"axis", MXOP_ATTR_INT, 0, "-1", "the axis to normalise; only the last (-1 or ndim-1)"},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "softmax",
        .description = "softmax over the last axis (attribute axis: -1 only); f32 and f64",
        .num_inputs = 1,
        .num_outputs = 1,
        .infer_shape = softmax_infer_shape,
        .infer_type = softmax_infer_type,
        .forward = softmax_forward,
        .backward = softmax_backward,
        .attrs = softmax_attrs,
        .num_attrs = 1,
    };
    return host->register_op(ctx, &def);
}
