/*
 * tests/plugins/opkit_nan_default.c - a declaration the worker must refuse
 * at load: a float attribute whose default is not a finite number.
 */
#include "mxop/op.h"

MXOP_PLUGIN("opkit_nan_default", "1.0");

static int fwd(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    static const mxop_attr_decl_t decls[] = {
        {"eps", MXOP_ATTR_FLOAT, 0, "nan", "a tolerance"},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "nan_default",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = fwd,
        .attrs = decls,
        .num_attrs = 1,
    };
    return host->register_op(ctx, &def);
}
