/*
 * plugins/masked_select.c - op "masked_select": an output whose shape is
 * known only during forward (mxop_op_def_t.dynamic_outputs).
 *
 *     y = the elements of x where mask is nonzero, in row-major order (1-d)
 *     backward: in = [dy, x, mask, y], out = [dx, dmask]:
 *               dx = dy scattered back to the selected places, 0 elsewhere;
 *               dmask = 0 (a mask has no gradient)
 *
 * x is f32 or f64, mask u8 or bool of x's shape.  infer_shape gives y's
 * largest shape, [numel(x)]; forward counts the selected elements and
 * gives y its real shape with host->alloc_output.
 */
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("masked_select", "1.0");

static const mxop_host_t *host;

static int ms_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    if (in[0] != MXOP_F32 && in[0] != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "x is %s; f32 and f64 are supported",
                               mxop_dtype_name(in[0]));
    if (in[1] != MXOP_U8 && in[1] != MXOP_BOOL)
        return host->set_error(ctx, MXOP_EDTYPE, "mask is %s; u8 and bool are supported",
                               mxop_dtype_name(in[1]));
    out[0] = in[0];
    return 0;
}

static int ms_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                          mxop_shape_t *out)
{
    char a[96], b[96];
    int same = in[0].ndim == in[1].ndim;
    for (int d = 0; same && d < in[0].ndim; d++)
        same = in[0].dims[d] == in[1].dims[d];
    if (!same)
        return host->set_error(ctx, MXOP_ESHAPE, "mask has shape %s, x has %s",
                               mxop_shape_format(a, sizeof(a), in[1].ndim, in[1].dims),
                               mxop_shape_format(b, sizeof(b), in[0].ndim, in[0].dims));
    int64_t n = 1;
    for (int d = 0; d < in[0].ndim; d++)
        n *= in[0].dims[d];
    out[0].ndim = 1;
    out[0].dims[0] = n; /* the largest y: every element selected */
    return 0;
}

#define SELECT(T)                                                                                  \
    do {                                                                                           \
        const T *xs = x->data;                                                                     \
        T *ys = y;                                                                                 \
        int64_t j = 0;                                                                             \
        for (size_t i = 0; i < x->size; i++)                                                       \
            if (mask[i])                                                                           \
                ys[j++] = xs[i];                                                                   \
    } while (0)

static int ms_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                      mxop_tensor_t *out)
{
    const mxop_tensor_t *x = &in[0];
    const uint8_t *mask = in[1].data;
    int64_t count = 0;
    for (size_t i = 0; i < x->size; i++)
        count += mask[i] != 0;
    void *y = host->alloc_output(ctx, 0, 1, &count);
    if (y == NULL)
        return MXOP_EOP_FAILED; /* the reason is recorded */
    if (x->dtype == MXOP_F32)
        SELECT(float);
    else
        SELECT(double);
    return 0;
}

#define SCATTER(T)                                                                                 \
    do {                                                                                           \
        const T *g = dy->data;                                                                     \
        T *o = dx->data;                                                                           \
        int64_t j = 0;                                                                             \
        for (size_t i = 0; i < dx->size; i++) {                                                    \
            T v = mask[i] ? g[j++] : (T)0;                                                         \
            o[i] = dx->req == MXOP_REQ_ADD ? o[i] + v : v;                                         \
        }                                                                                          \
    } while (0)

static int ms_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out)
{
    const mxop_tensor_t *dy = &in[0], *mask_t = &in[2];
    mxop_tensor_t *dx = &out[0], *dmask = &out[1];
    const uint8_t *mask = mask_t->data;
    size_t count = 0;
    for (size_t i = 0; i < mask_t->size; i++)
        count += mask[i] != 0;
    if (dy->ndim != 1 || (size_t)dy->size != count)
        return host->set_error(ctx, MXOP_ESHAPE, "dy has %zu elements, the mask selects %zu",
                               dy->size, count);
    if (dx->req != MXOP_REQ_NULL) {
        if (dx->dtype == MXOP_F32)
            SCATTER(float);
        else
            SCATTER(double);
    }
    if (dmask->req == MXOP_REQ_WRITE)
        memset(dmask->data, 0, dmask->size * mxop_dtype_size(dmask->dtype));
    return 0;
}

/* The op declares no attributes, and so takes any unless it refuses them
 * here: a keyword given by mistake (masked_select(x, m, inplace=True)) is an error
 * naming it, not silently ignored. */
static int no_attrs(mxop_ctx_t *ctx)
{
    if (host->attr_count(ctx) > 0)
        return host->set_error(ctx, MXOP_EATTR, "op 'masked_select' takes no attributes; got '%s'",
                               host->attr_key(ctx, 0));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    if (!MXOP_HOST_HAS(h, alloc_output))
        return h->set_error(ctx, MXOP_EABI, "masked_select: the worker has no alloc_output");
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "masked_select",
        .check_attrs = no_attrs,
        .description = "y = x[mask] (1-d, its length known only after forward); f32 and f64",
        .num_inputs = 2,
        .num_outputs = 1,
        .infer_shape = ms_infer_shape,
        .infer_type = ms_infer_type,
        .forward = ms_forward,
        .backward = ms_backward,
        .dynamic_outputs = 1,
    };
    return host->register_op(ctx, &def);
}
