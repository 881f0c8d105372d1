/*
 * server/worker/host.c - the context of plugin callbacks and the host table.
 *
 * One context serves the whole process (calls run one at a time): it is the
 * registration context during mxop_plugin_init and the call context during
 * an op's callbacks.  The tensor routines of the table live in host_math.c.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "server/worker/cuda.h"
#include "server/worker/host_math.h"
#include "server/worker/worker.h"

struct mxop_ctx mxop__ctx;

/* The session's random sequence: each unseeded call draws its seed here. */
static uint64_t session_seq;

/* ------------------------------------------------------------------------ */
/* Random numbers: xoshiro256**, seeded through splitmix64. */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(struct mxop_ctx *c, uint64_t seed)
{
    uint64_t x = seed;
    c->call_seed = seed;
    for (int i = 0; i < 4; i++)
        c->rng[i] = splitmix64(&x);
    c->have_spare = 0;
}

void mxop__ctx_seed_session(uint64_t session, uint32_t generation)
{
    /*
     * Unseeded calls need only differ from each other, not be reproducible;
     * mixing in the clock keeps a restarted worker from replaying the
     * numbers its predecessor drew.
     */
    session_seq = session ^ ((uint64_t)generation << 40) ^ (uint64_t)mxop__now_ns();
    rng_seed(&mxop__ctx, splitmix64(&session_seq));
}

static uint64_t host_rng_u64(mxop_ctx_t *ctx)
{
    uint64_t *s = mxop__ctx.rng;
    (void)ctx;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static double host_rng_uniform(mxop_ctx_t *ctx)
{
    return (double)(host_rng_u64(ctx) >> 11) * 0x1.0p-53;
}

static double host_rng_normal(mxop_ctx_t *ctx)
{
    struct mxop_ctx *c = &mxop__ctx;
    if (c->have_spare) {
        c->have_spare = 0;
        return c->spare;
    }
    /* Box-Muller; 1 - u keeps the logarithm's argument in (0, 1]. */
    double u1 = 1.0 - host_rng_uniform(ctx);
    double u2 = host_rng_uniform(ctx);
    double r = sqrt(-2.0 * log(u1));
    double theta = 6.283185307179586476925 * u2;
    c->spare = r * sin(theta);
    c->have_spare = 1;
    return r * cos(theta);
}

/* ------------------------------------------------------------------------ */
/* Errors. */

static int host_set_error_v(mxop_ctx_t *ctx, int code, const char *fmt, va_list ap)
{
    /* A library that passes something else than its ctx gets no write. */
    if (ctx != &mxop__ctx)
        return code;
    if (ctx->err_code == 0)
        ctx->err_code = code;
    if (!ctx->has_msg && fmt != NULL) {
        vsnprintf(ctx->msg, sizeof(ctx->msg), fmt, ap);
        ctx->has_msg = 1;
    }
    return code;
}

static int host_set_error(mxop_ctx_t *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    host_set_error_v(ctx, code, fmt, ap);
    va_end(ap);
    return code;
}

/* ------------------------------------------------------------------------ */
/* Attributes. */

static const char *host_attr_get(mxop_ctx_t *ctx, const char *key)
{
    if (ctx != &mxop__ctx || key == NULL)
        return NULL;
    for (int i = 0; i < ctx->n_attrs; i++)
        if (strcmp(ctx->attr_keys[i], key) == 0)
            return ctx->attr_vals[i];
    return NULL;
}

static int host_attr_count(mxop_ctx_t *ctx)
{
    return ctx == &mxop__ctx ? ctx->n_attrs : 0;
}

static const char *host_attr_key(mxop_ctx_t *ctx, int i)
{
    if (ctx != &mxop__ctx || i < 0 || i >= ctx->n_attrs)
        return NULL;
    return ctx->attr_keys[i];
}

static const char *host_attr_value(mxop_ctx_t *ctx, int i)
{
    if (ctx != &mxop__ctx || i < 0 || i >= ctx->n_attrs)
        return NULL;
    return ctx->attr_vals[i];
}

/*
 * The value a typed reader sees: the call's, else the op's declared
 * default (NULL when neither exists, and the reader's own default applies).
 */
static const char *attr_value_or_declared(mxop_ctx_t *ctx, const char *key)
{
    const char *v = host_attr_get(ctx, key);
    if (v != NULL || ctx != &mxop__ctx)
        return v;
    const mxop_attr_decl_t *d = mxop__attr_decl_find(ctx->op, key);
    return d != NULL ? d->default_value : NULL;
}

static int host_attr_int(mxop_ctx_t *ctx, const char *key, int64_t dflt, int64_t *out)
{
    if (out == NULL)
        return host_set_error(ctx, MXOP_EINVAL, "attr_int: out is NULL");
    const char *v = attr_value_or_declared(ctx, key);
    const char *why = NULL;
    if (v == NULL) {
        *out = dflt;
        return 0;
    }
    if (mxop__attr_parse_int(v, out, &why) != 0)
        return host_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s' %s", key, v, why);
    return 0;
}

static int host_attr_float(mxop_ctx_t *ctx, const char *key, double dflt, double *out)
{
    if (out == NULL)
        return host_set_error(ctx, MXOP_EINVAL, "attr_float: out is NULL");
    const char *v = attr_value_or_declared(ctx, key);
    const char *why = NULL;
    if (v == NULL) {
        *out = dflt;
        return 0;
    }
    if (mxop__attr_parse_float(v, out, &why) != 0)
        return host_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s' %s", key, v, why);
    return 0;
}

static int host_attr_bool(mxop_ctx_t *ctx, const char *key, int dflt, int *out)
{
    if (out == NULL)
        return host_set_error(ctx, MXOP_EINVAL, "attr_bool: out is NULL");
    const char *v = attr_value_or_declared(ctx, key);
    const char *why = NULL;
    if (v == NULL) {
        *out = dflt;
        return 0;
    }
    if (mxop__attr_parse_bool(v, out, &why) != 0)
        return host_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s' %s", key, v, why);
    return 0;
}

static const char *host_attr_string(mxop_ctx_t *ctx, const char *key, const char *dflt)
{
    const char *v = attr_value_or_declared(ctx, key);
    return v != NULL ? v : dflt;
}

static int attr_list(mxop_ctx_t *ctx, const char *key, int floats, int64_t *iv, double *dv, int cap,
                     int *n)
{
    const char *name = floats ? "attr_float_list" : "attr_int_list";
    if (n == NULL || cap < 0 || (cap > 0 && (floats ? (void *)dv : (void *)iv) == NULL))
        return host_set_error(ctx, MXOP_EINVAL, "%s: %s", name,
                              n == NULL ? "n is NULL"
                              : cap < 0 ? "cap is negative"
                                        : "out is NULL");
    *n = 0;
    const char *v = attr_value_or_declared(ctx, key);
    const char *why = NULL;
    if (v == NULL)
        return 0;
    if (mxop__attr_parse_list(v, floats, iv, dv, cap, n, &why) != 0) {
        *n = 0;
        if (strcmp(why, "has more entries than the op can take") == 0)
            return host_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s' has more than %d entries",
                                  key, v, cap);
        return host_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s' %s", key, v, why);
    }
    return 0;
}

static int host_attr_int_list(mxop_ctx_t *ctx, const char *key, int64_t *out, int cap, int *n)
{
    return attr_list(ctx, key, 0, out, NULL, cap, n);
}

static int host_attr_float_list(mxop_ctx_t *ctx, const char *key, double *out, int cap, int *n)
{
    return attr_list(ctx, key, 1, NULL, out, cap, n);
}

/* ------------------------------------------------------------------------ */
/* Workspace. */

#define WS_ALIGN 64

static void ws_free_extra(struct mxop_ctx *c)
{
    while (c->ws_extra != NULL) {
        struct mxop__ws_block *b = c->ws_extra;
        c->ws_extra = b->next;
        free(b);
    }
}

/*
 * Called between calls: forgets the extra blocks and grows the main buffer
 * to what the last call wanted in all, so that a steady stream of the same
 * calls allocates nothing.
 */
static void ws_reset(struct mxop_ctx *c)
{
    ws_free_extra(c);
    if (c->ws_want > c->ws_cap) {
        void *p = NULL;
        free(c->ws);
        c->ws = NULL;
        c->ws_cap = 0;
        if (posix_memalign(&p, WS_ALIGN, c->ws_want) == 0) {
            c->ws = p;
            c->ws_cap = c->ws_want;
        }
    }
    c->ws_used = 0;
    c->ws_want = 0;
}

static void *host_workspace(mxop_ctx_t *ctx, size_t bytes)
{
    if (ctx != &mxop__ctx)
        return NULL;
    if (bytes > SIZE_MAX - 2 * WS_ALIGN)
        return NULL;
    /* Every request gets its own 64-byte-aligned, non-empty piece. */
    size_t r = bytes == 0 ? WS_ALIGN : (bytes + WS_ALIGN - 1) & ~(size_t)(WS_ALIGN - 1);
    if (ctx->ws_want <= SIZE_MAX - r)
        ctx->ws_want += r;
    if (ctx->ws != NULL && r <= ctx->ws_cap - ctx->ws_used) {
        void *p = ctx->ws + ctx->ws_used;
        ctx->ws_used += r;
        return p;
    }
    /* The block's header takes the first 64 bytes so the rest stays aligned. */
    void *b = NULL;
    if (posix_memalign(&b, WS_ALIGN, WS_ALIGN + r) != 0)
        return NULL;
    ((struct mxop__ws_block *)b)->next = ctx->ws_extra;
    ctx->ws_extra = b;
    return (uint8_t *)b + WS_ALIGN;
}

void mxop__ctx_free(void)
{
    ws_free_extra(&mxop__ctx);
    free(mxop__ctx.ws);
    mxop__ctx.ws = NULL;
    mxop__ctx.ws_cap = 0;
}

/* The worker's stream of the call's device in a GPU call (cuda.c), else NULL. */
static void *host_cuda_stream(mxop_ctx_t *ctx)
{
    (void)ctx;
    return mxop__cuda_call_stream();
}

static uint64_t host_rng_seed(mxop_ctx_t *ctx)
{
    (void)ctx;
    return mxop__ctx.call_seed;
}

/* ------------------------------------------------------------------------ */
/* Outputs of data-dependent shape. */

static void *host_alloc_output(mxop_ctx_t *ctx, int i, int32_t ndim, const int64_t *shape)
{
    if (ctx != &mxop__ctx || ctx->op == NULL || ctx->dyn_out == NULL) {
        host_set_error(ctx, MXOP_EINVAL, "alloc_output: only during a forward");
        return NULL;
    }
    const mxop__worker_op_t *op = ctx->op;
    if (i < 0 || i >= ctx->dyn_n || i >= 64 || !((op->def.dynamic_outputs >> i) & 1u)) {
        host_set_error(ctx, MXOP_EINVAL, "alloc_output: output %d of op '%s' is not dynamic", i,
                       op->name);
        return NULL;
    }
    if (ndim < 0 || ndim > MXOP_MAX_DIMS || (ndim > 0 && shape == NULL)) {
        host_set_error(ctx, MXOP_EINVAL, "alloc_output: output %d: ndim %d is outside [0, %d]", i,
                       ndim, MXOP_MAX_DIMS);
        return NULL;
    }
    mxop_tensor_t *t = &ctx->dyn_out[i];
    uint64_t elems = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(elems, (uint64_t)shape[d], &elems)) {
            host_set_error(ctx, MXOP_EINVAL, "alloc_output: output %d: dimension %d is %lld", i, d,
                           (long long)shape[d]);
            return NULL;
        }
    }
    /* The capacity is what infer_shape allowed, as the caller allocated it. */
    if (elems > t->size) {
        host_set_error(ctx, MXOP_ESHAPE,
                       "alloc_output: output %d needs %llu elements, infer_shape allowed %zu", i,
                       (unsigned long long)elems, t->size);
        return NULL;
    }
    t->ndim = ndim;
    memset(t->shape, 0, sizeof(t->shape));
    memset(t->strides, 0, sizeof(t->strides));
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
    t->size = (size_t)elems;
    mxop__tensor_view_sync(i, t);
    ctx->dyn_set |= 1ull << i;
    return t->data;
}

/* ------------------------------------------------------------------------ */
/* Call set-up. */

int mxop__ctx_begin_call(const mxop__worker_op_t *op, const mxop__call_attrs_t *attrs,
                         uint64_t seed, char *msg, size_t msglen)
{
    struct mxop_ctx *c = &mxop__ctx;
    c->mode = MXOP__CTX_CALL;
    c->err_code = 0;
    c->has_msg = 0;
    c->msg[0] = '\0';
    c->op = op;
    c->n_attrs = 0;
    ws_reset(c);
    rng_seed(c, seed != 0 ? seed : splitmix64(&session_seq));

    size_t n_attrs = attrs != NULL ? attrs->n : 0;
    if (n_attrs > MXOP__W_MAX_ATTRS) {
        mxop__fmt(msg, msglen, "op '%s': %zu attributes, at most %d", op->name, n_attrs,
                  MXOP__W_MAX_ATTRS);
        return MXOP_EATTR;
    }
    for (size_t i = 0; i < n_attrs; i++) {
        const char *k = attrs->keys[i];
        const char *v = attrs->vals[i];
        if (k[0] == '\0') {
            mxop__fmt(msg, msglen, "op '%s': attribute %zu has an empty key", op->name, i);
            return MXOP_EATTR;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(c->attr_keys[j], k) == 0) {
                mxop__fmt(msg, msglen, "op '%s': attribute '%s' is given twice", op->name, k);
                return MXOP_EATTR;
            }
        }
        c->attr_keys[i] = k;
        c->attr_vals[i] = v;
        c->n_attrs = (int)i + 1;
    }
    /* Declared attributes are checked here, before any callback of the op. */
    return mxop__attrs_validate(op, c->n_attrs, c->attr_keys, c->attr_vals, msg, msglen);
}

int mxop__call_begin(const mxop__worker_op_t *op, uint64_t call_id, uint32_t deadline_ms,
                     const mxop__call_attrs_t *attrs, uint64_t seed, int n_in,
                     const mxop_tensor_t *in, char *msg, size_t msglen)
{
    int rc = mxop__ctx_begin_call(op, attrs, seed, msg, msglen);
    if (rc != 0) {
        mxop__ctx_end();
        return rc;
    }
    mxop__status_begin(call_id, op->name, deadline_ms);
    if (in != NULL)
        mxop__status_inputs(n_in, in);
    mxop__status_callback("check_attrs");
    if (op->def.check_attrs != NULL && (rc = op->def.check_attrs(&mxop__ctx)) != 0) {
        rc = mxop__op_error(op, rc, "check_attrs", msg, msglen);
        mxop__call_end();
        return rc;
    }
    /* What check_attrs recorded without failing is not the reason for a later failure. */
    mxop__ctx_clear_error();
    return 0;
}

void mxop__call_end(void)
{
    mxop__status_end();
    mxop__ctx_end();
}

void mxop__ctx_end(void)
{
    struct mxop_ctx *c = &mxop__ctx;
    c->dyn_out = NULL;
    c->dyn_n = 0;
    c->dyn_set = 0;
    c->dyn_view = NULL;
    c->dyn_stride = 0;
    c->mode = MXOP__CTX_IDLE;
    c->n_attrs = 0;
    c->op = NULL;
}

/* ------------------------------------------------------------------------ */
/* The table.  Members are only ever appended (see op.h). */

const mxop_host_t mxop__host = {
    .struct_size = sizeof(mxop_host_t),
    .abi_version = MXOP_ABI_VERSION,
    .register_op = mxop__register_op,
    .set_error = host_set_error,
    .attr_get = host_attr_get,
    .attr_count = host_attr_count,
    .attr_key = host_attr_key,
    .attr_value = host_attr_value,
    .attr_int = host_attr_int,
    .attr_float = host_attr_float,
    .attr_bool = host_attr_bool,
    .workspace = host_workspace,
    .rng_u64 = host_rng_u64,
    .rng_uniform = host_rng_uniform,
    .rng_normal = host_rng_normal,
    .cuda_stream = host_cuda_stream,
    .gemm = mxop__host_gemm,
    .add = mxop__host_add,
    .mul = mxop__host_mul,
    .axpy = mxop__host_axpy,
    .fill = mxop__host_fill,
    .copy = mxop__host_copy,
    .sum = mxop__host_sum,
    .gpu_workspace = mxop__cuda_host_workspace,
    .gpu_gemm = mxop__cuda_host_gemm,
    .rng_seed = host_rng_seed,
    .attr_string = host_attr_string,
    .attr_int_list = host_attr_int_list,
    .attr_float_list = host_attr_float_list,
    .convert = mxop__host_convert,
    .alloc_output = host_alloc_output,
    .tensor_size = sizeof(mxop_tensor_t),
};
