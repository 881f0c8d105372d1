/*
 * tests/plugins/hostile_forkinit.c - a library whose init forks a child
 * that double-forks, calls setsid() and stays, holding the worker's
 * channels: a second reader of every call, were it allowed to live.
 *
 *   forkinit_identity  1 input, 1 output: copies in to out (never reached
 *                      when the load is refused).
 *
 * Under strict the fork is refused and init goes on without a child.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_forkinit", "1.0");

static const mxop_host_t *host;

static int identity_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    if (in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    return 0;
}

static void start_escapee(void)
{
    pid_t pid = fork();
    if (pid != 0)
        return; /* the parent (or a refused fork) goes on with init */
    if (fork() != 0)
        _exit(0); /* the intermediate dies: its child is orphaned */
    setsid();
    for (;;)
        pause();
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    start_escapee();
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "forkinit_identity",
        .description = "copies its input; its init leaves a process behind",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = identity_forward,
    };
    return host->register_op(ctx, &def);
}
