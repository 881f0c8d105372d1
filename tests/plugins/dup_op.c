/*
 * tests/plugins/dup_op.c - registers an op named "relu", so that loading
 * it after plugins/relu.so (or before) must fail with MXOP_EDUPLICATE.
 */
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("dup_op", "1.0");

static int copy_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    if (out[0].req != MXOP_REQ_NULL && in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "relu",
        .description = "not a relu: a copy registered under a name that is taken",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = copy_forward,
    };
    return host->register_op(ctx, &def);
}
