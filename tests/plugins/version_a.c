/*
 * tests/plugins/version_a.c - one library in two versions, for hot reload
 * (tests/test_reload.c).  version_b.c is this file built with
 * VERSION_VALUE 2.0; the test copies either over "version.so" in the plugin
 * directory.
 *
 *   version   1 input x: f64, any shape; 1 output y: f64, x's shape.
 *             Writes VERSION_VALUE (1.0 here) into every element of y,
 *             one element at a time, sleeping x[0] milliseconds (0 to
 *             1000) half-way, so that a call can be in flight while the
 *             file is replaced and an answer mixing two versions would
 *             show.
 */
#include <time.h>

#include "mxop/op.h"

#ifndef VERSION_VALUE
#define VERSION_VALUE 1.0
MXOP_PLUGIN("version", "1.0");
#endif

static int version_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    const double *x = in[0].data;
    double *y = out[0].data;
    double ms = in[0].size > 0 ? x[0] : 0;
    if (!(ms >= 0))
        ms = 0;
    if (ms > 1000)
        ms = 1000;
    for (size_t i = 0; i < out[0].size; i++) {
        if (i == out[0].size / 2 && ms > 0) {
            struct timespec ts = {(time_t)(ms / 1000), (long)((long long)ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        y[i] = VERSION_VALUE;
    }
    return 0;
}

static int version_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    out[0] = MXOP_F64;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "version",
        .description = "writes the library's version number into every output element",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = version_forward,
        .infer_type = version_infer_type,
    };
    return host->register_op(ctx, &def);
}
