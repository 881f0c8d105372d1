/*
 * tests/plugins/mx_sparse.cc - a version-11 MXNet extension library with a
 * sparse op (its output is CSR, like MXNet's transposecsr example) and a
 * dense one.  The library loads; the sparse op is refused at its first
 * call with a message naming the storage type, the dense op runs.
 * csr_only's InferSType refuses dense inputs with a message of its own (as
 * MXNet's transposecsr example does): mxop's explanation is added to it.
 */
#include "mx_abi.h"

static int parse(const fx::Attrs &, int *nin, int *nout)
{
    *nin = *nout = 1;
    return fx::OK;
}

static int csr_stype(const fx::Attrs &, std::vector<int> &, std::vector<int> &out)
{
    out[0] = fx::CSR;
    return fx::OK;
}

static int csr_in_stype(const fx::Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    if (in.at(0) != fx::CSR)
        return fx::error("Expected storage type is kCSRStorage");
    out[0] = fx::CSR;
    return fx::OK;
}

static int dense_stype(const fx::Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    out[0] = in.at(0);
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

/* Would need the sparse allocator; mxop must never get this far. */
static int csr_forward(const fx::Attrs &, std::vector<fx::Tensor> &, std::vector<fx::Tensor> &,
                       const fx::Res &)
{
    return fx::error("a sparse op ran: it should have been refused");
}

static int negate(const fx::Attrs &, std::vector<fx::Tensor> &in, std::vector<fx::Tensor> &out,
                  const fx::Res &)
{
    const float *x = in.at(0).ptr<float>();
    float *y = out.at(0).ptr<float>();
    for (size_t i = 0; i < in[0].size(); i++)
        y[i] = -x[i];
    return fx::OK;
}

static const fx::Op ops[] = {
    {"sparse_transpose", parse, same_type, csr_stype, same_shape, nullptr, csr_forward, nullptr,
     nullptr, 0, 0},
    {"csr_only", parse, same_type, csr_in_stype, same_shape, nullptr, csr_forward, nullptr,
     nullptr, 0, 0},
    {"dense_negate", parse, same_type, dense_stype, same_shape, nullptr, negate, nullptr, nullptr,
     0, 0},
};

static const fx::Op *fx_ops(int *n)
{
    *n = (int)(sizeof(ops) / sizeof(ops[0]));
    return ops;
}

static int fx_init(int)
{
    return fx::OK;
}
