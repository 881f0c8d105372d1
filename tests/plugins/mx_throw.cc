/*
 * tests/plugins/mx_throw.cc - a version-11 MXNet extension library whose
 * ops do what makes MXNet abort the whole process: throw_forward throws a
 * C++ exception out of its forward; throw_arity reads an input it does not
 * have with std::vector::at (std::out_of_range, as lib_api ops do on wrong
 * arity); null_write writes through a NULL the library did not check.
 * Under mxop each ends only the worker.
 */
#include <stdexcept>

#include "mx_abi.h"

static int one_one(const fx::Attrs &, int *nin, int *nout)
{
    *nin = *nout = 1;
    return fx::OK;
}

static int same_type(const fx::Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    out[0] = in.at(0);
    return fx::OK;
}

static int same_shape(const fx::Attrs &, const fx::Shapes &in, fx::Shapes &out)
{
    out[0] = in.at(0);
    return fx::OK;
}

static int throw_forward(const fx::Attrs &, std::vector<fx::Tensor> &, std::vector<fx::Tensor> &,
                         const fx::Res &)
{
    throw std::runtime_error("throw_forward: unsupported dtype");
}

static int arity_forward(const fx::Attrs &, std::vector<fx::Tensor> &in,
                         std::vector<fx::Tensor> &out, const fx::Res &)
{
    /* Input 1 does not exist: at() throws std::out_of_range. */
    memcpy(out.at(0).data, in.at(1).data, 4);
    return fx::OK;
}

/*
 * Asks the GPU allocator for memory in a CPU call (it answers NULL there)
 * and writes through what it got without checking: a NULL dereference.
 */
static int null_forward(const fx::Attrs &, std::vector<fx::Tensor> &, std::vector<fx::Tensor> &,
                        const fx::Res &res)
{
    volatile float *p = static_cast<float *>(res.alloc_gpu(64));
    p[0] = 1.0f;
    return fx::OK;
}

static const fx::Op ops[] = {
    {"throw_forward", one_one, same_type, nullptr, same_shape, nullptr, throw_forward, nullptr,
     nullptr, 0, 0},
    {"throw_arity", one_one, same_type, nullptr, same_shape, nullptr, arity_forward, nullptr,
     nullptr, 0, 0},
    {"null_write", one_one, same_type, nullptr, same_shape, nullptr, null_forward, nullptr,
     nullptr, 0, 0},
};

static const fx::Op *fx_ops(int *n)
{
    *n = 3;
    return ops;
}

static int fx_init(int)
{
    return fx::OK;
}
