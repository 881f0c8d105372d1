/*
 * tests/plugins/version_c.c - a rebuild of tests/plugins/version_a.c whose
 * op has another name ("version_renamed"): reloading it under a session
 * that uses "version" must fail that session, never run another op for
 * its calls (tests/test_reload.c).
 */
#include "mxop/op.h"

MXOP_PLUGIN("version", "3.0");

static int renamed_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    double *y = out[0].data;
    for (size_t i = 0; i < out[0].size; i++)
        y[i] = 3.0;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "version_renamed",
        .description = "writes 3.0 into every output element",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = renamed_forward,
    };
    return host->register_op(ctx, &def);
}
