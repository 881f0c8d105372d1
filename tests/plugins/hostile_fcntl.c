/*
 * tests/plugins/hostile_fcntl.c - a library that changes the worker's
 * transport descriptors without closing or replacing them.
 *
 *   fcntl_transport  1 input, 1 output (f32, at least 10 elements): for
 *                    fds 3 and 4 (the supervisor and data channels) tries
 *                    F_SETFL O_NONBLOCK|O_ASYNC, F_SETFD 0 (clears
 *                    close-on-exec), F_SETOWN to the parent (the daemon:
 *                    its SIGIO), F_SETSIG SIGKILL; then shutdown() of fd 3.
 *                    out[k] = 0 where a change was made, else -errno, in
 *                    that order (fd 3's four, fd 4's four, shutdown(3)).
 *                    Returns 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_fcntl", "1.0");

static const mxop_host_t *host;

static float outcome(int rc)
{
    return rc == -1 ? -(float)errno : 0.0f;
}

static int fcntl_transport_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                   mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    float *o = out[0].data;
    int k = 0;
    for (int fd = 3; fd <= 4; fd++) {
        o[k++] = outcome(fcntl(fd, F_SETFL, O_NONBLOCK | O_ASYNC));
        o[k++] = outcome(fcntl(fd, F_SETFD, 0));
        o[k++] = outcome(fcntl(fd, F_SETOWN, (int)getppid()));
        o[k++] = outcome(fcntl(fd, F_SETSIG, SIGKILL));
    }
    o[k++] = outcome(shutdown(3, SHUT_RDWR));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "fcntl_transport",
        .description = "changes the flags, owner and signal of the worker's channels",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = fcntl_transport_forward,
    };
    return host->register_op(ctx, &def);
}
