/*
 * tests/plugins/opkit_cpp.cpp - C++ exceptions must never reach the worker.
 *
 *   cpp_throw    1 input, 1 output; attribute kind (string):
 *                  "error"    throws mxop::Error(MXOP_ESHAPE, "shape says no")
 *                  "std"      throws std::runtime_error("runtime says no")
 *                  "int"      throws 42
 *                  "view"     makes a View<int32_t> of an f32 input
 *                  otherwise  copies x to y
 */
#include <cstring>
#include <stdexcept>

#include "mxop/op.hpp"

MXOP_PLUGIN("opkit_cpp", "1.0");

MXOP_PLUGIN_INIT(ctx, host)
{
    return mxop::OpDef("cpp_throw")
        .attr("kind", MXOP_ATTR_STRING, "none", "what to throw")
        .forward([](mxop::Ctx &c, mxop::Inputs in, mxop::Outputs out) {
            std::string kind = c.attr_string("kind");
            if (kind == "error")
                throw mxop::Error(MXOP_ESHAPE, "shape says no");
            if (kind == "std")
                throw std::runtime_error("runtime says no");
            if (kind == "int")
                throw 42;
            if (kind == "view")
                mxop::View<int32_t> v(in[0], "x");
            std::memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
        })
        .add(ctx, host);
}
