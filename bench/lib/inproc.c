/*
 * bench/lib/inproc.c - see inproc.h.
 *
 * The host table here is deliberately small: it does what the worker's
 * does for the ops the benchmark runs (attributes, errors, workspace, the
 * BLAS and elementwise routines), without the worker's checks on every
 * argument, so the baseline is never slower than the real thing.
 */
#include "bench/lib/inproc.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mxop/client.h"

struct mxop_ctx {
    int in_init;
    int err_code;
    char msg[512];
    const char *const *attrs;
    void *ws;
    size_t ws_cap;
    uint64_t rng;
};

struct mxb_inproc {
    void *handle;
    struct mxop_ctx ctx;
    mxop_op_def_t ops[MXB_INPROC_MAX_OPS];
    int n_ops;
};

static struct mxb_inproc *lib_of(mxop_ctx_t *ctx)
{
    /* Each library has its own context inside its struct; the callbacks get
     * only the context, so the library is found from where it sits. */
    return (struct mxb_inproc *)((char *)ctx - offsetof(struct mxb_inproc, ctx));
}

static int h_register_op(mxop_ctx_t *ctx, const mxop_op_def_t *def)
{
    struct mxb_inproc *lib = lib_of(ctx);
    if (!ctx->in_init || def == NULL || lib->n_ops == MXB_INPROC_MAX_OPS)
        return MXOP_EINVAL;
    mxop_op_def_t *d = &lib->ops[lib->n_ops];
    memset(d, 0, sizeof(*d));
    memcpy(d, def, def->struct_size < sizeof(*d) ? def->struct_size : sizeof(*d));
    lib->n_ops++;
    return 0;
}

static int h_set_error(mxop_ctx_t *ctx, int code, const char *fmt, ...)
{
    if (ctx->err_code == 0) {
        ctx->err_code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->msg, sizeof(ctx->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

static const char *h_attr_get(mxop_ctx_t *ctx, const char *key)
{
    for (int i = 0; ctx->attrs != NULL && ctx->attrs[i] != NULL; i += 2)
        if (strcmp(ctx->attrs[i], key) == 0)
            return ctx->attrs[i + 1];
    return NULL;
}

static int h_attr_count(mxop_ctx_t *ctx)
{
    int n = 0;
    while (ctx->attrs != NULL && ctx->attrs[2 * n] != NULL)
        n++;
    return n;
}

static const char *h_attr_key(mxop_ctx_t *ctx, int i)
{
    return i >= 0 && i < h_attr_count(ctx) ? ctx->attrs[2 * i] : NULL;
}

static const char *h_attr_value(mxop_ctx_t *ctx, int i)
{
    return i >= 0 && i < h_attr_count(ctx) ? ctx->attrs[2 * i + 1] : NULL;
}

static int h_attr_int(mxop_ctx_t *ctx, const char *key, int64_t dflt, int64_t *out)
{
    const char *v = h_attr_get(ctx, key);
    char *end;
    if (v == NULL) {
        *out = dflt;
        return 0;
    }
    *out = strtoll(v, &end, 10);
    return *v && *end == '\0' ? 0 : h_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s'", key, v);
}

static int h_attr_float(mxop_ctx_t *ctx, const char *key, double dflt, double *out)
{
    const char *v = h_attr_get(ctx, key);
    char *end;
    if (v == NULL) {
        *out = dflt;
        return 0;
    }
    *out = strtod(v, &end);
    return *v && *end == '\0' ? 0 : h_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s'", key, v);
}

static int h_attr_bool(mxop_ctx_t *ctx, const char *key, int dflt, int *out)
{
    const char *v = h_attr_get(ctx, key);
    if (v == NULL)
        *out = dflt;
    else if (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0)
        *out = 1;
    else if (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0)
        *out = 0;
    else
        return h_set_error(ctx, MXOP_EATTR, "attribute '%s' = '%s' is not a boolean", key, v);
    return 0;
}

static void *h_workspace(mxop_ctx_t *ctx, size_t bytes)
{
    if (bytes > ctx->ws_cap) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0)
            return NULL;
        free(ctx->ws);
        ctx->ws = p;
        ctx->ws_cap = bytes;
    }
    return ctx->ws;
}

static uint64_t h_rng_u64(mxop_ctx_t *ctx)
{
    /* splitmix64: the baseline needs numbers, not the worker's exact stream. */
    uint64_t z = (ctx->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double h_rng_uniform(mxop_ctx_t *ctx)
{
    return (double)(h_rng_u64(ctx) >> 11) * 0x1.0p-53;
}

static double h_rng_normal(mxop_ctx_t *ctx)
{
    /* Irwin-Hall: enough for a benchmark, which never draws numbers it checks. */
    double s = 0;
    for (int i = 0; i < 12; i++)
        s += h_rng_uniform(ctx);
    return s - 6.0;
}

static void *h_cuda_stream(mxop_ctx_t *ctx)
{
    return NULL;
}

static int h_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                  int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                  double beta, void *c, int64_t ldc)
{
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dtype == MXOP_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
    else if (dtype == MXOP_F64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                    beta, c, (int)ldc);
    else
        return h_set_error(ctx, MXOP_EDTYPE, "gemm: dtype %d", (int)dtype);
    return 0;
}

/* The elementwise routines, once per dtype. */
#define ELEMENTWISE(ctx, dtype, name, EXPR)                                                        \
    do {                                                                                           \
        if ((dtype) == MXOP_F32) {                                                                 \
            typedef float T;                                                                       \
            EXPR;                                                                                  \
        } else if ((dtype) == MXOP_F64) {                                                          \
            typedef double T;                                                                      \
            EXPR;                                                                                  \
        } else {                                                                                   \
            return h_set_error(ctx, MXOP_EDTYPE, name ": dtype %d", (int)(dtype));                 \
        }                                                                                          \
        return 0;                                                                                  \
    } while (0)

static int h_add(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b, void *out)
{
    ELEMENTWISE(ctx, dtype, "add",
                for (int64_t i = 0; i < n; i++)((T *)out)[i] =
                    ((const T *)a)[i] + ((const T *)b)[i]);
}

static int h_mul(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b, void *out)
{
    ELEMENTWISE(ctx, dtype, "mul",
                for (int64_t i = 0; i < n; i++)((T *)out)[i] =
                    ((const T *)a)[i] * ((const T *)b)[i]);
}

static int h_axpy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double alpha, const void *x, void *y)
{
    ELEMENTWISE(ctx, dtype, "axpy",
                for (int64_t i = 0; i < n; i++)((T *)y)[i] += (T)alpha * ((const T *)x)[i]);
}

static int h_fill(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double value, void *out)
{
    ELEMENTWISE(ctx, dtype, "fill", for (int64_t i = 0; i < n; i++)((T *)out)[i] = (T)value);
}

static int h_copy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *src, void *dst)
{
    ELEMENTWISE(ctx, dtype, "copy", memcpy(dst, src, (size_t)n * sizeof(T)));
}

static int h_sum(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *x, double *out)
{
    double s = 0;
    ELEMENTWISE(ctx, dtype, "sum", for (int64_t i = 0; i < n; i++) s += ((const T *)x)[i];
                *out = s);
}

static const mxop_host_t host = {
    .struct_size = sizeof(mxop_host_t),
    .abi_version = MXOP_ABI_VERSION,
    .register_op = h_register_op,
    .set_error = h_set_error,
    .attr_get = h_attr_get,
    .attr_count = h_attr_count,
    .attr_key = h_attr_key,
    .attr_value = h_attr_value,
    .attr_int = h_attr_int,
    .attr_float = h_attr_float,
    .attr_bool = h_attr_bool,
    .workspace = h_workspace,
    .rng_u64 = h_rng_u64,
    .rng_uniform = h_rng_uniform,
    .rng_normal = h_rng_normal,
    .cuda_stream = h_cuda_stream,
    .gemm = h_gemm,
    .add = h_add,
    .mul = h_mul,
    .axpy = h_axpy,
    .fill = h_fill,
    .copy = h_copy,
    .sum = h_sum,
};

int mxb_inproc_open(const char *path, mxb_inproc_t **out, char *err, size_t errlen)
{
    *out = NULL;
    struct mxb_inproc *lib = calloc(1, sizeof(*lib));
    if (lib == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib->handle == NULL) {
        snprintf(err, errlen, "dlopen %s: %s", path, dlerror());
        goto err_lib;
    }
    mxop_plugin_init_fn init;
    /* POSIX's way to turn a data pointer from dlsym into a function pointer. */
    *(void **)&init = dlsym(lib->handle, "mxop_plugin_init");
    if (init == NULL) {
        snprintf(err, errlen, "%s has no mxop_plugin_init", path);
        goto err_dl;
    }
    lib->ctx.in_init = 1;
    int rc = init(&lib->ctx, &host);
    lib->ctx.in_init = 0;
    if (rc != 0) {
        snprintf(err, errlen, "%s: init returned %s: %s", path, mxop_err_name(rc), lib->ctx.msg);
        goto err_dl;
    }
    *out = lib;
    return 0;

err_dl:
    dlclose(lib->handle);
err_lib:
    free(lib);
    return -1;
}

void mxb_inproc_close(mxb_inproc_t *lib)
{
    if (lib == NULL)
        return;
    free(lib->ctx.ws);
    dlclose(lib->handle);
    free(lib);
}

const mxop_op_def_t *mxb_inproc_op(mxb_inproc_t *lib, const char *name)
{
    for (int i = 0; i < lib->n_ops; i++)
        if (lib->ops[i].name != NULL && strcmp(lib->ops[i].name, name) == 0)
            return &lib->ops[i];
    return NULL;
}

int mxb_inproc_forward(mxb_inproc_t *lib, const mxop_op_def_t *op, const char *const *attrs,
                       int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    lib->ctx.attrs = attrs;
    lib->ctx.err_code = 0;
    lib->ctx.msg[0] = '\0';
    int rc = op->forward(&lib->ctx, n_in, in, n_out, out);
    lib->ctx.attrs = NULL;
    return rc;
}

const char *mxb_inproc_error(const mxb_inproc_t *lib)
{
    return lib->ctx.msg;
}

mxop_tensor_t mxb_tensor(void *data, int32_t dtype, int32_t ndim, const int64_t *shape)
{
    mxop_tensor_t t;
    memset(&t, 0, sizeof(t));
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    t.size = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = (int64_t)t.size;
        t.size *= (size_t)shape[i];
    }
    t.req = MXOP_REQ_WRITE;
    t.device = -1;
    return t;
}
