/*
 * tests/plugins/mx_newhost.cc - a version-11 MXNet extension library whose
 * initialize() refuses hosts older than MXNet 2.0 (as the example
 * libraries of MXNet's master branch do): mxop announces 2.0 after 1.9.1
 * is refused, and the library loads.  Its op answers the version its
 * initialize() accepted.
 */
#include "mx_abi.h"

static int accepted;

static int parse(const fx::Attrs &, int *nin, int *nout)
{
    *nin = 0;
    *nout = 1;
    return fx::OK;
}

static int type(const fx::Attrs &, std::vector<int> &, std::vector<int> &out)
{
    out[0] = fx::I32;
    return fx::OK;
}

static int shape(const fx::Attrs &, const fx::Shapes &, fx::Shapes &out)
{
    out[0] = {1};
    return fx::OK;
}

static int forward(const fx::Attrs &, std::vector<fx::Tensor> &, std::vector<fx::Tensor> &out,
                   const fx::Res &)
{
    out.at(0).ptr<int32_t>()[0] = accepted;
    return fx::OK;
}

static const fx::Op ops[] = {
    {"newhost_version", parse, type, nullptr, shape, nullptr, forward, nullptr, nullptr, 0, 0},
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
    accepted = version;
    return fx::OK;
}
