/*
 * tests/plugins/flood_sup.c - an op that leaves a process writing into
 * its worker's supervisor channel after the worker died.
 *
 *   flood_sup_crash  forks a child that leaves the worker's session
 *                    (setsid) and writes well-formed SupReply frames, for a
 *                    request never sent, into fd 3 (the supervisor
 *                    channel, inherited across fork) as fast as it can;
 *                    200 ms later the op aborts its worker.  The daemon
 *                    reads what a dead worker's channel holds before it
 *                    reports the death: that read must be bounded, or the
 *                    child keeps the daemon's loop reading for as long as
 *                    it lives.  Needs a sandbox that lets ops fork (none or
 *                    basic).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("flood_sup", "1.0");

#define FRAMES 256
#define FRAME_LEN 16

/* A frame header (magic "MXOP", version 1, kind 6 = SupReply, length 4), then SupReply{id}. */
static const unsigned char frame[FRAME_LEN] = {0x4D, 0x58, 0x4F, 0x50, 1,    0,    6,    0,
                                               4,    0,    0,    0,    0x08, 0xC0, 0x84, 0x3D};

static void flood(void)
{
    static unsigned char buf[FRAMES * FRAME_LEN];
    for (int i = 0; i < FRAMES; i++)
        memcpy(buf + i * FRAME_LEN, frame, FRAME_LEN);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        if (write(3, buf, sizeof(buf)) < 0)
            _exit(0); /* the daemon closed the channel */
    }
}

static int forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        flood();
    }
    usleep(200 * 1000);
    abort();
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "flood_sup_crash",
        .description = "floods the supervisor channel from a child, then aborts "
                       "(tests/plugins/flood_sup.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = forward,
    };
    return host->register_op(ctx, &def);
}
