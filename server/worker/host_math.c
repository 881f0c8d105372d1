/*
 * server/worker/host_math.c - gemm through BLAS and the elementwise routines.
 *
 * Only MXOP_F32 and MXOP_F64 are supported; any other dtype answers
 * MXOP_EDTYPE.  Counts are 64-bit on the ABI and int in CBLAS, so every
 * count is checked to fit before BLAS sees it.
 */
#include <limits.h>
#include <string.h>

#include "server/worker/blas.h"
#include "server/worker/host_math.h"
#include "server/worker/worker.h"

#define ERR(ctx, code, ...) mxop__host.set_error((ctx), (code), __VA_ARGS__)

static int check_dtype(mxop_ctx_t *ctx, const char *fn, int32_t dtype)
{
    char nb[32];
    if (dtype == MXOP_F32 || dtype == MXOP_F64)
        return 0;
    return ERR(ctx, MXOP_EDTYPE, "%s: dtype %s is not supported (only f32 and f64)", fn,
               mxop__dtype_name(dtype, nb, sizeof(nb)));
}

/* The common prologue of the elementwise routines: 1 to run, 0 for n == 0, or a code. */
static int check_n(mxop_ctx_t *ctx, const char *fn, int32_t dtype, int64_t n)
{
    int rc = check_dtype(ctx, fn, dtype);
    if (rc != 0)
        return rc;
    if (n < 0)
        return ERR(ctx, MXOP_EINVAL, "%s: n = %lld is negative", fn, (long long)n);
    if ((uint64_t)n > SIZE_MAX / sizeof(double))
        return ERR(ctx, MXOP_EINVAL, "%s: n = %lld is too large", fn, (long long)n);
    return n > 0;
}

#define NULLCHECK(ctx, fn, p)                                                                      \
    do {                                                                                           \
        if ((p) == NULL)                                                                           \
            return ERR(ctx, MXOP_EINVAL, "%s: %s is NULL", fn, #p);                                \
    } while (0)

/* ------------------------------------------------------------------------ */

static int check_ld(mxop_ctx_t *ctx, const char *what, int64_t ld, int64_t cols)
{
    int64_t need = cols > 1 ? cols : 1;
    if (ld < need || ld > INT_MAX)
        return ERR(ctx, MXOP_EINVAL, "gemm: %s = %lld, needs to be in [%lld, %d]", what,
                   (long long)ld, (long long)need, INT_MAX);
    return 0;
}

/* C = beta * C, for k == 0 (BLAS implementations differ on it). */
static void scale_c(int32_t dtype, int64_t m, int64_t n, double beta, void *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            if (dtype == MXOP_F32) {
                float *p = (float *)c + i * ldc + j;
                *p = beta == 0.0 ? 0.0f : (float)(beta * *p);
            } else {
                double *p = (double *)c + i * ldc + j;
                *p = beta == 0.0 ? 0.0 : beta * *p;
            }
        }
    }
}

int mxop__host_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                    double beta, void *c, int64_t ldc)
{
    int rc = check_dtype(ctx, "gemm", dtype);
    if (rc != 0)
        return rc;
    if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return ERR(ctx, MXOP_EINVAL, "gemm: dimensions m=%lld n=%lld k=%lld must be in [0, %d]",
                   (long long)m, (long long)n, (long long)k, INT_MAX);
    /* Row-major: op(A) is m x k, op(B) is k x n, C is m x n. */
    if ((rc = check_ld(ctx, "lda", lda, trans_a ? m : k)) != 0 ||
        (rc = check_ld(ctx, "ldb", ldb, trans_b ? k : n)) != 0 ||
        (rc = check_ld(ctx, "ldc", ldc, n)) != 0)
        return rc;
    if (m == 0 || n == 0)
        return 0;
    NULLCHECK(ctx, "gemm", c);
    if (k == 0) {
        scale_c(dtype, m, n, beta, c, ldc);
        return 0;
    }
    NULLCHECK(ctx, "gemm", a);
    NULLCHECK(ctx, "gemm", b);
    const char *why = NULL;
    const mxop__blas_t *blas = mxop__blas_get(&why);
    if (blas == NULL)
        return ERR(ctx, MXOP_EINTERNAL, "gemm: %s", why);
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dtype == MXOP_F32)
        blas->sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
    else
        blas->dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                    beta, c, (int)ldc);
    return 0;
}

/* ------------------------------------------------------------------------ */

int mxop__host_add(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b,
                   void *out)
{
    int rc = check_n(ctx, "add", dtype, n);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "add", a);
    NULLCHECK(ctx, "add", b);
    NULLCHECK(ctx, "add", out);
    if (dtype == MXOP_F32) {
        const float *x = a, *y = b;
        float *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] + y[i];
    } else {
        const double *x = a, *y = b;
        double *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] + y[i];
    }
    return 0;
}

int mxop__host_mul(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b,
                   void *out)
{
    int rc = check_n(ctx, "mul", dtype, n);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "mul", a);
    NULLCHECK(ctx, "mul", b);
    NULLCHECK(ctx, "mul", out);
    if (dtype == MXOP_F32) {
        const float *x = a, *y = b;
        float *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] * y[i];
    } else {
        const double *x = a, *y = b;
        double *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] * y[i];
    }
    return 0;
}

int mxop__host_axpy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double alpha, const void *x, void *y)
{
    int rc = check_n(ctx, "axpy", dtype, n);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "axpy", x);
    NULLCHECK(ctx, "axpy", y);
    const char *why = NULL;
    const mxop__blas_t *blas = mxop__blas_get(&why);
    if (blas == NULL)
        return ERR(ctx, MXOP_EINTERNAL, "axpy: %s", why);
    /* CBLAS counts are int: a longer vector goes through in pieces that fit. */
    const int64_t chunk = (int64_t)1 << 30;
    for (int64_t at = 0; at < n; at += chunk) {
        int len = (int)(n - at < chunk ? n - at : chunk);
        if (dtype == MXOP_F32)
            blas->saxpy(len, (float)alpha, (const float *)x + at, 1, (float *)y + at, 1);
        else
            blas->daxpy(len, alpha, (const double *)x + at, 1, (double *)y + at, 1);
    }
    return 0;
}

int mxop__host_fill(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double value, void *out)
{
    int rc = check_n(ctx, "fill", dtype, n);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "fill", out);
    if (dtype == MXOP_F32) {
        float *o = out, v = (float)value;
        for (int64_t i = 0; i < n; i++)
            o[i] = v;
    } else {
        double *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = value;
    }
    return 0;
}

int mxop__host_copy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *src, void *dst)
{
    int rc = check_n(ctx, "copy", dtype, n);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "copy", src);
    NULLCHECK(ctx, "copy", dst);
    /* memmove: an overlapping copy is the caller's mistake, not a reason to corrupt. */
    memmove(dst, src, (size_t)n * mxop_dtype_size(dtype));
    return 0;
}

int mxop__host_sum(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *x, double *out)
{
    NULLCHECK(ctx, "sum", out);
    int rc = check_n(ctx, "sum", dtype, n);
    if (rc < 0)
        return rc;
    double s = 0.0;
    if (rc > 0) {
        NULLCHECK(ctx, "sum", x);
        if (dtype == MXOP_F32) {
            const float *p = x;
            for (int64_t i = 0; i < n; i++)
                s += p[i];
        } else {
            const double *p = x;
            for (int64_t i = 0; i < n; i++)
                s += p[i];
        }
    }
    *out = s;
    return 0;
}
