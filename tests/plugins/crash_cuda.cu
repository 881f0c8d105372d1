/*
 * tests/plugins/crash_cuda.cu - GPU fixtures: CUDA errors of every kind,
 * the GPU workspace, and an op with only a GPU forward.
 *
 *   cuda_illegal_address   a kernel writes far outside its output: the
 *                          context is lost (cudaErrorIllegalAddress), the
 *                          worker exits with a note and is restarted
 *   cuda_bad_launch        a launch the runtime refuses (2048 threads per
 *                          block); the op reports it: MXOP_ECUDA, its message
 *   cuda_unchecked_launch  the same launch, unchecked: the worker finds the
 *                          error itself after the op returned 0
 *   cuda_workspace         y = x + 1 through three pieces of gpu_workspace,
 *                          one larger than any before, and checks that the
 *                          stream and seed are there
 *   cuda_gpu_only          y = x on the GPU
 *
 * All take one f32 input and make one output of its shape, and have only
 * a GPU forward (host tensors answer MXOP_ENOT_SUPPORTED).
 */
#include <cuda_runtime.h>

#include "mxop/op.h"

MXOP_PLUGIN("crash_cuda", "1.0");

static const mxop_host_t *host;

static int f32_only(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    if (in[0] != MXOP_F32)
        return host->set_error(ctx, MXOP_EDTYPE, "crash_cuda ops take f32");
    out[0] = MXOP_F32;
    return 0;
}

__global__ void wild_write(float *y)
{
    /* 1 TiB past the output: no allocation is there. */
    y[(size_t)1 << 38] = 1.0f;
}

__global__ void plus_one(const float *x, float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] + 1.0f;
}

static int illegal_address(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    wild_write<<<1, 1, 0, (cudaStream_t)host->cuda_stream(ctx)>>>((float *)out[0].data);
    return 0;
}

static int bad_launch(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                      mxop_tensor_t *out)
{
    plus_one<<<1, 2048, 0, (cudaStream_t)host->cuda_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, in[0].size);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return host->set_error(ctx, MXOP_ECUDA, "cuda_bad_launch: %s", cudaGetErrorName(err));
    return 0;
}

static int unchecked_launch(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    plus_one<<<1, 2048, 0, (cudaStream_t)host->cuda_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, in[0].size);
    return 0;
}

static int workspace(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                     mxop_tensor_t *out)
{
    cudaStream_t s = (cudaStream_t)host->cuda_stream(ctx);
    if (s == NULL)
        return host->set_error(ctx, MXOP_EINTERNAL, "cuda_workspace: no stream in a GPU call");
    size_t bytes = in[0].size * sizeof(float);
    float *a = (float *)host->gpu_workspace(ctx, bytes);
    float *b = (float *)host->gpu_workspace(ctx, 1000);
    float *c = (float *)host->gpu_workspace(ctx, bytes + ((size_t)1 << 20));
    if (a == NULL || b == NULL || c == NULL)
        return host->set_error(ctx, MXOP_ENOMEM, "cuda_workspace: gpu_workspace gave NULL");
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 256 != 0)
        return host->set_error(ctx, MXOP_EINTERNAL, "cuda_workspace: unaligned workspace");
    cudaMemcpyAsync(a, in[0].data, bytes, cudaMemcpyDeviceToDevice, s);
    unsigned blocks = (unsigned)((in[0].size + 255) / 256);
    plus_one<<<blocks ? blocks : 1, 256, 0, s>>>(a, c, in[0].size);
    cudaMemcpyAsync(out[0].data, c, bytes, cudaMemcpyDeviceToDevice, s);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return host->set_error(ctx, MXOP_ECUDA, "cuda_workspace: %s", cudaGetErrorName(err));
    return 0;
}

static int gpu_only(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                    mxop_tensor_t *out)
{
    cudaMemcpyAsync(out[0].data, in[0].data, in[0].size * sizeof(float), cudaMemcpyDeviceToDevice,
                    (cudaStream_t)host->cuda_stream(ctx));
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {
        {"cuda_illegal_address", illegal_address}, {"cuda_bad_launch", bad_launch},
        {"cuda_unchecked_launch", unchecked_launch}, {"cuda_workspace", workspace},
        {"cuda_gpu_only", gpu_only},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t d = {};
        d.struct_size = sizeof(mxop_op_def_t);
        d.name = ops[i].name;
        d.num_inputs = 1;
        d.num_outputs = 1;
        d.infer_type = f32_only;
        d.forward_gpu = ops[i].fn;
        int rc = h->register_op(ctx, &d);
        if (rc != 0)
            return rc;
    }
    return 0;
}
