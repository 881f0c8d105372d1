/*
 * server/worker/devcall.c - where a call runs: on the host or on one GPU.
 *
 * A call's tensors are all in host memory (the op's forward / backward
 * run) or all in device regions of one CUDA device (forward_gpu /
 * backward_gpu run, with that device current).  A call that mixes them is
 * refused before any op code runs: an op is written for one kind of
 * pointer, and a host pointer handed to a kernel (or the reverse) would
 * crash the worker instead of answering.
 */
#include "common/util.h"
#include "server/worker/cuda.h"
#include "server/worker/worker.h"

static void where(char *buf, size_t len, int32_t dev)
{
    if (dev < 0)
        mxop__fmt(buf, len, "in host memory");
    else
        mxop__fmt(buf, len, "on CUDA device %d", dev);
}

int mxop__call_device(int n_in, const mxop_tensor_t *in, int n_out, const mxop_tensor_t *out,
                      int32_t *dev, char *msg, size_t msglen)
{
    int n = n_in + n_out;
    *dev = -1;
    if (n == 0)
        return 0;
    int32_t first = n_in > 0 ? in[0].device : out[0].device;
    for (int i = 0; i < n; i++) {
        const mxop_tensor_t *t = i < n_in ? &in[i] : &out[i - n_in];
        if (t->device == first)
            continue;
        char a[48], b[48];
        where(a, sizeof(a), t->device);
        where(b, sizeof(b), first);
        mxop__fmt(msg, msglen,
                  "device mismatch: %s %d is %s but %s 0 is %s; all tensors of a call must be on "
                  "the same device",
                  i < n_in ? "input" : "output", i < n_in ? i : i - n_in, a,
                  n_in > 0 ? "input" : "output", b);
        return MXOP_EINVAL;
    }
    *dev = first;
    return 0;
}

const char *mxop__pick_callback(const mxop__worker_op_t *op, int backward, int32_t dev,
                                mxop__op_fn_t *fn, mxop__state_fn_t *sfn)
{
    const mxop_op_def_t *d = &op->def;
    int gpu = dev >= 0;
    *fn = NULL;
    *sfn = NULL;
    if (mxop__op_stateful(op)) {
        if (backward) {
            *sfn = gpu ? d->state_backward_gpu : d->state_backward;
            return gpu ? "state_backward_gpu" : "state_backward";
        }
        *sfn = gpu ? d->state_forward_gpu : d->state_forward;
        return gpu ? "state_forward_gpu" : "state_forward";
    }
    if (backward) {
        *fn = gpu ? d->backward_gpu : d->backward;
        return gpu ? "backward_gpu" : "backward";
    }
    *fn = gpu ? d->forward_gpu : d->forward;
    return gpu ? "forward_gpu" : "forward";
}

int mxop__no_callback(const mxop__worker_op_t *op, const char *cb, int32_t dev, char *msg,
                      size_t msglen)
{
    if (dev >= 0)
        mxop__fmt(msg, msglen,
                  "op '%s' has no %s: it cannot run on device tensors (CUDA device %d); pass "
                  "host tensors",
                  op->name, cb, dev);
    else
        mxop__fmt(msg, msglen,
                  "op '%s' has no %s: it runs on device tensors only (this call's are in host "
                  "memory)",
                  op->name, cb);
    return MXOP_ENOT_SUPPORTED;
}
