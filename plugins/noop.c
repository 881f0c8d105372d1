/*
 * plugins/noop.c - an op that does nothing: "noop", no inputs, no outputs.
 *
 * It exists to measure what a call costs by itself.  With no tensors there
 * is nothing to check, map or compute, so a forward of "noop" through mxop
 * is the round trip of the data path and the worker's dispatch alone; the
 * benchmark (bench/bench_mxop.c) compares it with a bare socket ping-pong.
 *
 * Build: cc -shared -fPIC -O2 $(pkg-config --cflags mxop-plugin) noop.c -o noop.so
 */
#include "mxop/op.h"

MXOP_PLUGIN("noop", "1.0");

static int noop_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "noop",
        .description = "does nothing; no inputs, no outputs (for measuring the call itself)",
        .num_inputs = 0,
        .num_outputs = 0,
        .forward = noop_forward,
    };
    return host->register_op(ctx, &def);
}
