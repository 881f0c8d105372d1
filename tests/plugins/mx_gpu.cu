/*
 * tests/plugins/mx_gpu.cu - a version-11 MXNet extension library with a GPU
 * op, as MXNet's relu example has them: gpu_scale (y = 2 x, f32) is
 * registered for context "gpu" only; its forward takes a temporary from
 * the ABI's GPU allocator and launches on the ABI's CUDA stream; its
 * backward (dx = 2 dy) too.  Built with nvcc where the CUDA toolkit is.
 */
#include <cuda_runtime.h>

#include "mx_abi.h"

__global__ void scale2(const float *x, float *y, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = 2.0f * x[i];
}

static int parse(const fx::Attrs &, int *nin, int *nout)
{
    *nin = *nout = 1;
    return fx::OK;
}

static int f32_type(const fx::Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    if (in.at(0) != fx::F32)
        return fx::error("gpu_scale: input 0 must be float32");
    out[0] = fx::F32;
    return fx::OK;
}

static int same_shape(const fx::Attrs &, const fx::Shapes &in, fx::Shapes &out)
{
    out[0] = in.at(0);
    return fx::OK;
}

/* y = 2 x through a temporary from alloc_gpu, on the call's stream. */
static int scale(const fx::Attrs &, std::vector<fx::Tensor> &in, std::vector<fx::Tensor> &out,
                 const fx::Res &res)
{
    size_t n = in.at(0).size();
    cudaStream_t s = static_cast<cudaStream_t>(res.stream);
    float *tmp = static_cast<float *>(res.alloc_gpu((int)(n * sizeof(float) + 1)));
    if (tmp == nullptr)
        return fx::error("gpu_scale: the GPU allocator gave nothing");
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (n > 0)
        scale2<<<blocks ? blocks : 1, 256, 0, s>>>(in[0].ptr<float>(), tmp, n);
    cudaMemcpyAsync(out.at(0).data, tmp, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return fx::error(std::string("gpu_scale: ") + cudaGetErrorString(e));
    return fx::OK;
}

static const fx::Op ops[] = {
    {"gpu_scale", parse, f32_type, nullptr, same_shape, nullptr, scale, scale, nullptr, 0, 1},
};

static const fx::Op *fx_ops(int *n)
{
    *n = 1;
    return ops;
}

static int fx_init(int)
{
    return fx::OK;
}
