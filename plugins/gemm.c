/*
 * plugins/gemm.c - matrix product through the host's BLAS: op "gemm".
 *
 *     C = alpha * op(A) op(B)        op(X) = X or X^T
 *
 * Attributes: transpose_a, transpose_b (bool, default 0), alpha (float,
 * default 1).  A and B are 2-d and of one dtype (f32 or f64); C is [m, n].
 * Backward: in = [dC, A, B, C], out = [dA, dB].
 *
 * The op does no arithmetic of its own: every product goes through
 * host->gemm, and req ADD becomes beta = 1, which is how an op library
 * should reuse the host routines instead of shipping its own BLAS.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("gemm", "1.0");

static const mxop_host_t *host;

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[MXOP_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32",
                                                        "i64", "u8",  "i8",  "bool"};
    return dtype >= 0 && dtype < MXOP_DTYPE_COUNT ? names[dtype] : "unknown";
}

/* Writes "[2,3]" into buf; 192 bytes hold any shape of MXOP_MAX_DIMS dims. */
static const char *shape_str(char *buf, size_t len, int32_t ndim, const int64_t *dims)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int32_t i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

typedef struct gemm_attrs {
    int trans_a;
    int trans_b;
    double alpha;
} gemm_attrs_t;

/*
 * Reads the attributes.  The typed readers record a message naming the
 * key when a value does not parse; only the checks they cannot make (a
 * finite alpha, no unknown keys) are spelled out here.
 */
static int read_attrs(mxop_ctx_t *ctx, gemm_attrs_t *a)
{
    int rc = host->attr_bool(ctx, "transpose_a", 0, &a->trans_a);
    if (rc == 0)
        rc = host->attr_bool(ctx, "transpose_b", 0, &a->trans_b);
    if (rc == 0)
        rc = host->attr_float(ctx, "alpha", 1.0, &a->alpha);
    if (rc != 0)
        return rc;
    if (!isfinite(a->alpha))
        return host->set_error(ctx, MXOP_EATTR, "attribute 'alpha' must be finite, got '%s'",
                               host->attr_get(ctx, "alpha"));
    return 0;
}

/*
 * Unknown keys and values that do not parse are refused by the worker from
 * the declarations (see gemm_attrs in the init below); what is left to
 * check here is what a type cannot say: alpha must be finite.
 */
static int gemm_check_attrs(mxop_ctx_t *ctx)
{
    gemm_attrs_t a;
    return read_attrs(ctx, &a);
}

static int gemm_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                            mxop_shape_t *out)
{
    static const char *const names[2] = {"A", "B"};
    char sa[192], sb[192];
    gemm_attrs_t a;
    int rc = read_attrs(ctx, &a);
    if (rc != 0)
        return rc;
    for (int i = 0; i < 2; i++)
        if (in[i].ndim != 2)
            return host->set_error(ctx, MXOP_ESHAPE, "%s must be 2-d, got %s", names[i],
                                   shape_str(sa, sizeof(sa), in[i].ndim, in[i].dims));

    int64_t m = a.trans_a ? in[0].dims[1] : in[0].dims[0];
    int64_t k = a.trans_a ? in[0].dims[0] : in[0].dims[1];
    int64_t kb = a.trans_b ? in[1].dims[1] : in[1].dims[0];
    int64_t n = a.trans_b ? in[1].dims[0] : in[1].dims[1];
    if (k != kb)
        return host->set_error(ctx, MXOP_ESHAPE,
                               "A is %s (transposed: %s), B is %s%s: inner dimensions "
                               "%lld and %lld differ",
                               shape_str(sa, sizeof(sa), 2, in[0].dims), a.trans_a ? "yes" : "no",
                               shape_str(sb, sizeof(sb), 2, in[1].dims),
                               a.trans_b ? " (transposed: yes)" : "", (long long)k, (long long)kb);
    out[0].ndim = 2;
    out[0].dims[0] = m;
    out[0].dims[1] = n;
    return 0;
}

static int gemm_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    if (in[0] != MXOP_F32 && in[0] != MXOP_F64)
        return host->set_error(ctx, MXOP_EDTYPE, "A is %s; only f32 and f64 are supported",
                               dtype_name(in[0]));
    if (in[1] != in[0])
        return host->set_error(ctx, MXOP_EDTYPE, "B is %s but A is %s", dtype_name(in[1]),
                               dtype_name(in[0]));
    out[0] = in[0];
    return 0;
}

/*
 * out[r, c] = alpha * op(X) op(Y), written or added according to req.
 * op(X) is r x inner and op(Y) is inner x c; the leading dimensions of the
 * stored (untransposed) matrices follow from that.  Empty products are
 * handled here because BLAS refuses a leading dimension of 0.
 */
static int product(mxop_ctx_t *ctx, int32_t dtype, int32_t req, int tx, int ty, int64_t r,
                   int64_t c, int64_t inner, double alpha, const void *x, const void *y, void *out)
{
    if (req == MXOP_REQ_NULL || r == 0 || c == 0)
        return 0;
    if (inner == 0)
        return req == MXOP_REQ_ADD ? 0 : host->fill(ctx, dtype, r * c, 0.0, out);
    int64_t ldx = tx ? r : inner;
    int64_t ldy = ty ? inner : c;
    double beta = req == MXOP_REQ_ADD ? 1.0 : 0.0;
    return host->gemm(ctx, dtype, tx, ty, r, c, inner, alpha, x, ldx, y, ldy, beta, out, c);
}

/* m, n, k of the forward product, from A's and B's stored shapes. */
static void dims_of(const gemm_attrs_t *a, const mxop_tensor_t *A, const mxop_tensor_t *B,
                    int64_t *m, int64_t *n, int64_t *k)
{
    *m = a->trans_a ? A->shape[1] : A->shape[0];
    *k = a->trans_a ? A->shape[0] : A->shape[1];
    *n = a->trans_b ? B->shape[0] : B->shape[1];
}

static int gemm_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    gemm_attrs_t a;
    int64_t m, n, k;
    int rc = read_attrs(ctx, &a);
    if (rc != 0)
        return rc;
    dims_of(&a, &in[0], &in[1], &m, &n, &k);
    return product(ctx, in[0].dtype, out[0].req, a.trans_a, a.trans_b, m, n, k, a.alpha, in[0].data,
                   in[1].data, out[0].data);
}

/*
 * With A' = op(A) (m x k) and B' = op(B) (k x n):
 *     dA' = alpha * dC B'^T      dB' = alpha * A'^T dC
 * and a transposed operand's gradient is the transpose of those, which a
 * product yields by swapping its factors: (P Q)^T = Q^T P^T.
 */
static int gemm_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    /* in = [dC, A, B, C]; out = [dA, dB]. */
    const mxop_tensor_t *dC = &in[0], *A = &in[1], *B = &in[2];
    mxop_tensor_t *dA = &out[0], *dB = &out[1];
    int32_t dt = A->dtype;
    gemm_attrs_t a;
    int64_t m, n, k;
    int rc = read_attrs(ctx, &a);
    if (rc != 0)
        return rc;
    dims_of(&a, A, B, &m, &n, &k);

    if (!a.trans_a) /* dA (m x k) = dC op(B)^T */
        rc =
            product(ctx, dt, dA->req, 0, !a.trans_b, m, k, n, a.alpha, dC->data, B->data, dA->data);
    else /* dA (k x m) = op(B) dC^T */
        rc = product(ctx, dt, dA->req, a.trans_b, 1, k, m, n, a.alpha, B->data, dC->data, dA->data);
    if (rc != 0)
        return rc;

    if (!a.trans_b) /* dB (k x n) = op(A)^T dC */
        return product(ctx, dt, dB->req, !a.trans_a, 0, k, n, m, a.alpha, A->data, dC->data,
                       dB->data);
    /* dB (n x k) = dC^T op(A) */
    return product(ctx, dt, dB->req, 1, a.trans_a, n, k, m, a.alpha, dC->data, A->data, dB->data);
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    /*
     * Every host member used here is from ABI version 1; a library using a
     * later member tests it with MXOP_HOST_HAS and refuses with MXOP_EABI
     * (or does without it) when the worker's table lacks it.
     */
    if (!MXOP_HOST_HAS(h, fill))
        return h->set_error(ctx, MXOP_EABI, "gemm: the worker's host table is too old");
    static const mxop_attr_decl_t gemm_attrs[] = {
        {"transpose_a", MXOP_ATTR_BOOL, 0, "false", "use A transposed (A is k x m)"},
        {"transpose_b", MXOP_ATTR_BOOL, 0, "false", "use B transposed (B is n x k)"},
        {"alpha", MXOP_ATTR_FLOAT, 0, "1.0", "scale of the product; finite"},
    };
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "gemm",
        .description = "C = alpha * op(A) op(B); attributes transpose_a, transpose_b (bool), "
                       "alpha (float); f32 and f64",
        .num_inputs = 2,
        .num_outputs = 1,
        .check_attrs = gemm_check_attrs,
        .infer_shape = gemm_infer_shape,
        .infer_type = gemm_infer_type,
        .forward = gemm_forward,
        .backward = gemm_backward,
        .attrs = gemm_attrs,
        .num_attrs = 3,
    };
    return host->register_op(ctx, &def);
}
