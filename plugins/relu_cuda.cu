/*
 * plugins/relu_cuda.cu - the GPU example: ops with CUDA kernels, a cuBLAS
 * product through the host table, and device random numbers.
 *
 *     relu_cuda     y = max(x, 0); backward dx = dy * (x > 0)     f32, f64
 *     matmul_cuda   C = A B (A: [m, k], B: [k, n]); backward dA, dB  f32, f64
 *     dropout_cuda  y = x * keep / (1 - p), keep drawn per element   f32
 *                   from the call's seed (attribute p, default 0.5)
 *
 * Every op has a host forward too, computing the same thing, so a call
 * with host tensors works and gives the reference the GPU is compared
 * with (dropout draws the same mask on both from the same seed).
 *
 * The kernels are launched on host->cuda_stream(ctx), the worker's stream
 * of the call's device; the worker synchronises it before answering, so
 * a callback only checks that its launch was accepted.
 *
 * Build (the Makefile does this when it finds CUDA):
 *     nvcc -shared -Xcompiler -fPIC -cudart shared -Iinclude relu_cuda.cu -o relu_cuda.so
 */
#include <cuda_runtime.h>

#include "mxop/op.h"

MXOP_PLUGIN("relu_cuda", "1.0");

static const mxop_host_t *host;

#define THREADS 256

static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return b > 65535u * 32u ? 65535u * 32u : (unsigned)(b > 0 ? b : 1);
}

/* The launch went wrong (bad configuration, no kernel image for this GPU). */
static int launch_error(mxop_ctx_t *ctx, const char *op)
{
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess)
        return 0;
    return host->set_error(ctx, MXOP_ECUDA, "%s: kernel launch failed: %s (%s)", op,
                           cudaGetErrorName(err), cudaGetErrorString(err));
}

static int float_types(mxop_ctx_t *ctx, const char *op, int n_in, const int32_t *in, int n_out,
                       int32_t *out, int f32_only)
{
    for (int i = 0; i < n_in; i++) {
        if (in[i] != MXOP_F32 && (f32_only || in[i] != MXOP_F64))
            return host->set_error(ctx, MXOP_EDTYPE, "%s: input %d has dtype %d; %s", op, i,
                                   in[i], f32_only ? "only f32 is supported"
                                                   : "only f32 and f64 are supported");
        if (in[i] != in[0])
            return host->set_error(ctx, MXOP_EDTYPE, "%s: inputs 0 and %d differ in dtype", op, i);
    }
    for (int i = 0; i < n_out; i++)
        out[i] = in[0];
    return 0;
}

/* ------------------------------------------------------------------------ */
/* relu */

template <typename T>
__global__ void relu_fwd_kernel(const T *x, T *y, size_t n, int add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        T v = x[i] > T(0) ? x[i] : T(0);
        y[i] = add ? y[i] + v : v;
    }
}

template <typename T>
__global__ void relu_bwd_kernel(const T *dy, const T *x, T *dx, size_t n, int add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        T g = x[i] > T(0) ? dy[i] : T(0);
        dx[i] = add ? dx[i] + g : g;
    }
}

template <typename T> static void relu_fwd_host(const T *x, T *y, size_t n, int add)
{
    for (size_t i = 0; i < n; i++) {
        T v = x[i] > T(0) ? x[i] : T(0);
        y[i] = add ? y[i] + v : v;
    }
}

template <typename T> static void relu_bwd_host(const T *dy, const T *x, T *dx, size_t n, int add)
{
    for (size_t i = 0; i < n; i++) {
        T g = x[i] > T(0) ? dy[i] : T(0);
        dx[i] = add ? dx[i] + g : g;
    }
}

static int relu_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    return float_types(ctx, "relu_cuda", n_in, in, n_out, out, 0);
}

static int relu_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    const mxop_tensor_t *x = &in[0];
    mxop_tensor_t *y = &out[0];
    if (y->req == MXOP_REQ_NULL)
        return 0;
    int add = y->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        relu_fwd_host((const float *)x->data, (float *)y->data, x->size, add);
    else
        relu_fwd_host((const double *)x->data, (double *)y->data, x->size, add);
    return 0;
}

static int relu_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    const mxop_tensor_t *dy = &in[0], *x = &in[1];
    mxop_tensor_t *dx = &out[0];
    if (dx->req == MXOP_REQ_NULL)
        return 0;
    int add = dx->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        relu_bwd_host((const float *)dy->data, (const float *)x->data, (float *)dx->data, x->size,
                      add);
    else
        relu_bwd_host((const double *)dy->data, (const double *)x->data, (double *)dx->data,
                      x->size, add);
    return 0;
}

static int relu_forward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    const mxop_tensor_t *x = &in[0];
    mxop_tensor_t *y = &out[0];
    if (y->req == MXOP_REQ_NULL || x->size == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)host->cuda_stream(ctx);
    int add = y->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        relu_fwd_kernel<float><<<blocks_for(x->size), THREADS, 0, s>>>(
            (const float *)x->data, (float *)y->data, x->size, add);
    else
        relu_fwd_kernel<double><<<blocks_for(x->size), THREADS, 0, s>>>(
            (const double *)x->data, (double *)y->data, x->size, add);
    return launch_error(ctx, "relu_cuda forward");
}

static int relu_backward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    const mxop_tensor_t *dy = &in[0], *x = &in[1];
    mxop_tensor_t *dx = &out[0];
    if (dx->req == MXOP_REQ_NULL || x->size == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)host->cuda_stream(ctx);
    int add = dx->req == MXOP_REQ_ADD;
    if (x->dtype == MXOP_F32)
        relu_bwd_kernel<float><<<blocks_for(x->size), THREADS, 0, s>>>(
            (const float *)dy->data, (const float *)x->data, (float *)dx->data, x->size, add);
    else
        relu_bwd_kernel<double><<<blocks_for(x->size), THREADS, 0, s>>>(
            (const double *)dy->data, (const double *)x->data, (double *)dx->data, x->size, add);
    return launch_error(ctx, "relu_cuda backward");
}

/* ------------------------------------------------------------------------ */
/* matmul: the host's gemm on host tensors, its gpu_gemm (cuBLAS) on device ones */

typedef int (*gemm_fn)(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m,
                       int64_t n, int64_t k, double alpha, const void *a, int64_t lda,
                       const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

static int matmul_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    return float_types(ctx, "matmul_cuda", n_in, in, n_out, out, 0);
}

static int matmul_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                        mxop_shape_t *out)
{
    if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dims[1] != in[1].dims[0])
        return host->set_error(ctx, MXOP_ESHAPE,
                               "matmul_cuda: A must be [m, k] and B [k, n] (A has %d dimensions, "
                               "B %d)",
                               in[0].ndim, in[1].ndim);
    out[0].ndim = 2;
    out[0].dims[0] = in[0].dims[0];
    out[0].dims[1] = in[1].dims[1];
    return 0;
}

static double beta_of(int32_t req)
{
    return req == MXOP_REQ_ADD ? 1.0 : 0.0;
}

/*
 * A leading dimension as BLAS wants it: at least 1, also for an empty
 * matrix (k = 0 or n = 0), which gemm otherwise refuses (`mxop verify`
 * found it on 3x0 times 0x2).
 */
static int64_t ld(int64_t cols)
{
    return cols > 0 ? cols : 1;
}

static int matmul_fwd(mxop_ctx_t *ctx, const mxop_tensor_t *in, mxop_tensor_t *out, gemm_fn gemm)
{
    const mxop_tensor_t *a = &in[0], *b = &in[1];
    mxop_tensor_t *c = &out[0];
    if (c->req == MXOP_REQ_NULL)
        return 0;
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    return gemm(ctx, a->dtype, 0, 0, m, n, k, 1.0, a->data, ld(k), b->data, ld(n), beta_of(c->req),
                c->data, ld(n));
}

/* in = [dC, A, B, C]; out = [dA, dB]: dA = dC B^T, dB = A^T dC. */
static int matmul_bwd(mxop_ctx_t *ctx, const mxop_tensor_t *in, mxop_tensor_t *out, gemm_fn gemm)
{
    const mxop_tensor_t *dc = &in[0], *a = &in[1], *b = &in[2];
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    int rc = 0;
    if (out[0].req != MXOP_REQ_NULL)
        rc = gemm(ctx, a->dtype, 0, 1, m, k, n, 1.0, dc->data, ld(n), b->data, ld(n),
                  beta_of(out[0].req), out[0].data, ld(k));
    if (rc == 0 && out[1].req != MXOP_REQ_NULL)
        rc = gemm(ctx, a->dtype, 1, 0, k, n, m, 1.0, a->data, ld(k), dc->data, ld(n),
                  beta_of(out[1].req), out[1].data, ld(n));
    return rc;
}

static int matmul_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    return matmul_fwd(ctx, in, out, host->gemm);
}

static int matmul_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    return matmul_bwd(ctx, in, out, host->gemm);
}

static int matmul_forward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                              mxop_tensor_t *out)
{
    return matmul_fwd(ctx, in, out, host->gpu_gemm);
}

static int matmul_backward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    return matmul_bwd(ctx, in, out, host->gpu_gemm);
}

/* ------------------------------------------------------------------------ */
/* dropout: one counter-based draw per element, the same on host and device */

/* A 64-bit mix (splitmix64's finaliser) of (seed, i): a uniform in [0, 1). */
__host__ __device__ static inline float uniform_at(unsigned long long seed, size_t i)
{
    unsigned long long z = seed + 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void dropout_kernel(const float *x, float *y, size_t n, unsigned long long seed, float p,
                               int add)
{
    float scale = 1.0f / (1.0f - p);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = uniform_at(seed, i) < p ? 0.0f : x[i] * scale;
        y[i] = add ? y[i] + v : v;
    }
}

static int dropout_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    return float_types(ctx, "dropout_cuda", n_in, in, n_out, out, 1);
}

static int dropout_attrs(mxop_ctx_t *ctx)
{
    double p;
    int rc = host->attr_float(ctx, "p", 0.5, &p);
    if (rc != 0)
        return rc;
    if (!(p >= 0.0 && p < 1.0))
        return host->set_error(ctx, MXOP_EATTR, "dropout_cuda: p = %g must be in [0, 1)", p);
    return 0;
}

static int dropout_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    double p;
    host->attr_float(ctx, "p", 0.5, &p);
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    if (out[0].req == MXOP_REQ_NULL)
        return 0;
    unsigned long long seed = host->rng_seed(ctx);
    float scale = 1.0f / (1.0f - (float)p);
    for (size_t i = 0; i < in[0].size; i++) {
        float v = uniform_at(seed, i) < (float)p ? 0.0f : x[i] * scale;
        y[i] = out[0].req == MXOP_REQ_ADD ? y[i] + v : v;
    }
    return 0;
}

static int dropout_forward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    double p;
    host->attr_float(ctx, "p", 0.5, &p);
    if (out[0].req == MXOP_REQ_NULL || in[0].size == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)host->cuda_stream(ctx);
    dropout_kernel<<<blocks_for(in[0].size), THREADS, 0, s>>>(
        (const float *)in[0].data, (float *)out[0].data, in[0].size, host->rng_seed(ctx),
        (float)p, out[0].req == MXOP_REQ_ADD);
    return launch_error(ctx, "dropout_cuda forward");
}

/* ------------------------------------------------------------------------ */

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    /* A worker older than the GPU members cannot run these ops. */
    if (h->struct_size < offsetof(mxop_host_t, rng_seed) + sizeof(h->rng_seed))
        return h->set_error(ctx, MXOP_EABI, "relu_cuda needs a worker with GPU support");

    mxop_op_def_t relu = {};
    relu.struct_size = sizeof(mxop_op_def_t);
    relu.name = "relu_cuda";
    relu.description = "y = max(x, 0) with CUDA kernels; f32 and f64";
    relu.num_inputs = 1;
    relu.num_outputs = 1;
    relu.infer_type = relu_type;
    relu.forward = relu_forward;
    relu.backward = relu_backward;
    relu.forward_gpu = relu_forward_gpu;
    relu.backward_gpu = relu_backward_gpu;
    int rc = h->register_op(ctx, &relu);
    if (rc != 0)
        return rc;

    mxop_op_def_t mm = {};
    mm.struct_size = sizeof(mxop_op_def_t);
    mm.name = "matmul_cuda";
    mm.description = "C = A B; host gemm on host tensors, cuBLAS on device tensors";
    mm.num_inputs = 2;
    mm.num_outputs = 1;
    mm.infer_type = matmul_type;
    mm.infer_shape = matmul_shape;
    mm.forward = matmul_forward;
    mm.backward = matmul_backward;
    mm.forward_gpu = matmul_forward_gpu;
    mm.backward_gpu = matmul_backward_gpu;
    if ((rc = h->register_op(ctx, &mm)) != 0)
        return rc;

    mxop_op_def_t dr = {};
    dr.struct_size = sizeof(mxop_op_def_t);
    dr.name = "dropout_cuda";
    dr.description = "y = x * keep / (1 - p), keep ~ Bernoulli(1 - p) from the call's seed; f32";
    dr.num_inputs = 1;
    dr.num_outputs = 1;
    dr.check_attrs = dropout_attrs;
    dr.infer_type = dropout_type;
    dr.forward = dropout_forward;
    dr.forward_gpu = dropout_forward_gpu;
    return h->register_op(ctx, &dr);
}
