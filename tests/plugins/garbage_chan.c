/*
 * tests/plugins/garbage_chan.c - a library that writes garbage on its
 * worker's data channel between calls: its op returns correctly, and a
 * thread it started then sends bytes that are no frame on descriptor 4
 * (the channel to the client).  strict refuses write(), send() and every
 * other send there but the worker's own sendmsg(fd, msg, MSG_NOSIGNAL),
 * which a library can copy (server/worker/sandbox.c), so it uses that.
 * The client must fail its next call with a message naming the garbage
 * and get a new worker, not an unnamed protocol error.
 *
 *   garbage_after  copies its 1 input to its 1 output, then about 100 ms
 *                  later writes garbage on the data channel
 */
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("garbage_chan", "1.0");

static void *scribble(void *arg)
{
    (void)arg;
    usleep(100 * 1000); /* the call's result has gone back by now */
    static char junk[] = "debug: op finished, 16 elements\n";
    struct iovec iov = {.iov_base = junk, .iov_len = sizeof(junk) - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    sendmsg(4, &msg, MSG_NOSIGNAL);
    return NULL;
}

static int forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)n_out;
    if (out[0].req != MXOP_REQ_NULL && in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    pthread_t t;
    if (pthread_create(&t, NULL, scribble, NULL) == 0)
        pthread_detach(t);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "garbage_after",
        .description = "writes garbage on the data channel after its call "
                       "(tests/plugins/garbage_chan.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = forward,
    };
    return host->register_op(ctx, &def);
}
