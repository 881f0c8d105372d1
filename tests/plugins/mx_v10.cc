/*
 * tests/plugins/mx_v10.cc - an MXNet extension library built for lib_api
 * version 10 (MXNet 1.8): mxop must refuse it by name, running none of its ops.
 */
#define FX_LIB_VERSION 10
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
    {"old_identity", parse, nullptr, nullptr, nullptr, nullptr, forward, nullptr, nullptr, 0, 0},
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
