/*
 * tests/plugins/opkit_inplace.c - an op that writes its input in place.
 *
 *   double_inplace   1 input x (f32 or f64, mutated), 1 output y:
 *                    y = x (the value before the call), then x = 2 * x.
 */
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("opkit_inplace", "1.0");

static const mxop_host_t *host;

static int fwd(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    size_t n = in[0].size;
    if (in[0].dtype != MXOP_F32 && in[0].dtype != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "x is %s; f32 or f64 only",
                               mxop_dtype_name(in[0].dtype));
    memcpy(out[0].data, in[0].data, n * mxop_dtype_size(in[0].dtype));
    return host->axpy(ctx, in[0].dtype, (int64_t)n, 1.0, out[0].data, in[0].data);
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "double_inplace",
        .description = "y = x; x *= 2 (in place)",
        .num_inputs = 1,
        .num_outputs = 1,
        .mutated_inputs = 1,
        .forward = fwd,
    };
    return host->register_op(ctx, &def);
}
