/*
 * tests/plugins/opkit_strided.c - strided and contiguous-only ops.
 *
 *   strided_scale   MXOP_OP_STRIDED; 1 input x (f64, any strides), 1 output
 *                   y (f64, any strides): y = 2 * x, every element reached
 *                   through the strides the op is given.
 *   dense_scale     the same without MXOP_OP_STRIDED: it is handed
 *                   contiguous tensors only, and checks that they are.
 *   strides_seen    MXOP_OP_STRIDED; y f64 [2 * ndim(x)]: x's shape, then
 *                   the strides (in elements) the op received for x.
 */
#include "mxop/op.h"

MXOP_PLUGIN("opkit_strided", "1.0");

static const mxop_host_t *host;

static int only_f64(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    if (in[0] != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "x is %s; f64 only", mxop_dtype_name(in[0]));
    out[0] = MXOP_F64;
    return 0;
}

/* The offset, in elements, of the k-th element in row-major order. */
static int64_t offset_of(const mxop_tensor_t *t, size_t k)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t dim = t->shape[d];
        off += (int64_t)(k % (size_t)dim) * t->strides[d];
        k /= (size_t)dim;
    }
    return off;
}

static int scale(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    const double *x = in[0].data;
    double *y = out[0].data;
    for (size_t k = 0; k < in[0].size; k++)
        y[offset_of(&out[0], k)] = 2.0 * x[offset_of(&in[0], k)];
    return 0;
}

static int is_dense(const mxop_tensor_t *t)
{
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] > 1 && t->strides[d] != want)
            return 0;
        want *= t->shape[d];
    }
    return 1;
}

static int dense_scale(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out)
{
    if (!is_dense(&in[0]) || !is_dense(&out[0]))
        return host->set_error(ctx, MXOP_EINVAL, "dense_scale was given a strided tensor");
    return scale(ctx, n_in, in, n_out, out);
}

static int seen_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                      mxop_shape_t *out)
{
    out[0].ndim = 1;
    out[0].dims[0] = 2 * in[0].ndim;
    return 0;
}

static int seen(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    double *y = out[0].data;
    for (int d = 0; d < in[0].ndim; d++) {
        y[d] = (double)in[0].shape[d];
        y[in[0].ndim + d] = (double)in[0].strides[d];
    }
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "strided_scale",
        .num_inputs = 1,
        .num_outputs = 1,
        .flags = MXOP_OP_STRIDED,
        .infer_type = only_f64,
        .forward = scale,
    };
    int rc = host->register_op(ctx, &def);
    def.name = "dense_scale";
    def.flags = 0;
    def.forward = dense_scale;
    if (rc == 0)
        rc = host->register_op(ctx, &def);
    def.name = "strides_seen";
    def.flags = MXOP_OP_STRIDED;
    def.infer_shape = seen_shape;
    def.forward = seen;
    if (rc == 0)
        rc = host->register_op(ctx, &def);
    return rc;
}
