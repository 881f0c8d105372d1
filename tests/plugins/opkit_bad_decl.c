/*
 * tests/plugins/opkit_bad_decl.c - a declaration the worker must refuse at
 * load: the default of an int attribute that is not an integer.
 */
#include "mxop/op.h"

MXOP_PLUGIN("opkit_bad_decl", "1.0");

static int fwd(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    static const mxop_attr_decl_t decls[] = {
        {"axis", MXOP_ATTR_INT, 0, "last", "the axis"},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "bad_decl",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = fwd,
        .attrs = decls,
        .num_attrs = 1,
    };
    return host->register_op(ctx, &def);
}
