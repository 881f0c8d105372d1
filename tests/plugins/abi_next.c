/*
 * tests/plugins/abi_next.c - a library from the next plugin ABI, as its
 * author would build it to run in today's worker too.
 *
 * It stands for a library built against a header one version newer than
 * the worker's, whose mxop_tensor_t has grown by a member (`next_tag`
 * here), and which declares with abi_required that it runs in today's ABI
 * (what MXOP_PLUGIN_COMPAT writes).  The worker must load it (op.h,
 * compatibility rule 5) and hand it tensors at its larger stride with the
 * member it does not know zeroed (rule 4); alloc_output must change the
 * library's copy of an output.  tests/test_abi.c checks the results.
 */
#include <stddef.h>

#include "mxop/op.h"

/* The next ABI's tensor: today's members, then one more. */
typedef struct next_tensor {
    mxop_tensor_t now;
    int64_t next_tag; /* a member the worker does not fill: it must read 0 */
} next_tensor_t;

MXOP_EXPORT extern const mxop_plugin_info_t mxop_plugin_info;
const mxop_plugin_info_t mxop_plugin_info = {
    .struct_size = sizeof(mxop_plugin_info_t),
    .abi_version = MXOP_ABI_VERSION + 1,
    .name = "abi_next",
    .version = "1.0",
    .abi_required = MXOP_ABI_VERSION,
    .tensor_size = sizeof(next_tensor_t),
};

static const mxop_host_t *host;

/* Whether the worker fills next_tag: MXOP_TENSOR_HAS as the next header would write it. */
static int worker_has_next_tag(void)
{
    return MXOP_HOST_HAS(host, alloc_output) &&
           host->struct_size >= offsetof(mxop_host_t, tensor_size) + sizeof(uint32_t) &&
           host->tensor_size >= offsetof(next_tensor_t, next_tag) + sizeof(int64_t);
}

static int check_tags(mxop_ctx_t *ctx, int n, const next_tensor_t *t, const char *what)
{
    for (int i = 0; i < n; i++)
        if (t[i].next_tag != 0)
            return host->set_error(ctx, MXOP_EOP_FAILED,
                                   "abi_next: %s %d has next_tag %lld from a worker that does not "
                                   "know it",
                                   what, i, (long long)t[i].next_tag);
    return 0;
}

/* out = x + y, the tensors indexed at the library's stride. */
static int add_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in_, int n_out,
                       mxop_tensor_t *out_)
{
    const next_tensor_t *in = (const next_tensor_t *)(const void *)in_;
    next_tensor_t *out = (next_tensor_t *)(void *)out_;
    if (worker_has_next_tag())
        return host->set_error(ctx, MXOP_EOP_FAILED, "abi_next: this worker cannot know next_tag");
    int rc = check_tags(ctx, n_in, in, "input");
    if (rc == 0)
        rc = check_tags(ctx, n_out, out, "output");
    if (rc != 0)
        return rc;
    if (in[1].now.size != in[0].now.size || in[1].now.dtype != in[0].now.dtype)
        return host->set_error(ctx, MXOP_ESHAPE, "abi_next: input 1 is not input 0's twin");
    return host->add(ctx, in[0].now.dtype, (int64_t)in[0].now.size, in[0].now.data, in[1].now.data,
                     out[0].now.data);
}

/* out[1] = the positive elements of x (a dynamic output); out[0] = their count. */
static int positive_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in_, int n_out,
                            mxop_tensor_t *out_)
{
    const next_tensor_t *in = (const next_tensor_t *)(const void *)in_;
    next_tensor_t *out = (next_tensor_t *)(void *)out_;
    const float *x = in[0].now.data;
    int64_t n = 0;
    for (size_t i = 0; i < in[0].now.size; i++)
        n += x[i] > 0;
    float *sel = host->alloc_output(ctx, 1, 1, &n);
    if (sel == NULL)
        return MXOP_EOP_FAILED;
    /* The library's own copy of output 1 has the new shape. */
    if (out[1].now.ndim != 1 || out[1].now.shape[0] != n || out[1].now.size != (size_t)n ||
        out[1].now.data != sel || out[1].next_tag != 0)
        return host->set_error(ctx, MXOP_EOP_FAILED,
                               "abi_next: alloc_output did not reach the library's tensor (ndim "
                               "%d, shape[0] %lld, size %zu)",
                               out[1].now.ndim, (long long)out[1].now.shape[0], out[1].now.size);
    int64_t k = 0;
    for (size_t i = 0; i < in[0].now.size; i++)
        if (x[i] > 0)
            sel[k++] = x[i];
    *(float *)out[0].now.data = (float)n;
    return 0;
}

static int positive_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                          mxop_shape_t *out)
{
    out[0].ndim = 0;
    out[1] = in[0];
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t add = {
        .struct_size = sizeof(add),
        .name = "abi_next.add",
        .num_inputs = 2,
        .num_outputs = 1,
        .forward = add_forward,
    };
    mxop_op_def_t positive = {
        .struct_size = sizeof(positive),
        .name = "abi_next.positive",
        .num_inputs = 1,
        .num_outputs = 2,
        .infer_shape = positive_shape,
        .forward = positive_forward,
        .dynamic_outputs = 1u << 1,
    };
    int rc = h->register_op(ctx, &add);
    return rc != 0 ? rc : h->register_op(ctx, &positive);
}
