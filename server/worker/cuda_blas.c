/*
 * server/worker/cuda_blas.c - the host table's gpu_gemm, through cuBLAS.
 *
 * cuBLAS is loaded with dlopen at the first gpu_gemm (see cuda.c for why
 * nothing CUDA is linked), and one handle is made per device, bound to the
 * worker's stream of that device at every call.  gemm here is row-major
 * like the host's: cuBLAS is column-major, and a row-major C = op(A) op(B)
 * is the column-major C^T = op(B)^T op(A)^T, so the operands swap places
 * and no data moves.
 */
#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "common/util.h"
#include "server/worker/cuda.h"
#include "server/worker/worker.h"

#define MAX_DEVICES 64
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1

#define ERR(ctx, code, ...) mxop__host.set_error((ctx), (code), __VA_ARGS__)

typedef int (*sgemm_fn)(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                        const float *a, int lda, const float *b, int ldb, const float *beta,
                        float *c, int ldc);
typedef int (*dgemm_fn)(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                        const double *a, int lda, const double *b, int ldb, const double *beta,
                        double *c, int ldc);

static struct {
    int state; /* 0: not tried, 1: loaded, < 0: failed */
    char msg[512];
    int (*create)(void **h);
    int (*destroy)(void *h);
    int (*set_stream)(void *h, void *stream);
    const char *(*status_name)(int st);
    sgemm_fn sgemm;
    dgemm_fn dgemm;
} blas;

static void *handles[MAX_DEVICES];

static void *open_cublas(char *why, size_t whylen)
{
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                        "libcublas.so"};
    return mxop__cuda_dlopen(names, sizeof(names) / sizeof(names[0]), why, whylen);
}

static int load_blas(void)
{
    char why[400];
    void *h = open_cublas(why, sizeof(why));
    if (h == NULL) {
        mxop__fmt(blas.msg, sizeof(blas.msg), "gpu_gemm: cuBLAS cannot be loaded (%s)", why);
        return MXOP_ENOT_SUPPORTED;
    }
    static const struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cublasCreate_v2", (void **)&blas.create},
        {"cublasDestroy_v2", (void **)&blas.destroy},
        {"cublasSetStream_v2", (void **)&blas.set_stream},
        {"cublasSgemm_v2", (void **)&blas.sgemm},
        {"cublasDgemm_v2", (void **)&blas.dgemm},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(h, syms[i].name);
        if (f == NULL) {
            mxop__fmt(blas.msg, sizeof(blas.msg), "gpu_gemm: the cuBLAS that was loaded lacks %s",
                      syms[i].name);
            return MXOP_ENOT_SUPPORTED;
        }
        memcpy(syms[i].slot, &f, sizeof(f));
    }
    void *f = dlsym(h, "cublasGetStatusName"); /* newer cuBLAS only: optional */
    memcpy(&blas.status_name, &f, sizeof(f));
    return 0;
}

static const char *status_str(int st, char *buf, size_t len)
{
    const char *n = blas.status_name != NULL ? blas.status_name(st) : NULL;
    if (n != NULL)
        mxop__fmt(buf, len, "%s", n);
    else
        mxop__fmt(buf, len, "cuBLAS status %d", st);
    return buf;
}

/* Run by cuda.c at exit, before the streams the handles are bound to go. */
static void free_handles(void)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (handles[i] != NULL && blas.destroy != NULL)
            blas.destroy(handles[i]);
        handles[i] = NULL;
    }
}

static int check_ld(mxop_ctx_t *ctx, const char *what, int64_t ld, int64_t cols)
{
    int64_t need = cols > 1 ? cols : 1;
    if (ld < need || ld > INT_MAX)
        return ERR(ctx, MXOP_EINVAL, "gpu_gemm: %s = %lld, needs to be in [%lld, %d]", what,
                   (long long)ld, (long long)need, INT_MAX);
    return 0;
}

int mxop__cuda_host_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, double alpha, const void *a, int64_t lda,
                         const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    char nb[32], sb[96];
    int32_t dev = mxop__cuda_call_device();
    if (dev < 0)
        return ERR(ctx, MXOP_ENO_DEVICE, "gpu_gemm: this is not a GPU call (no device tensors)");
    if (dtype != MXOP_F32 && dtype != MXOP_F64)
        return ERR(ctx, MXOP_EDTYPE, "gpu_gemm: dtype %s is not supported (only f32 and f64)",
                   mxop__dtype_name(dtype, nb, sizeof(nb)));
    if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return ERR(ctx, MXOP_EINVAL, "gpu_gemm: m, n, k = %lld, %lld, %lld must be in [0, %d]",
                   (long long)m, (long long)n, (long long)k, INT_MAX);
    int rc;
    /* Row-major: A is m x k (k x m transposed), B is k x n (n x k), C is m x n. */
    if ((rc = check_ld(ctx, "lda", lda, trans_a ? m : k)) != 0 ||
        (rc = check_ld(ctx, "ldb", ldb, trans_b ? k : n)) != 0 ||
        (rc = check_ld(ctx, "ldc", ldc, n)) != 0)
        return rc;
    if (m == 0 || n == 0)
        return 0;
    if ((k > 0 && (a == NULL || b == NULL)) || c == NULL)
        return ERR(ctx, MXOP_EINVAL, "gpu_gemm: %s is NULL",
                   c == NULL   ? "c"
                   : a == NULL ? "a"
                               : "b");

    if (blas.state == 0) {
        blas.state = load_blas() == 0 ? 1 : -1;
        if (blas.state == 1)
            mxop__cuda_before_cleanup(free_handles);
    }
    if (blas.state < 0)
        return ERR(ctx, MXOP_ENOT_SUPPORTED, "%s", blas.msg);
    if (handles[dev] == NULL) {
        int st = blas.create(&handles[dev]);
        if (st != 0) {
            handles[dev] = NULL;
            return ERR(ctx, MXOP_ECUDA, "gpu_gemm: cublasCreate on device %d returned %s", dev,
                       status_str(st, sb, sizeof(sb)));
        }
    }
    int st = blas.set_stream(handles[dev], mxop__cuda_call_stream());
    if (st != 0)
        return ERR(ctx, MXOP_ECUDA, "gpu_gemm: cublasSetStream returned %s",
                   status_str(st, sb, sizeof(sb)));
    int ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (dtype == MXOP_F32) {
        float fa = (float)alpha, fb = (float)beta;
        st = blas.sgemm(handles[dev], tb, ta, (int)n, (int)m, (int)k, &fa, b, (int)ldb, a, (int)lda,
                        &fb, c, (int)ldc);
    } else {
        st = blas.dgemm(handles[dev], tb, ta, (int)n, (int)m, (int)k, &alpha, b, (int)ldb, a,
                        (int)lda, &beta, c, (int)ldc);
    }
    if (st != 0)
        return ERR(ctx, MXOP_ECUDA, "gpu_gemm: cublas%cgemm returned %s",
                   dtype == MXOP_F32 ? 'S' : 'D', status_str(st, sb, sizeof(sb)));
    return 0;
}
