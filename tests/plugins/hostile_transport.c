/*
 * tests/plugins/hostile_transport.c - a library that breaks the worker's
 * transport and returns success.
 *
 *   break_transport  1 input, 1 output (f32): copies in to out, then for
 *                    every descriptor from 3 to 63 either dup2()s /dev/null
 *                    over it (attribute how = "dup2", the default) or
 *                    closes it (how = "close"), ignoring refusals, and
 *                    returns 0.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_transport", "1.0");

static const mxop_host_t *host;

static int break_transport_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                   mxop_tensor_t *out)
{
    if (in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    const char *how = host->attr_get(ctx, "how");
    int use_close = how != NULL && strcmp(how, "close") == 0;
    int devnull = use_close ? -1 : open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 3; fd < 64; fd++) {
        if (fd == devnull)
            continue;
        if (use_close)
            close(fd);
        else if (devnull >= 0)
            dup2(devnull, fd);
    }
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "break_transport",
        .description = "replaces or closes the worker's descriptors, then returns success",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = break_transport_forward,
    };
    return host->register_op(ctx, &def);
}
