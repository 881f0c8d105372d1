/*
 * tests/plugins/abi_prev.c - a library of the previous plugin ABI (version 2).
 *
 * Built against tests/plugins/abi_prev/op_prev.h, a frozen copy of op.h
 * as it was at version 2, never against today's header: its
 * mxop_plugin_info, mxop_op_def_t and mxop_host_t are the older, smaller
 * structs.  The current worker must load it and run it correctly
 * (tests/test_abi.c): the info read by its size, the definition's declared
 * attributes at their old offsets, the host members it calls at theirs,
 * and tensors at its stride (it reads in[1], so a wrong stride shows).
 */
#include "abi_prev/op_prev.h"

MXOP_PLUGIN("abi_prev", "2.0");

static const mxop_host_t *host;

/* out = alpha * x + y, through the host's copy and axpy (ABI 1 members). */
static int axpy_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    double alpha;
    int rc = host->attr_float(ctx, "alpha", 0.0, &alpha);
    if (rc != 0)
        return rc;
    if (in[0].size != in[1].size || out[0].size != in[0].size)
        return host->set_error(ctx, MXOP_ESHAPE, "abi_prev: x, y and out differ in size");
    rc = host->copy(ctx, in[1].dtype, (int64_t)in[1].size, in[1].data, out[0].data);
    if (rc != 0)
        return rc;
    return host->axpy(ctx, in[0].dtype, (int64_t)in[0].size, alpha, in[0].data, out[0].data);
}

/* The tag as a string through attr_string (a member ABI 2 appended): "prev:<tag>". */
static int check_attrs(mxop_ctx_t *ctx)
{
    const char *tag = host->attr_string(ctx, "tag", NULL);
    if (tag != NULL && tag[0] == '\0')
        return host->set_error(ctx, MXOP_EATTR, "abi_prev: tag is empty");
    return 0;
}

static const mxop_attr_decl_t axpy_attrs[] = {
    {.name = "alpha", .type = MXOP_ATTR_FLOAT, .default_value = "2", .doc = "the scale of x"},
    {.name = "tag", .type = MXOP_ATTR_STRING, .default_value = "t", .doc = "not empty"},
};

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    /* A library of ABI 2 needs the host table of ABI 2 at least. */
    if (h->abi_version < 2 || h->struct_size < sizeof(mxop_host_t))
        return h->set_error(ctx, MXOP_EABI, "abi_prev: the worker's host table is older than 2");
    mxop_op_def_t def = {
        .struct_size = sizeof(def),
        .name = "abi_prev.axpy",
        .description = "out = alpha * x + y, built against plugin ABI 2",
        .num_inputs = 2,
        .num_outputs = 1,
        .check_attrs = check_attrs,
        .forward = axpy_forward,
        .attrs = axpy_attrs,
        .num_attrs = 2,
    };
    return h->register_op(ctx, &def);
}
