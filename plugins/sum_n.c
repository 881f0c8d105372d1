/*
 * plugins/sum_n.c - a variadic op: "sum_n" adds any number (>= 1) of
 * tensors of one shape and dtype.
 *
 *     out = in_0 + in_1 + ... + in_{n-1}
 *     backward: dx_i = dy for every i    in = [dy, x_0 .. x_{n-1}, out],
 *                                        out = [dx_0 .. dx_{n-1}]
 *
 * num_inputs = -1 makes the op variadic; the worker then checks only that
 * at least min_inputs are given.  Everything is done with host->copy,
 * host->add and host->axpy.
 */
#include <stdio.h>

#include "mxop/op.h"

MXOP_PLUGIN("sum_n", "1.0");

static const mxop_host_t *host;

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[MXOP_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32",
                                                        "i64", "u8",  "i8",  "bool"};
    return dtype >= 0 && dtype < MXOP_DTYPE_COUNT ? names[dtype] : "unknown";
}

/* Writes "[2,3]" into buf; 192 bytes hold any shape of MXOP_MAX_DIMS dims. */
static const char *shape_str(char *buf, size_t len, const mxop_shape_t *s)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int32_t i = 0; i < s->ndim && used < len; i++)
        used +=
            (size_t)snprintf(buf + used, len - used, i ? ",%lld" : "%lld", (long long)s->dims[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

static int same_shape(const mxop_shape_t *a, const mxop_shape_t *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

static int sum_n_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                             mxop_shape_t *out)
{
    char s0[192], si[192];
    for (int i = 1; i < n_in; i++)
        if (!same_shape(&in[i], &in[0]))
            return host->set_error(ctx, MXOP_ESHAPE, "input %d has shape %s but input 0 has %s", i,
                                   shape_str(si, sizeof(si), &in[i]),
                                   shape_str(s0, sizeof(s0), &in[0]));
    out[0] = in[0];
    return 0;
}

static int sum_n_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    if (in[0] != MXOP_F32 && in[0] != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "input 0 is %s; only f32 and f64 are supported",
                               dtype_name(in[0]));
    for (int i = 1; i < n_in; i++)
        if (in[i] != in[0])
            return host->set_error(ctx, MXOP_EDTYPE, "input %d is %s but input 0 is %s", i,
                                   dtype_name(in[i]), dtype_name(in[0]));
    out[0] = in[0];
    return 0;
}

static int sum_n_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    mxop_tensor_t *y = &out[0];
    int32_t dt = in[0].dtype;
    int64_t n = (int64_t)y->size;
    int first = 0, rc = 0;

    if (y->req == MXOP_REQ_NULL)
        return 0;
    /* WRITE starts from a copy of input 0; ADD adds every input to what is there. */
    if (y->req == MXOP_REQ_WRITE) {
        rc = host->copy(ctx, dt, n, in[0].data, y->data);
        first = 1;
    }
    for (int i = first; rc == 0 && i < n_in; i++)
        rc = host->add(ctx, dt, n, y->data, in[i].data, y->data);
    return rc;
}

static int sum_n_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    /* in = [dy, x_0 .. x_{n-1}, y]; out = [dx_0 .. dx_{n-1}], n = n_out. */
    const mxop_tensor_t *dy = &in[0];
    int64_t n = (int64_t)dy->size;
    int rc = 0;

    for (int i = 0; rc == 0 && i < n_out; i++) {
        if (out[i].req == MXOP_REQ_WRITE)
            rc = host->copy(ctx, dy->dtype, n, dy->data, out[i].data);
        else if (out[i].req == MXOP_REQ_ADD)
            rc = host->axpy(ctx, dy->dtype, n, 1.0, dy->data, out[i].data);
    }
    return rc;
}

/* The op declares no attributes, and so takes any unless it refuses them
 * here: a keyword given by mistake (sum_n(x, y, inplace=True)) is an error
 * naming it, not silently ignored. */
static int no_attrs(mxop_ctx_t *ctx)
{
    if (host->attr_count(ctx) > 0)
        return host->set_error(ctx, MXOP_EATTR, "op 'sum_n' takes no attributes; got '%s'",
                               host->attr_key(ctx, 0));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "sum_n",
        .check_attrs = no_attrs,
        .description = "out = sum of any number (>= 1) of same-shaped inputs; f32 and f64",
        .num_inputs = -1,
        .min_inputs = 1,
        .num_outputs = 1,
        .infer_shape = sum_n_infer_shape,
        .infer_type = sum_n_infer_type,
        .forward = sum_n_forward,
        .backward = sum_n_backward,
    };
    return host->register_op(ctx, &def);
}
