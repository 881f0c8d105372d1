/*
 * plugins/relu.c - the smallest complete op library: one op, "relu".
 *
 *     forward:  y = max(x, 0)
 *     backward: dx = dy * (x > 0)      in = [dy, x, y], out = [dx]
 *
 * It is the running example of docs/op-author-guide.md, so it shows every
 * habit an op library should have: one header, the two macros, the host
 * table kept in a static, type inference that refuses what the op cannot
 * compute, and every output honouring its req (write, add or nothing).
 *
 * Build: cc -shared -fPIC -O2 $(pkg-config --cflags mxop-plugin) relu.c -o relu.so
 */
#include "mxop/op.h"

MXOP_PLUGIN("relu", "1.0");

/*
 * The host table stays valid for the library's lifetime, so init keeps it
 * here and every callback reaches the host routines through it.
 */
static const mxop_host_t *host;

/*
 * Without an infer_type the worker would accept any dtype as long as all
 * inputs agree; relu computes only in floating point, so it says so here,
 * before any data is touched, and the caller gets MXOP_EDTYPE with a reason.
 */
static int relu_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    for (int i = 0; i < n_in; i++) {
        if (in[i] != MXOP_F32 && in[i] != MXOP_F64)
            return host->set_error(ctx, MXOP_EDTYPE,
                                   "input %d is %s; only f32 and f64 are supported", i,
                                   mxop_dtype_name(in[i]));
        if (in[i] != in[0])
            return host->set_error(ctx, MXOP_EDTYPE, "input %d is %s but input 0 is %s", i,
                                   mxop_dtype_name(in[i]), mxop_dtype_name(in[0]));
    }
    for (int i = 0; i < n_out; i++)
        out[i] = in[0];
    return 0;
}

/*
 * The element loops, once per dtype and req.  Writing and accumulating are
 * separate loops (rather than one loop testing `add` per element) and the
 * pointers are restrict, so the compiler can vectorise them: relu is memory
 * bound, and a branchy scalar loop would be several times slower.  Reading
 * element i before writing element i keeps an in-place call correct.
 */
#define RELU_FORWARD(T)                                                                            \
    do {                                                                                           \
        const T *restrict xs = x->data;                                                            \
        T *restrict ys = y->data;                                                                  \
        if (add) {                                                                                 \
            for (size_t i = 0; i < x->size; i++)                                                   \
                ys[i] += xs[i] > 0 ? xs[i] : (T)0;                                                 \
        } else {                                                                                   \
            for (size_t i = 0; i < x->size; i++)                                                   \
                ys[i] = xs[i] > 0 ? xs[i] : (T)0;                                                  \
        }                                                                                          \
    } while (0)

#define RELU_BACKWARD(T)                                                                           \
    do {                                                                                           \
        const T *restrict dys = dy->data;                                                          \
        const T *restrict xs = x->data;                                                            \
        T *restrict dxs = dx->data;                                                                \
        if (add) {                                                                                 \
            for (size_t i = 0; i < x->size; i++)                                                   \
                dxs[i] += xs[i] > 0 ? dys[i] : (T)0;                                               \
        } else {                                                                                   \
            for (size_t i = 0; i < x->size; i++)                                                   \
                dxs[i] = xs[i] > 0 ? dys[i] : (T)0;                                                \
        }                                                                                          \
    } while (0)

/*
 * The worker has already checked the counts, the regions, the dtypes and
 * the shapes (infer_type above, and the default infer_shape: y takes the
 * shape of x), so the callbacks go straight to work.  MXOP_VECTOR_CLONES
 * builds each callback for AVX2 as well, picked when the library loads on a
 * CPU that has it.
 */
MXOP_VECTOR_CLONES
static int relu_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    const mxop_tensor_t *x = &in[0];
    mxop_tensor_t *y = &out[0];

    if (y->req == MXOP_REQ_NULL)
        return 0;
    int add = y->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        RELU_FORWARD(float);
    else
        RELU_FORWARD(double);
    return 0;
}

MXOP_VECTOR_CLONES
static int relu_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    /* in = [gradient of y, x, y]; out = [gradient of x]. */
    const mxop_tensor_t *dy = &in[0];
    const mxop_tensor_t *x = &in[1];
    mxop_tensor_t *dx = &out[0];

    if (dx->req == MXOP_REQ_NULL)
        return 0;
    int add = dx->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        RELU_BACKWARD(float);
    else
        RELU_BACKWARD(double);
    return 0;
}

/* The op declares no attributes, and so takes any unless it refuses them
 * here: a keyword given by mistake (relu(x, inplace=True)) is an error
 * naming it, not silently ignored. */
static int no_attrs(mxop_ctx_t *ctx)
{
    if (host->attr_count(ctx) > 0)
        return host->set_error(ctx, MXOP_EATTR, "op 'relu' takes no attributes; got '%s'",
                               host->attr_key(ctx, 0));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "relu",
        .check_attrs = no_attrs,
        .description = "y = max(x, 0), elementwise; f32 and f64",
        .num_inputs = 1,
        .num_outputs = 1,
        .infer_type = relu_infer_type,
        .forward = relu_forward,
        .backward = relu_backward,
    };
    return host->register_op(ctx, &def);
}
