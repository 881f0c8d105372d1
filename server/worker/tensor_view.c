/*
 * server/worker/tensor_view.c - a call's tensors at the stride of the op's library.
 *
 * Tensors reach an op as arrays, and a library indexes an array by the
 * sizeof(mxop_tensor_t) it was compiled with (op.h, compatibility rule 4).
 * While that is the worker's own size, which holds for every library built
 * so far, the worker's arrays go to the op as they are and this file copies
 * nothing.  A library with another stride (one built after mxop_tensor_t
 * grew, running here, or one built before it grew, running in a later
 * worker) gets a copy of each tensor at its stride: the members both know,
 * and zero in the members only the library knows.
 */
#include <string.h>

#include "server/worker/worker.h"

static _Alignas(16) unsigned char view_in[MXOP__W_MAX_IN * MXOP__TENSOR_SIZE_MAX];
static _Alignas(16) unsigned char view_out[MXOP__W_MAX_OUT * MXOP__TENSOR_SIZE_MAX];

static void lay_out(unsigned char *view, uint32_t stride, int n, const mxop_tensor_t *t)
{
    size_t known = stride < sizeof(mxop_tensor_t) ? stride : sizeof(mxop_tensor_t);
    for (int i = 0; i < n; i++) {
        unsigned char *slot = view + (size_t)i * stride;
        memcpy(slot, &t[i], known);
        memset(slot + known, 0, stride - known);
    }
}

void mxop__tensor_view(const mxop__worker_op_t *op, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out, const mxop_tensor_t **lib_in, mxop_tensor_t **lib_out)
{
    uint32_t stride = op->tensor_stride;
    mxop__ctx.dyn_view = NULL;
    mxop__ctx.dyn_stride = 0;
    if (stride == sizeof(mxop_tensor_t)) {
        *lib_in = in;
        *lib_out = out;
        return;
    }
    /* The loader took only strides in [MXOP__TENSOR_SIZE_V1, MXOP__TENSOR_SIZE_MAX]. */
    lay_out(view_in, stride, n_in, in);
    lay_out(view_out, stride, n_out, out);
    /* The library reads them at its stride; the pointer type is only the ABI's. */
    *lib_in = (const mxop_tensor_t *)(void *)view_in;
    *lib_out = (mxop_tensor_t *)(void *)view_out;
    mxop__ctx.dyn_view = view_out;
    mxop__ctx.dyn_stride = stride;
}

void mxop__tensor_view_sync(int i, const mxop_tensor_t *t)
{
    uint32_t stride = mxop__ctx.dyn_stride;
    if (mxop__ctx.dyn_view == NULL)
        return;
    size_t known = stride < sizeof(mxop_tensor_t) ? stride : sizeof(mxop_tensor_t);
    memcpy((unsigned char *)mxop__ctx.dyn_view + (size_t)i * stride, t, known);
}
