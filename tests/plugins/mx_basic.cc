/*
 * tests/plugins/mx_basic.cc - an MXNet extension library (lib_api 11) as
 * users write them, for tests/test_mxnet.c and python/tests/test_mxnet.py:
 *
 *   my_gemm       C = alpha * A.B (f32, 2-D); attribute alpha; backward
 *                 through a workspace from the CPU allocator; inference
 *                 that fails with a message for mismatched shapes or dtypes
 *   my_counter    stateful: out = x + start + (number of earlier calls);
 *                 attribute start is required (attrs.at throws without it)
 *   my_states     no inputs: out = [states created, states destroyed]
 *   my_mutate     out = 2 x, and input 1 (a counter) += 1 in place
 *   my_rand       out = x + u, u from the CPU random states: state i gives
 *                 element i % 1024, u = (raw 32-bit draw) / 2^32
 *   my_attrs      no inputs: out (u8) = the attributes as they arrived,
 *                 "k=v;" for each in key order (what the host sent)
 */
#include <stdexcept>
#include <string>

#include "mx_abi.h"

using fx::Attrs;
using fx::Res;
using fx::Shapes;
using fx::Tensor;

static int created, destroyed;

/* ---- my_gemm ---- */

static float alpha_of(const Attrs &a)
{
    auto it = a.find("alpha");
    return it == a.end() ? 1.0f : std::stof(it->second);
}

static int gemm_parse(const Attrs &a, int *nin, int *nout)
{
    *nin = 2;
    *nout = 1;
    if (a.count("alpha")) {
        try {
            (void)std::stof(a.at("alpha"));
        } catch (const std::exception &) {
            return fx::error("my_gemm: attribute alpha='" + a.at("alpha") + "' is not a number");
        }
    }
    return fx::OK;
}

static int gemm_type(const Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    for (size_t i = 0; i < in.size(); i++)
        if (in[i] != fx::F32)
            return fx::error("my_gemm: input " + std::to_string(i) + " must be float32");
    out[0] = fx::F32;
    return fx::OK;
}

static int gemm_shape(const Attrs &, const Shapes &in, Shapes &out)
{
    if (in[0].size() != 2 || in[1].size() != 2)
        return fx::error("my_gemm: inputs must be 2-D matrices");
    if (in[0][1] != in[1][0])
        return fx::error("my_gemm: inner dimensions differ: A is [" + std::to_string(in[0][0]) +
                         "," + std::to_string(in[0][1]) + "], B is [" + std::to_string(in[1][0]) +
                         "," + std::to_string(in[1][1]) + "]");
    out[0] = {in[0][0], in[1][1]};
    return fx::OK;
}

/* c[n,m] = alpha * a[n,k] . b[k,m] with optional transposes. */
static void matmul(const float *a, const float *b, float *c, unsigned n, unsigned k, unsigned m,
                   bool ta, bool tb, float alpha)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < m; j++) {
            float s = 0;
            for (unsigned p = 0; p < k; p++)
                s += (ta ? a[p * n + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * m + j]);
            c[i * m + j] = alpha * s;
        }
}

static int gemm_forward(const Attrs &a, std::vector<Tensor> &in, std::vector<Tensor> &out,
                        const Res &)
{
    unsigned n = (unsigned)in.at(0).shape[0], k = (unsigned)in.at(0).shape[1];
    unsigned m = (unsigned)in.at(1).shape[1];
    matmul(in[0].ptr<float>(), in[1].ptr<float>(), out.at(0).ptr<float>(), n, k, m, false, false,
           alpha_of(a));
    return fx::OK;
}

/* Inputs: dC, A, B, C; outputs: dA, dB.  dA = alpha dC.B^T, dB = alpha A^T.dC. */
static int gemm_backward(const Attrs &a, std::vector<Tensor> &in, std::vector<Tensor> &out,
                         const Res &res)
{
    const float *dc = in.at(0).ptr<float>(), *A = in.at(1).ptr<float>(), *B = in.at(2).ptr<float>();
    unsigned n = (unsigned)in[1].shape[0], k = (unsigned)in[1].shape[1];
    unsigned m = (unsigned)in[2].shape[1];
    float al = alpha_of(a);
    /* dB goes through workspace from the host's allocator, then is copied out. */
    float *tmp = static_cast<float *>(res.alloc_cpu((int)(sizeof(float) * k * m)));
    if (tmp == nullptr)
        return fx::error("my_gemm: the CPU allocator gave nothing");
    matmul(dc, B, out.at(0).ptr<float>(), n, m, k, false, true, al);
    matmul(A, dc, tmp, k, n, m, true, false, al);
    memcpy(out.at(1).ptr<float>(), tmp, sizeof(float) * k * m);
    return fx::OK;
}

/* ---- my_counter (stateful) ---- */

struct Counter : fx::StatefulOp {
    float start;
    int calls = 0;
    explicit Counter(float s) : start(s) { created++; }
    ~Counter() override { destroyed++; }
    int forward(std::vector<Tensor> &in, std::vector<Tensor> &out, const Res &) override
    {
        const float *x = in.at(0).ptr<float>();
        float *y = out.at(0).ptr<float>();
        for (size_t i = 0; i < in[0].size(); i++)
            y[i] = x[i] + start + (float)calls;
        calls++;
        return fx::OK;
    }
    int backward(std::vector<Tensor> &in, std::vector<Tensor> &out, const Res &) override
    {
        /* d(x + c)/dx = 1: the input gradient is the output gradient. */
        memcpy(out.at(0).data, in.at(0).data, in[0].size() * sizeof(float));
        return fx::OK;
    }
};

static int counter_parse(const Attrs &a, int *nin, int *nout)
{
    (void)std::stof(a.at("start")); /* throws std::out_of_range without it, as lib_api ops do */
    *nin = 1;
    *nout = 1;
    return fx::OK;
}

static int same_type(const Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    for (size_t j = 0; j < out.size(); j++)
        out[j] = in.at(0);
    return fx::OK;
}

static int f32_type(const Attrs &a, std::vector<int> &in, std::vector<int> &out)
{
    if (in.at(0) != fx::F32)
        return fx::error("input 0 must be float32");
    return same_type(a, in, out);
}

static int same_shape(const Attrs &, const Shapes &in, Shapes &out)
{
    for (size_t j = 0; j < out.size(); j++)
        out[j] = in.at(0);
    return fx::OK;
}

static int counter_create(const Attrs &a, const Shapes &, const std::vector<int> &,
                          fx::StatefulOp **op)
{
    *op = new Counter(std::stof(a.at("start")));
    return fx::OK;
}

/* ---- my_states ---- */

static int states_parse(const Attrs &, int *nin, int *nout)
{
    *nin = 0;
    *nout = 1;
    return fx::OK;
}

static int states_type(const Attrs &, std::vector<int> &, std::vector<int> &out)
{
    out[0] = fx::I32;
    return fx::OK;
}

static int states_shape(const Attrs &, const Shapes &, Shapes &out)
{
    out[0] = {2};
    return fx::OK;
}

static int states_forward(const Attrs &, std::vector<Tensor> &, std::vector<Tensor> &out,
                          const Res &)
{
    out.at(0).ptr<int32_t>()[0] = created;
    out[0].ptr<int32_t>()[1] = destroyed;
    return fx::OK;
}

/* ---- my_mutate ---- */

static int mutate_parse(const Attrs &, int *nin, int *nout)
{
    *nin = 2;
    *nout = 1;
    return fx::OK;
}

static int mutate_which(const Attrs &, std::vector<int> &idx)
{
    idx.push_back(1);
    return fx::OK;
}

static int mutate_forward(const Attrs &, std::vector<Tensor> &in, std::vector<Tensor> &out,
                          const Res &)
{
    const float *x = in.at(0).ptr<float>();
    float *y = out.at(0).ptr<float>();
    for (size_t i = 0; i < in[0].size(); i++)
        y[i] = 2 * x[i];
    float *counter = in.at(1).ptr<float>();
    for (size_t i = 0; i < in[1].size(); i++)
        counter[i] += 1;
    return fx::OK;
}

/* ---- my_rand ---- */

static int one_in_one_out(const Attrs &, int *nin, int *nout)
{
    *nin = 1;
    *nout = 1;
    return fx::OK;
}

static int rand_type(const Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    if (in.at(0) != fx::F64)
        return fx::error("my_rand: input 0 must be float64");
    out[0] = fx::F64;
    return fx::OK;
}

static int rand_forward(const Attrs &, std::vector<Tensor> &in, std::vector<Tensor> &out,
                        const Res &res)
{
    std::mt19937 *st = res.cpu_rand_states();
    const double *x = in.at(0).ptr<double>();
    double *y = out.at(0).ptr<double>();
    for (size_t i = 0; i < in[0].size(); i++)
        y[i] = x[i] + (double)st[i % 1024]() / 4294967296.0;
    return fx::OK;
}

/* ---- my_attrs ---- */

static std::string attrs_text(const Attrs &a)
{
    std::string s;
    for (const auto &kv : a)
        s += kv.first + "=" + kv.second + ";";
    return s;
}

static int attrs_parse(const Attrs &, int *nin, int *nout)
{
    *nin = 0;
    *nout = 1;
    return fx::OK;
}

static int attrs_type(const Attrs &, std::vector<int> &, std::vector<int> &out)
{
    out[0] = fx::U8;
    return fx::OK;
}

static int attrs_shape(const Attrs &a, const fx::Shapes &, fx::Shapes &out)
{
    out[0] = {(unsigned)attrs_text(a).size()};
    return fx::OK;
}

static int attrs_forward(const Attrs &a, std::vector<Tensor> &, std::vector<Tensor> &out,
                         const Res &)
{
    std::string s = attrs_text(a);
    memcpy(out.at(0).data, s.data(), s.size());
    return fx::OK;
}

static const fx::Op ops[] = {
    {"my_gemm", gemm_parse, gemm_type, nullptr, gemm_shape, nullptr, gemm_forward, gemm_backward,
     nullptr, 0, 0},
    {"my_counter", counter_parse, f32_type, nullptr, same_shape, nullptr, nullptr, nullptr,
     counter_create, 0, 0},
    {"my_states", states_parse, states_type, nullptr, states_shape, nullptr, states_forward,
     nullptr, nullptr, 0, 0},
    {"my_mutate", mutate_parse, f32_type, nullptr, same_shape, mutate_which, mutate_forward,
     nullptr, nullptr, 0, 0},
    {"my_rand", one_in_one_out, rand_type, nullptr, same_shape, nullptr, rand_forward, nullptr,
     nullptr, 0, 0},
    {"my_attrs", attrs_parse, attrs_type, nullptr, attrs_shape, nullptr, attrs_forward, nullptr,
     nullptr, 0, 0},
};

static const fx::Op *fx_ops(int *n)
{
    *n = (int)(sizeof(ops) / sizeof(ops[0]));
    return ops;
}

static int fx_init(int version)
{
    if (version < 10900)
        return fx::error("mx_basic needs MXNet 1.9 or newer");
    return fx::OK;
}
