/*
 * tests/plugins/opkit_host.c - the host's tensor routines, reachable from a
 * test for every dtype.
 *
 *   host_apply   inputs a, b (same dtype); attribute fn (string) picks:
 *                  add, mul      out = a + b, a * b
 *                  axpy          out = b + alpha * a      (attribute alpha)
 *                  fill          out = value              (attribute value)
 *                  copy          out = a
 *                  sum           out = f64 [1]: the sum of a
 *                  convert       out = a as dtype `to`    (attribute to, a dtype number)
 *                  gemm          out = alpha * a b        (a: m x k, b: k x n)
 */
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("opkit_host", "1.0");

static const mxop_host_t *host;

static int fn_is(mxop_ctx_t *ctx, const char *name)
{
    return strcmp(host->attr_string(ctx, "fn", "add"), name) == 0;
}

static int apply_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    int64_t to = 0;
    int rc = host->attr_int(ctx, "to", 0, &to);
    if (rc != 0)
        return rc;
    out[0] = fn_is(ctx, "sum") ? MXOP_F64 : fn_is(ctx, "convert") ? (int32_t)to : in[0];
    return 0;
}

static int apply_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                       mxop_shape_t *out)
{
    out[0] = in[0];
    if (fn_is(ctx, "sum")) {
        out[0].ndim = 1;
        out[0].dims[0] = 1;
    } else if (fn_is(ctx, "gemm")) {
        if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dims[1] != in[1].dims[0])
            return host->set_error(ctx, MXOP_ESHAPE, "gemm needs m x k and k x n");
        out[0].dims[1] = in[1].dims[1];
    }
    return 0;
}

static int apply(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    const mxop_tensor_t *a = &in[0], *b = &in[1];
    int32_t dt = a->dtype;
    int64_t n = (int64_t)a->size;
    double alpha = 1, value = 0;
    int rc = host->attr_float(ctx, "alpha", 1.0, &alpha);
    if (rc == 0)
        rc = host->attr_float(ctx, "value", 0.0, &value);
    if (rc != 0)
        return rc;
    if (fn_is(ctx, "add"))
        return host->add(ctx, dt, n, a->data, b->data, out[0].data);
    if (fn_is(ctx, "mul"))
        return host->mul(ctx, dt, n, a->data, b->data, out[0].data);
    if (fn_is(ctx, "axpy")) {
        rc = host->copy(ctx, dt, n, b->data, out[0].data);
        return rc != 0 ? rc : host->axpy(ctx, dt, n, alpha, a->data, out[0].data);
    }
    if (fn_is(ctx, "fill"))
        return host->fill(ctx, dt, n, value, out[0].data);
    if (fn_is(ctx, "copy"))
        return host->copy(ctx, dt, n, a->data, out[0].data);
    if (fn_is(ctx, "sum"))
        return host->sum(ctx, dt, n, a->data, (double *)out[0].data);
    if (fn_is(ctx, "convert"))
        return host->convert(ctx, n, dt, a->data, out[0].dtype, out[0].data);
    if (fn_is(ctx, "gemm")) {
        int64_t m = a->shape[0], k = a->shape[1], nn = b->shape[1];
        return host->gemm(ctx, dt, 0, 0, m, nn, k, alpha, a->data, k, b->data, nn, 0.0, out[0].data,
                          nn);
    }
    return host->set_error(ctx, MXOP_EATTR, "unknown fn '%s'", host->attr_string(ctx, "fn", ""));
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    if (!MXOP_HOST_HAS(h, convert))
        return h->set_error(ctx, MXOP_EABI, "opkit_host: the worker has no convert");
    static const mxop_attr_decl_t decls[] = {
        {"fn", MXOP_ATTR_STRING, 1, NULL, "add, mul, axpy, fill, copy, sum, convert or gemm"},
        {"alpha", MXOP_ATTR_FLOAT, 0, "1", "axpy and gemm's scale"},
        {"value", MXOP_ATTR_FLOAT, 0, "0", "fill's value"},
        {"to", MXOP_ATTR_INT, 0, "0", "convert's target dtype"},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "host_apply",
        .num_inputs = 2,
        .num_outputs = 1,
        .infer_shape = apply_shape,
        .infer_type = apply_type,
        .forward = apply,
        .attrs = decls,
        .num_attrs = 4,
    };
    return host->register_op(ctx, &def);
}
