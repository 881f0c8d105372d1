/*
 * tests/plugins/hostile_sig.c - a library that takes the fault handler over
 * and then writes into its read-only input: its own SIGSEGV handler jumps
 * over the faulting store, so that, were it installed, the op would return
 * success with the engine's data intact only by luck.
 *
 *   sigswap_write  1 input, 1 output (f32, at least 2 elements).  Installs
 *                  its handler (out[0] = 0, or -errno of the refused
 *                  sigaction), stores into in[0] (out[1] = 1 when the
 *                  store faulted and the handler caught it) and returns 0.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_sig", "1.0");

static const mxop_host_t *host;
static sigjmp_buf back;

static void on_segv(int sig)
{
    (void)sig;
    siglongjmp(back, 1);
}

static int sigswap_write_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                 mxop_tensor_t *out)
{
    float *o = out[0].data;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_segv;
    sa.sa_flags = SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    int rc = sigaction(SIGSEGV, &sa, NULL);
    int rc2 = sigaction(SIGBUS, &sa, NULL);
    o[0] = rc == 0 && rc2 == 0 ? 0.0f : -(float)errno;
    o[1] = 0;
    if (sigsetjmp(back, 1) == 0) {
        volatile unsigned char *p = in[0].data;
        p[0] = (unsigned char)(p[0] ^ 0x5a);
    } else {
        o[1] = 1;
    }
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "sigswap_write",
        .description = "installs its own SIGSEGV handler, then writes into its input",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = sigswap_write_forward,
    };
    return host->register_op(ctx, &def);
}
