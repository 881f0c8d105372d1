/*
 * plugins/leaky_relu.cpp - the C++ example (mxop/op.hpp): two ops.
 *
 *   leaky_relu   y = x > 0 ? x : alpha * x, with backward; a class, its
 *                attribute `alpha` declared (float, default 0.01).
 *   clamp        y = min(max(x, lo), hi); a lambda, attributes lo and hi
 *                (floats, required).  lo > hi throws mxop::Error, which
 *                reaches the caller as MXOP_EATTR with its message.
 *
 * f32 and f64; any other dtype throws MXOP_EDTYPE from mxop::View.
 */
#include <algorithm>

#include "mxop/op.hpp"

MXOP_PLUGIN("leaky_relu", "1.0");

namespace {

class LeakyRelu {
public:
    void forward(mxop::Ctx &ctx, mxop::Inputs in, mxop::Outputs out)
    {
        double alpha = ctx.attr_float("alpha");
        if (in[0].dtype == MXOP_F64)
            run<double>(in[0], out[0], alpha);
        else
            run<float>(in[0], out[0], alpha);
    }

    /* in = [dy, x, y], out = [dx]. */
    void backward(mxop::Ctx &ctx, mxop::Inputs in, mxop::Outputs out)
    {
        double alpha = ctx.attr_float("alpha");
        if (in[1].dtype == MXOP_F64)
            grad<double>(in[0], in[1], out[0], alpha);
        else
            grad<float>(in[0], in[1], out[0], alpha);
    }

private:
    template <typename T> static void run(const mxop_tensor_t &xt, mxop_tensor_t &yt, double a)
    {
        mxop::View<const T> x(xt, "x");
        mxop::View<T> y(yt, "y");
        const T alpha = static_cast<T>(a);
        /* A branch-free loop body, so that -O3 vectorises it. */
        for (size_t i = 0; i < x.size(); i++)
            y[i] = x[i] > 0 ? x[i] : alpha * x[i];
    }

    template <typename T>
    static void grad(const mxop_tensor_t &dyt, const mxop_tensor_t &xt, mxop_tensor_t &dxt, double a)
    {
        mxop::View<const T> dy(dyt, "dy"), x(xt, "x");
        mxop::View<T> dx(dxt, "dx");
        const T alpha = static_cast<T>(a);
        const bool add = dxt.req == MXOP_REQ_ADD;
        if (dxt.req == MXOP_REQ_NULL)
            return;
        for (size_t i = 0; i < x.size(); i++) {
            T g = x[i] > 0 ? dy[i] : alpha * dy[i];
            dx[i] = add ? dx[i] + g : g;
        }
    }
};

template <typename T> void clamp_run(const mxop_tensor_t &xt, mxop_tensor_t &yt, double lo, double hi)
{
    mxop::View<const T> x(xt, "x");
    mxop::View<T> y(yt, "y");
    for (size_t i = 0; i < x.size(); i++)
        y[i] = std::min(std::max(x[i], static_cast<T>(lo)), static_cast<T>(hi));
}

} // namespace

MXOP_PLUGIN_INIT(ctx, host)
{
    int rc = mxop::OpDef("leaky_relu")
                 .description("y = x > 0 ? x : alpha * x; f32 and f64")
                 .attr("alpha", MXOP_ATTR_FLOAT, "0.01", "slope for x <= 0")
                 .from<LeakyRelu>()
                 .add(ctx, host);
    if (rc != 0)
        return rc;
    return mxop::OpDef("clamp")
        .description("y = min(max(x, lo), hi); f32 and f64")
        .attr("lo", MXOP_ATTR_FLOAT, nullptr, "lower bound", true)
        .attr("hi", MXOP_ATTR_FLOAT, nullptr, "upper bound", true)
        .check_attrs([](mxop::Ctx &c) {
            if (c.attr_float("lo") > c.attr_float("hi"))
                throw mxop::Error(MXOP_EATTR, "clamp: lo is greater than hi");
        })
        .forward([](mxop::Ctx &c, mxop::Inputs in, mxop::Outputs out) {
            double lo = c.attr_float("lo"), hi = c.attr_float("hi");
            if (in[0].dtype == MXOP_F64)
                clamp_run<double>(in[0], out[0], lo, hi);
            else
                clamp_run<float>(in[0], out[0], lo, hi);
        })
        .add(ctx, host);
}
