/*
 * bench/torch/relu_op.cpp - relu as an in-process C++ custom op of torch's
 * dispatcher (TORCH_LIBRARY), the yardstick of `python -m mxop.bench
 * --torch-call`: what a call of torch.ops.mxop.relu costs against a custom
 * op that runs in the engine's own process, compiled against the same torch.
 *
 *     torch.ops.load_library("build/bench/torch_relu_op.so")
 *     torch.ops.mxop_bench.relu(x)
 *
 * Built by the Makefile (`make python`) against the interpreter's torch.
 */
#include <ATen/ATen.h>
#include <torch/library.h>

namespace
{

at::Tensor relu(const at::Tensor &x)
{
    return at::relu(x);
}

} // namespace

TORCH_LIBRARY(mxop_bench, m)
{
    m.def("relu(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(mxop_bench, CPU, m)
{
    m.impl("relu", relu);
}
