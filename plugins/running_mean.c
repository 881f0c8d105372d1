/*
 * plugins/running_mean.c - a stateful op: "running_mean_norm".
 *
 * Each instance keeps a running mean per feature (the last dimension of x)
 * and the number of updates.  Every forward call first folds in the
 * batch's mean over the leading dimensions,
 *
 *     mean = batch_mean                                (first call)
 *     mean = (1 - momentum) * mean + momentum * batch_mean   (later calls)
 *
 * then centres the batch with it: y = x - mean.  Backward treats the mean
 * as a constant, so dx = dy.  The attribute `momentum` (float in [0, 1],
 * default 0.1) is read when the instance is created and kept with it.
 *
 * The instance lives in the worker: if the worker dies, calls with the
 * old state id answer MXOP_ESTATE_LOST and the engine creates a new one.
 */
#include <stdlib.h>

#include "mxop/op.h"

MXOP_PLUGIN("running_mean", "1.0");

static const mxop_host_t *host;

typedef struct rm_state {
    int32_t dtype;
    int64_t features;
    double momentum;
    uint64_t count; /* updates folded in so far */
    double mean[];  /* features entries, kept in double whatever the dtype */
} rm_state_t;

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[MXOP_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32",
                                                        "i64", "u8",  "i8",  "bool"};
    return dtype >= 0 && dtype < MXOP_DTYPE_COUNT ? names[dtype] : "unknown";
}

static int read_momentum(mxop_ctx_t *ctx, double *m)
{
    int rc = host->attr_float(ctx, "momentum", 0.1, m);
    if (rc != 0)
        return rc;
    /* Written so that NaN fails too. */
    if (!(*m >= 0.0 && *m <= 1.0))
        return host->set_error(ctx, MXOP_EATTR,
                               "attribute 'momentum' must be in [0, 1], got "
                               "'%s'",
                               host->attr_get(ctx, "momentum"));
    return 0;
}

static int rm_check_attrs(mxop_ctx_t *ctx)
{
    double m;
    return read_momentum(ctx, &m);
}

static int rm_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    for (int i = 0; i < n_in; i++) {
        if (in[i] != MXOP_F32 && in[i] != MXOP_F64)
            return host->set_error(ctx, MXOP_EDTYPE,
                                   "input %d is %s; only f32 and f64 are "
                                   "supported",
                                   i, dtype_name(in[i]));
        if (in[i] != in[0])
            return host->set_error(ctx, MXOP_EDTYPE, "input %d is %s but input 0 is %s", i,
                                   dtype_name(in[i]), dtype_name(in[0]));
    }
    for (int i = 0; i < n_out; i++)
        out[i] = in[0];
    return 0;
}

static int rm_state_create(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in_shapes,
                           const int32_t *in_dtypes, void **state)
{
    double momentum;
    int rc = read_momentum(ctx, &momentum);
    if (rc != 0)
        return rc;
    if (in_dtypes[0] != MXOP_F32 && in_dtypes[0] != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "x is %s; only f32 and f64 are supported",
                               dtype_name(in_dtypes[0]));
    if (in_shapes[0].ndim < 1)
        return host->set_error(ctx, MXOP_ESHAPE, "x is a scalar; it needs a feature axis");
    int64_t features = in_shapes[0].dims[in_shapes[0].ndim - 1];
    rm_state_t *s = NULL;
    if ((uint64_t)features <= (SIZE_MAX - sizeof(*s)) / sizeof(double))
        s = calloc(1, sizeof(*s) + (size_t)features * sizeof(double));
    if (!s)
        return host->set_error(ctx, MXOP_ENOMEM, "no memory for a state of %lld features",
                               (long long)features);
    s->dtype = in_dtypes[0];
    s->features = features;
    s->momentum = momentum;
    *state = s;
    return 0;
}

static void rm_state_destroy(void *state)
{
    free(state);
}

/* The instance was made for one dtype and feature count; a call must match. */
static int check_against_state(mxop_ctx_t *ctx, const rm_state_t *s, const mxop_tensor_t *x)
{
    if (x->dtype != s->dtype)
        return host->set_error(ctx, MXOP_EDTYPE, "x is %s but the state was created for %s",
                               dtype_name(x->dtype), dtype_name(s->dtype));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != s->features)
        return host->set_error(ctx, MXOP_ESHAPE,
                               "x has %lld features but the state was created "
                               "for %lld",
                               x->ndim < 1 ? 0LL : (long long)x->shape[x->ndim - 1],
                               (long long)s->features);
    return 0;
}

/* Sums the batch per feature into acc (features doubles). */
#define BATCH_SUM(T)                                                                               \
    do {                                                                                           \
        const T *xs = x->data;                                                                     \
        for (size_t r = 0; r < rows; r++)                                                          \
            for (size_t j = 0; j < f; j++)                                                         \
                acc[j] += xs[r * f + j];                                                           \
    } while (0)

#define CENTRE(T)                                                                                  \
    do {                                                                                           \
        const T *xs = x->data;                                                                     \
        T *ys = y->data;                                                                           \
        for (size_t i = 0; i < x->size; i++) {                                                     \
            T v = (T)(xs[i] - s->mean[i % f]);                                                     \
            ys[i] = add ? ys[i] + v : v;                                                           \
        }                                                                                          \
    } while (0)

static int rm_state_forward(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                            int n_out, mxop_tensor_t *out)
{
    rm_state_t *s = state;
    const mxop_tensor_t *x = &in[0];
    mxop_tensor_t *y = &out[0];
    int rc = check_against_state(ctx, s, x);
    if (rc != 0)
        return rc;
    size_t f = (size_t)s->features;
    size_t rows = f ? x->size / f : 0;

    /*
     * An empty batch has no mean to fold in; the state is left as it was.
     * The batch sums go to the call's workspace: it costs no malloc and is
     * reclaimed by the worker when the call returns.
     */
    if (rows > 0) {
        double *acc = host->workspace(ctx, f * sizeof(double));
        if (!acc)
            return host->set_error(ctx, MXOP_ENOMEM, "no workspace for %zu features", f);
        for (size_t j = 0; j < f; j++)
            acc[j] = 0;
        if (x->dtype == MXOP_F32)
            BATCH_SUM(float);
        else
            BATCH_SUM(double);
        double m = s->count == 0 ? 1.0 : s->momentum;
        for (size_t j = 0; j < f; j++)
            s->mean[j] = (1.0 - m) * s->mean[j] + m * (acc[j] / (double)rows);
        s->count++;
    }

    if (y->req == MXOP_REQ_NULL)
        return 0;
    int add = y->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        CENTRE(float);
    else
        CENTRE(double);
    return 0;
}

/* dx = dy: the host's copy and axpy do it for either dtype. */
static int rm_state_backward(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                             int n_out, mxop_tensor_t *out)
{
    /* in = [dy, x, y]; out = [dx]. */
    const mxop_tensor_t *dy = &in[0];
    mxop_tensor_t *dx = &out[0];
    int rc = check_against_state(ctx, state, &in[1]);
    if (rc != 0)
        return rc;
    switch (dx->req) {
    case MXOP_REQ_NULL: return 0;
    case MXOP_REQ_ADD:
        return host->axpy(ctx, dy->dtype, (int64_t)dy->size, 1.0, dy->data, dx->data);
    default: return host->copy(ctx, dy->dtype, (int64_t)dy->size, dy->data, dx->data);
    }
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const mxop_attr_decl_t rm_attrs[] = {
        {"momentum", MXOP_ATTR_FLOAT, 0, "0.1", "weight of the new batch's mean, in [0, 1]"},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "running_mean_norm",
        .description = "stateful: y = x - running mean of x per feature (last axis); attribute "
                       "momentum (float, default 0.1); f32 and f64",
        .num_inputs = 1,
        .num_outputs = 1,
        .check_attrs = rm_check_attrs,
        .infer_type = rm_infer_type,
        .state_create = rm_state_create,
        .state_forward = rm_state_forward,
        .state_backward = rm_state_backward,
        .state_destroy = rm_state_destroy,
        .attrs = rm_attrs,
        .num_attrs = 1,
    };
    return host->register_op(ctx, &def);
}
