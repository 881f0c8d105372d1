/*
 * tests/plugins/opkit_attrs.c - declared attributes seen from inside an op.
 *
 *   attrs_echo   1 input (ignored), 1 output f64 [16]: what the typed
 *                readers return for each declared attribute, so that a
 *                test can compare them with the call's values or the
 *                declared defaults:
 *                  out[0] = k (int, required)
 *                  out[1] = scale (float, default 2.5)
 *                  out[2] = flag (bool, default true)
 *                  out[3] = strlen(mode) (string, default "sum"),
 *                  out[4] = mode[0]
 *                  out[5] = number of sizes (int list, default "(1, 2, 3)"),
 *                  out[6..8] = sizes[0..2]
 *                  out[9] = number of weights (float list, no default),
 *                  out[10..11] = weights[0..1]
 *                  out[12] = attr_count (the attributes the call gave)
 *                  out[13] = calls to check_attrs so far in this worker
 *                  out[14..15] = 0
 *   attrs_none   the same op without declarations: any attribute passes.
 */
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("opkit_attrs", "1.0");

static const mxop_host_t *host;
static int check_calls;

static int echo_check(mxop_ctx_t *ctx)
{
    check_calls++;
    return 0;
}

static int echo_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                      mxop_shape_t *out)
{
    out[0].ndim = 1;
    out[0].dims[0] = 16;
    return 0;
}

static int echo_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    out[0] = MXOP_F64;
    return 0;
}

static int echo_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    double *o = out[0].data;
    int64_t k = 0, sizes[8];
    double scale = 0, weights[2];
    int flag = 0, n_sizes = 0, n_weights = 0;
    memset(o, 0, 16 * sizeof(double));
    int rc = host->attr_int(ctx, "k", -7, &k);
    if (rc == 0)
        rc = host->attr_float(ctx, "scale", -7.0, &scale);
    if (rc == 0)
        rc = host->attr_bool(ctx, "flag", 0, &flag);
    if (rc == 0)
        rc = host->attr_int_list(ctx, "sizes", sizes, 8, &n_sizes);
    if (rc == 0)
        rc = host->attr_float_list(ctx, "weights", weights, 2, &n_weights);
    if (rc != 0)
        return rc;
    const char *mode = host->attr_string(ctx, "mode", "none");
    o[0] = (double)k;
    o[1] = scale;
    o[2] = flag;
    o[3] = (double)strlen(mode);
    o[4] = mode[0];
    o[5] = n_sizes;
    for (int i = 0; i < n_sizes && i < 3; i++)
        o[6 + i] = (double)sizes[i];
    o[9] = n_weights;
    for (int i = 0; i < n_weights; i++)
        o[10 + i] = weights[i];
    o[12] = host->attr_count(ctx);
    o[13] = check_calls;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    if (!MXOP_HOST_HAS(h, attr_float_list))
        return h->set_error(ctx, MXOP_EABI, "opkit_attrs: the worker's host table is too old");
    static const mxop_attr_decl_t decls[] = {
        {"k", MXOP_ATTR_INT, 1, NULL, "how many"},
        {"scale", MXOP_ATTR_FLOAT, 0, "2.5", "a factor"},
        {"flag", MXOP_ATTR_BOOL, 0, "true", "a switch"},
        {"mode", MXOP_ATTR_STRING, 0, "sum", "sum or mean"},
        {"sizes", MXOP_ATTR_INT_LIST, 0, "(1, 2, 3)", "some sizes"},
        {"weights", MXOP_ATTR_FLOAT_LIST, 0, NULL, NULL},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "attrs_echo",
        .description = "echoes its declared attributes",
        .num_inputs = 1,
        .num_outputs = 1,
        .check_attrs = echo_check,
        .infer_shape = echo_shape,
        .infer_type = echo_type,
        .forward = echo_forward,
        .attrs = decls,
        .num_attrs = (int32_t)(sizeof(decls) / sizeof(decls[0])),
    };
    int rc = host->register_op(ctx, &def);
    if (rc != 0)
        return rc;
    def.name = "attrs_none";
    def.attrs = NULL;
    def.num_attrs = 0;
    return host->register_op(ctx, &def);
}
