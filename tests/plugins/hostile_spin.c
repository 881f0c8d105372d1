/*
 * tests/plugins/hostile_spin.c - a library that leaves a thread burning
 * CPU after its op returned success.
 *
 *   spin_after  1 input, 1 output (f32): copies in to out, starts a
 *               detached thread that spins forever, and returns 0.
 */
#include <pthread.h>
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_spin", "1.0");

static const mxop_host_t *host;

static void *spin(void *arg)
{
    (void)arg;
    volatile unsigned long n = 0;
    for (;;)
        n++;
    return NULL;
}

static int spin_after_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                              mxop_tensor_t *out)
{
    if (in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    pthread_t t;
    if (pthread_create(&t, NULL, spin, NULL) != 0)
        return host->set_error(ctx, MXOP_EOP_FAILED, "spin_after: no thread");
    pthread_detach(t);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "spin_after",
        .description = "leaves a thread spinning after it returns",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = spin_after_forward,
    };
    return host->register_op(ctx, &def);
}
