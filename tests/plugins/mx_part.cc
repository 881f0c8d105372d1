/*
 * tests/plugins/mx_part.cc - a version-11 MXNet extension library that
 * registers a graph partitioner and a graph pass besides an op: mxop runs
 * ops only and must refuse the library, naming what it does not support.
 */
#define FX_PARTITIONERS 1
#define FX_PASSES 1
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
    {"part_identity", parse, nullptr, nullptr, nullptr, nullptr, forward, nullptr, nullptr, 0, 0},
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
