/*
 * server/worker/host_math.c - gemm through BLAS and the elementwise routines.
 *
 * Every dtype where a routine makes sense (see op.h): f32 and f64 natively
 * (gemm and axpy through BLAS), f16 and bf16 through f32 (gemm accumulates
 * in f32), the integers with wrap-around add and mul, bool as logic.
 * Counts are 64-bit on the ABI and int in CBLAS, so every count is checked
 * to fit before BLAS sees it.
 */
#include <limits.h>
#include <string.h>

#include "server/worker/blas.h"
#include "server/worker/host_math.h"
#include "server/worker/worker.h"

#define ERR(ctx, code, ...) mxop__host.set_error((ctx), (code), __VA_ARGS__)

/* Which dtypes a routine takes. */
enum { ANY = 0, NUMERIC = 1 /* not bool */, FLOAT = 2 /* f32, f64, f16, bf16 */ };

static int check_dtype(mxop_ctx_t *ctx, const char *fn, int32_t dtype, int kinds)
{
    char nb[32];
    int ok = dtype >= 0 && dtype < MXOP_DTYPE_COUNT;
    if (ok && kinds == NUMERIC)
        ok = dtype != MXOP_BOOL;
    if (ok && kinds == FLOAT)
        ok = dtype == MXOP_F32 || dtype == MXOP_F64 || dtype == MXOP_F16 || dtype == MXOP_BF16;
    if (ok)
        return 0;
    return ERR(ctx, MXOP_EDTYPE, "%s: dtype %s is not supported (%s)", fn,
               mxop__dtype_name(dtype, nb, sizeof(nb)),
               kinds == FLOAT     ? "f32, f64, f16 and bf16 only"
               : kinds == NUMERIC ? "every dtype but bool"
                                  : "not a dtype");
}

/* The common prologue of the elementwise routines: 1 to run, 0 for n == 0, or a code. */
static int check_n(mxop_ctx_t *ctx, const char *fn, int32_t dtype, int64_t n, int kinds)
{
    int rc = check_dtype(ctx, fn, dtype, kinds);
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

/* Element i of a float array of `dtype` (f32, f64, f16, bf16) as double, and back. */
static double fget(int32_t dtype, const void *p, int64_t i)
{
    switch (dtype) {
    case MXOP_F32: return ((const float *)p)[i];
    case MXOP_F16: return mxop_f16_to_f32(((const uint16_t *)p)[i]);
    case MXOP_BF16: return mxop_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const double *)p)[i];
    }
}

static void fset(int32_t dtype, void *p, int64_t i, double v)
{
    switch (dtype) {
    case MXOP_F32: ((float *)p)[i] = (float)v; break;
    case MXOP_F16: ((uint16_t *)p)[i] = mxop_f32_to_f16((float)v); break;
    case MXOP_BF16: ((uint16_t *)p)[i] = mxop_f32_to_bf16((float)v); break;
    default: ((double *)p)[i] = v;
    }
}

/* C = beta * C, for k == 0 (BLAS implementations differ on it). */
static void scale_c(int32_t dtype, int64_t m, int64_t n, double beta, void *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            fset(dtype, c, i * ldc + j, beta == 0.0 ? 0.0 : beta * fget(dtype, c, i * ldc + j));
}

/* Copies an r x cols block with leading dimension ld between a half array and dense f32. */
static void half_block(int32_t dtype, int to_f32, void *half, int64_t ld, float *f, int64_t r,
                       int64_t cols)
{
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < cols; j++) {
            if (to_f32)
                f[i * cols + j] = (float)fget(dtype, half, i * ld + j);
            else
                fset(dtype, half, i * ld + j, f[i * cols + j]);
        }
}

/*
 * gemm of f16 / bf16: the operands are widened to f32 in the call's
 * workspace, multiplied by sgemm (so products accumulate in f32) and the
 * result rounded back once.
 */
static int half_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                     int64_t k, double alpha, const void *a, int64_t lda, const void *b,
                     int64_t ldb, double beta, void *c, int64_t ldc)
{
    const char *why = NULL;
    const mxop__blas_t *blas = mxop__blas_get(&why);
    if (blas == NULL)
        return ERR(ctx, MXOP_EINTERNAL, "gemm: %s", why);
    int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
    int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
    uint64_t elems =
        (uint64_t)ar * (uint64_t)ac + (uint64_t)br * (uint64_t)bc + (uint64_t)m * (uint64_t)n;
    if (elems > SIZE_MAX / sizeof(float))
        return ERR(ctx, MXOP_EINVAL, "gemm: operands too large to widen to f32");
    float *fa = mxop__host.workspace(ctx, (size_t)elems * sizeof(float));
    if (fa == NULL)
        return ERR(ctx, MXOP_ENOMEM, "gemm: no workspace for %llu f32 values",
                   (unsigned long long)elems);
    float *fb = fa + ar * ac, *fc = fb + br * bc;
    mxop__blas_fit_threads(m, n, k);
    half_block(dtype, 1, (void *)a, lda, fa, ar, ac);
    half_block(dtype, 1, (void *)b, ldb, fb, br, bc);
    if (beta != 0.0)
        half_block(dtype, 1, c, ldc, fc, m, n);
    blas->sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, (float)alpha, fa,
                (int)ac, fb, (int)bc, (float)beta, fc, (int)n);
    half_block(dtype, 0, c, ldc, fc, m, n);
    return 0;
}

int mxop__host_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                    double beta, void *c, int64_t ldc)
{
    int rc = check_dtype(ctx, "gemm", dtype, FLOAT);
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
    if (dtype == MXOP_F16 || dtype == MXOP_BF16)
        return half_gemm(ctx, dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                         ldc);
    const char *why = NULL;
    const mxop__blas_t *blas = mxop__blas_get(&why);
    if (blas == NULL)
        return ERR(ctx, MXOP_EINTERNAL, "gemm: %s", why);
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    mxop__blas_fit_threads(m, n, k);
    if (dtype == MXOP_F32)
        blas->sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
    else
        blas->dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                    beta, c, (int)ldc);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Elementwise.  One loop per dtype, written once by these macros. */

/* Integers wrap (through their unsigned type, so that overflow is defined). */
#define INT_LOOP(T, UT, EXPR)                                                                      \
    do {                                                                                           \
        const T *x = a, *y = b;                                                                    \
        T *o = out;                                                                                \
        for (int64_t i = 0; i < n; i++)                                                            \
            o[i] = (T)((UT)x[i] EXPR(UT) y[i]);                                                    \
    } while (0)

#define NATIVE_LOOP(T, EXPR)                                                                       \
    do {                                                                                           \
        const T *x = a, *y = b;                                                                    \
        T *o = out;                                                                                \
        for (int64_t i = 0; i < n; i++)                                                            \
            o[i] = x[i] EXPR y[i];                                                                 \
    } while (0)

#define HALF_LOOP(TO, FROM, EXPR)                                                                  \
    do {                                                                                           \
        const uint16_t *x = a, *y = b;                                                             \
        uint16_t *o = out;                                                                         \
        for (int64_t i = 0; i < n; i++)                                                            \
            o[i] = FROM(TO(x[i]) EXPR TO(y[i]));                                                   \
    } while (0)

/* out = a + b (mul: a * b); bool: or (and). */
static int binary(mxop_ctx_t *ctx, const char *fn, int is_mul, int32_t dtype, int64_t n,
                  const void *a, const void *b, void *out)
{
    int rc = check_n(ctx, fn, dtype, n, ANY);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, fn, a);
    NULLCHECK(ctx, fn, b);
    NULLCHECK(ctx, fn, out);
#define CASES(OP)                                                                                  \
    switch (dtype) {                                                                               \
    case MXOP_F32: NATIVE_LOOP(float, OP); break;                                                  \
    case MXOP_F64: NATIVE_LOOP(double, OP); break;                                                 \
    case MXOP_F16: HALF_LOOP(mxop_f16_to_f32, mxop_f32_to_f16, OP); break;                         \
    case MXOP_BF16: HALF_LOOP(mxop_bf16_to_f32, mxop_f32_to_bf16, OP); break;                      \
    case MXOP_I32: INT_LOOP(int32_t, uint32_t, OP); break;                                         \
    case MXOP_I64: INT_LOOP(int64_t, uint64_t, OP); break;                                         \
    case MXOP_U8: INT_LOOP(uint8_t, uint8_t, OP); break;                                           \
    case MXOP_I8: INT_LOOP(int8_t, uint8_t, OP); break;                                            \
    default: break;                                                                                \
    }
    if (dtype == MXOP_BOOL) {
        const uint8_t *x = a, *y = b;
        uint8_t *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = is_mul ? (x[i] && y[i]) : (x[i] || y[i]);
        return 0;
    }
    if (is_mul)
        CASES(*)
    else
        CASES(+)
#undef CASES
    return 0;
}

int mxop__host_add(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b,
                   void *out)
{
    return binary(ctx, "add", 0, dtype, n, a, b, out);
}

int mxop__host_mul(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b,
                   void *out)
{
    return binary(ctx, "mul", 1, dtype, n, a, b, out);
}

/* Element i of any dtype as double (an i64 beyond 2^53 rounds). */
static double get(int32_t dtype, const void *p, int64_t i)
{
    switch (dtype) {
    case MXOP_I32: return ((const int32_t *)p)[i];
    case MXOP_I64: return (double)((const int64_t *)p)[i];
    case MXOP_U8: return ((const uint8_t *)p)[i];
    case MXOP_I8: return ((const int8_t *)p)[i];
    case MXOP_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return fget(dtype, p, i);
    }
}

/* Integer v rounded to nearest and clamped into [lo, hi]; NaN is 0. */
static int64_t to_int(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    v = v < 0 ? v - 0.5 : v + 0.5;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)hi;
    return (int64_t)v;
}

/* Stores v into element i: floats round, integers round to nearest and saturate. */
static void set(int32_t dtype, void *p, int64_t i, double v)
{
    switch (dtype) {
    case MXOP_I32: ((int32_t *)p)[i] = (int32_t)to_int(v, INT32_MIN, INT32_MAX); break;
    case MXOP_I64:
        ((int64_t *)p)[i] = to_int(v, -9223372036854775808.0, 9223372036854775807.0);
        break;
    case MXOP_U8: ((uint8_t *)p)[i] = (uint8_t)to_int(v, 0, UINT8_MAX); break;
    case MXOP_I8: ((int8_t *)p)[i] = (int8_t)to_int(v, INT8_MIN, INT8_MAX); break;
    case MXOP_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: fset(dtype, p, i, v);
    }
}

int mxop__host_axpy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double alpha, const void *x, void *y)
{
    int rc = check_n(ctx, "axpy", dtype, n, NUMERIC);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "axpy", x);
    NULLCHECK(ctx, "axpy", y);
    if (dtype != MXOP_F32 && dtype != MXOP_F64) {
        /* Computed in double and stored as set() rounds. */
        for (int64_t i = 0; i < n; i++)
            set(dtype, y, i, get(dtype, y, i) + alpha * get(dtype, x, i));
        return 0;
    }
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
    int rc = check_n(ctx, "fill", dtype, n, ANY);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "fill", out);
    if (dtype == MXOP_F32) {
        float *o = out, v = (float)value;
        for (int64_t i = 0; i < n; i++)
            o[i] = v;
    } else if (dtype == MXOP_F64) {
        double *o = out;
        for (int64_t i = 0; i < n; i++)
            o[i] = value;
    } else {
        /* One element converted, then copied: every element gets the same bits. */
        size_t es = mxop_dtype_size(dtype);
        set(dtype, out, 0, value);
        for (int64_t i = 1; i < n; i++)
            memcpy((char *)out + (size_t)i * es, out, es);
    }
    return 0;
}

int mxop__host_copy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *src, void *dst)
{
    int rc = check_n(ctx, "copy", dtype, n, ANY);
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
    int rc = check_n(ctx, "sum", dtype, n, ANY);
    if (rc < 0)
        return rc;
    double s = 0.0;
    if (rc > 0) {
        NULLCHECK(ctx, "sum", x);
        if (dtype == MXOP_F32) {
            const float *p = x;
            for (int64_t i = 0; i < n; i++)
                s += p[i];
        } else if (dtype == MXOP_F64) {
            const double *p = x;
            for (int64_t i = 0; i < n; i++)
                s += p[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                s += get(dtype, x, i);
        }
    }
    *out = s;
    return 0;
}

int mxop__host_convert(mxop_ctx_t *ctx, int64_t n, int32_t src_dtype, const void *src,
                       int32_t dst_dtype, void *dst)
{
    int rc = check_dtype(ctx, "convert", src_dtype, ANY);
    if (rc == 0)
        rc = check_n(ctx, "convert", dst_dtype, n, ANY);
    if (rc <= 0)
        return rc;
    NULLCHECK(ctx, "convert", src);
    NULLCHECK(ctx, "convert", dst);
    if (src_dtype == dst_dtype) {
        memmove(dst, src, (size_t)n * mxop_dtype_size(src_dtype));
        return 0;
    }
    if (src_dtype == MXOP_I64 && dst_dtype != MXOP_F32 && dst_dtype != MXOP_F64 &&
        dst_dtype != MXOP_F16 && dst_dtype != MXOP_BF16) {
        /* Integer to integer exactly, without the detour through double. */
        const int64_t *p = src;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = p[i];
            if (dst_dtype == MXOP_BOOL)
                ((uint8_t *)dst)[i] = v != 0;
            else if (dst_dtype == MXOP_I32)
                ((int32_t *)dst)[i] = v < INT32_MIN   ? INT32_MIN
                                      : v > INT32_MAX ? INT32_MAX
                                                      : (int32_t)v;
            else if (dst_dtype == MXOP_U8)
                ((uint8_t *)dst)[i] = v < 0 ? 0 : v > UINT8_MAX ? UINT8_MAX : (uint8_t)v;
            else
                ((int8_t *)dst)[i] = v < INT8_MIN ? INT8_MIN : v > INT8_MAX ? INT8_MAX : (int8_t)v;
        }
        return 0;
    }
    if (dst_dtype == MXOP_I64 && (src_dtype == MXOP_I32 || src_dtype == MXOP_U8 ||
                                  src_dtype == MXOP_I8 || src_dtype == MXOP_BOOL)) {
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] = (int64_t)get(src_dtype, src, i);
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        set(dst_dtype, dst, i, get(src_dtype, src, i));
    return 0;
}
