/*
 * tests/plugins/mx_nohost.cc - a version-11 MXNet extension library whose
 * initialize() refuses every host: the load fails with what the library
 * said for each version mxop announced.
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
    {"nohost_identity", parse, nullptr, nullptr, nullptr, nullptr, forward, nullptr, nullptr, 0,
     0},
};

static const fx::Op *fx_ops(int *n)
{
    *n = 1;
    return ops;
}

static int fx_init(int version)
{
    return fx::error("mx_nohost runs on no MXNet, not even " + std::to_string(version));
}
