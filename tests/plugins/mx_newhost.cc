/*
 * tests/plugins/mx_newhost.cc - a version-11 MXNet extension library whose
 * initialize() refuses the host (it wants MXNet 2.0): the load fails with
 * the library's own message.
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
    {"newhost_identity", parse, nullptr, nullptr, nullptr, nullptr, forward, nullptr, nullptr, 0,
     0},
};

static const fx::Op *fx_ops(int *n)
{
    *n = 1;
    return ops;
}

static int fx_init(int version)
{
    if (version < 20000)
        return fx::error("mx_newhost needs MXNet 2.0 or newer, the host is " +
                         std::to_string(version));
    return fx::OK;
}
