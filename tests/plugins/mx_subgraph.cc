/*
 * tests/plugins/mx_subgraph.cc - a version-11 MXNet extension library with
 * a subgraph op (isSubgraphOp, as MXNet's _custom_subgraph_op): mxop runs
 * ops only, and refuses the library naming the op.
 */
#include "mx_abi.h"

static int parse(const fx::Attrs &, int *nin, int *nout)
{
    *nin = *nout = 1;
    return fx::OK;
}

static int forward(const fx::Attrs &, std::vector<fx::Tensor> &, std::vector<fx::Tensor> &,
                   const fx::Res &)
{
    return fx::OK;
}

static const fx::Op ops[] = {
    {"_custom_subgraph_op", parse, nullptr, nullptr, nullptr, nullptr, forward, nullptr, nullptr,
     1, 0},
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
