/*
 * tests/plugins/flaw_base.h - the fixtures of `mxop verify`'s tests: one op,
 * y = 2 x (f32, f64) with backward dx = 2 dy honouring req, into which each
 * tests/plugins/flaw_*.c puts exactly one flaw by defining one of:
 *
 *   FLAW_GRAD         backward gives 3 dy (a wrong gradient)
 *   FLAW_UNWRITTEN    forward leaves element 0 unwritten (when there are two or more)
 *   FLAW_INFER        inference promises one more row than forward writes
 *   FLAW_NONDET       outputs change from call to call (a counter in the worker)
 *   FLAW_REQADD       backward overwrites where req asks to add
 *   FLAW_INPUT_WRITE  forward writes into its input
 *   FLAW_OVERRUN      forward writes 4 KiB past the end of its output
 *
 * and FLAW_NAME, the op's and library's name.  Everything else is correct,
 * so that `mxop verify` must fail exactly the check named for the flaw.
 */
#ifndef FLAW_BASE_H
#define FLAW_BASE_H

#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN(FLAW_NAME, "1.0");

static const mxop_host_t *host;

static int flaw_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    (void)n_in;
    (void)n_out;
    if (in[0] != MXOP_F32 && in[0] != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "x is %s; f32 and f64 are supported",
                               mxop_dtype_name(in[0]));
    out[0] = in[0];
    return 0;
}

static int flaw_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                            mxop_shape_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    out[0] = in[0];
#ifdef FLAW_INFER
    if (out[0].ndim >= 1)
        out[0].dims[0] += 1;
#endif
    return 0;
}

#ifdef FLAW_NONDET
static unsigned long calls; /* the worker's: grows with every forward */
#endif

static double get(const mxop_tensor_t *t, size_t i)
{
    return t->dtype == MXOP_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static void set(mxop_tensor_t *t, size_t i, double v)
{
    if (t->dtype == MXOP_F64)
        ((double *)t->data)[i] = v;
    else
        ((float *)t->data)[i] = (float)v;
}

static int flaw_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    const mxop_tensor_t *x = &in[0];
    mxop_tensor_t *y = &out[0];
    double extra = 0;
#ifdef FLAW_NONDET
    extra = 1e-3 * (double)calls++;
#endif
    for (size_t i = 0; i < x->size; i++) {
#ifdef FLAW_UNWRITTEN
        if (i == 0 && x->size >= 2)
            continue;
#endif
        set(y, i, 2 * get(x, i) + extra);
    }
#ifdef FLAW_INPUT_WRITE
    if (x->size > 0)
        set((mxop_tensor_t *)x, 0, 42.0);
#endif
#ifdef FLAW_OVERRUN
    memset((char *)y->data + y->size * (y->dtype == MXOP_F64 ? 8 : 4), 0x5A, 4096);
#endif
    return 0;
}

static int flaw_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    const mxop_tensor_t *dy = &in[0];
    mxop_tensor_t *dx = &out[0];
    double factor = 2;
#ifdef FLAW_GRAD
    factor = 3;
#endif
    if (dx->req == MXOP_REQ_NULL)
        return 0;
    int add = dx->req == MXOP_REQ_ADD;
#ifdef FLAW_REQADD
    add = 0;
#endif
    for (size_t i = 0; i < dx->size; i++)
        set(dx, i, factor * get(dy, i) + (add ? get(dx, i) : 0));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = FLAW_NAME,
        .description = "y = 2 x with one flaw, for mxop verify's tests",
        .num_inputs = 1,
        .num_outputs = 1,
        .infer_shape = flaw_infer_shape,
        .infer_type = flaw_infer_type,
        .forward = flaw_forward,
        .backward = flaw_backward,
    };
    return host->register_op(ctx, &def);
}

#endif
