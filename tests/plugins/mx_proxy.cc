/*
 * tests/plugins/mx_proxy.cc - an MXNet extension library (lib_api 11) for
 * the proxy tests (python/tests/mxnet/): what MXNet's own gemm and relu
 * examples exercise, written here against the same C ABI (mx_abi.h).
 *
 *   state_gemm    stateful C = A.B (f32, 2-D), backward dA = dC.B^T,
 *                 dB = A^T.dC; every instance counts its forward calls;
 *                 attribute test_kw (optional, an integer) is kept
 *   gemm_counts   no inputs: out (i32) = [states created, destroyed,
 *                 forward calls of all states, last test_kw seen]
 *   crashy_relu   y = max(x, 0), backward dx = dy * (x > 0); an input
 *                 holding -12345 dereferences NULL (a crash in one call),
 *                 one holding -54321 spins for ever (a hang)
 */
#include <string>

#include "mx_abi.h"

using fx::Attrs;
using fx::Res;
using fx::Shapes;
using fx::Tensor;

static int created, destroyed, forwards, last_kw = -1;

static int two_in_one_out(const Attrs &, int *nin, int *nout)
{
    *nin = 2;
    *nout = 1;
    return fx::OK;
}

static int f32_type(const Attrs &, std::vector<int> &in, std::vector<int> &out)
{
    for (size_t i = 0; i < in.size(); i++)
        if (in[i] != fx::F32)
            return fx::error("input " + std::to_string(i) + " must be float32");
    for (auto &o : out)
        o = fx::F32;
    return fx::OK;
}

static int gemm_shape(const Attrs &, const Shapes &in, Shapes &out)
{
    if (in.at(0).size() != 2 || in.at(1).size() != 2 || in[0][1] != in[1][0])
        return fx::error("state_gemm: inputs must be matrices [n,k] and [k,m]");
    out[0] = {in[0][0], in[1][1]};
    return fx::OK;
}

static void matmul(const float *a, const float *b, float *c, unsigned n, unsigned k, unsigned m,
                   bool ta, bool tb)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < m; j++) {
            float s = 0;
            for (unsigned p = 0; p < k; p++)
                s += (ta ? a[p * n + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * m + j]);
            c[i * m + j] = s;
        }
}

struct StateGemm : fx::StatefulOp {
    int count = 0;
    StateGemm() { created++; }
    ~StateGemm() override { destroyed++; }
    int forward(std::vector<Tensor> &in, std::vector<Tensor> &out, const Res &) override
    {
        count++;
        forwards++;
        unsigned n = (unsigned)in.at(0).shape[0], k = (unsigned)in[0].shape[1];
        unsigned m = (unsigned)in.at(1).shape[1];
        matmul(in[0].ptr<float>(), in[1].ptr<float>(), out.at(0).ptr<float>(), n, k, m, false,
               false);
        return fx::OK;
    }
    /* Inputs: dC, A, B, C; outputs: dA, dB. */
    int backward(std::vector<Tensor> &in, std::vector<Tensor> &out, const Res &) override
    {
        const float *dc = in.at(0).ptr<float>(), *A = in.at(1).ptr<float>();
        const float *B = in.at(2).ptr<float>();
        unsigned n = (unsigned)in[1].shape[0], k = (unsigned)in[1].shape[1];
        unsigned m = (unsigned)in[2].shape[1];
        matmul(dc, B, out.at(0).ptr<float>(), n, m, k, false, true);
        matmul(A, dc, out.at(1).ptr<float>(), k, n, m, true, false);
        return fx::OK;
    }
};

static int gemm_create(const Attrs &a, const Shapes &, const std::vector<int> &,
                       fx::StatefulOp **op)
{
    auto it = a.find("test_kw");
    if (it != a.end())
        last_kw = std::stoi(it->second);
    *op = new StateGemm();
    return fx::OK;
}

/* ---- gemm_counts ---- */

static int counts_parse(const Attrs &, int *nin, int *nout)
{
    *nin = 0;
    *nout = 1;
    return fx::OK;
}

static int counts_type(const Attrs &, std::vector<int> &, std::vector<int> &out)
{
    out[0] = fx::I32;
    return fx::OK;
}

static int counts_shape(const Attrs &, const Shapes &, Shapes &out)
{
    out[0] = {4};
    return fx::OK;
}

static int counts_forward(const Attrs &, std::vector<Tensor> &, std::vector<Tensor> &out,
                          const Res &)
{
    int32_t *o = out.at(0).ptr<int32_t>();
    o[0] = created;
    o[1] = destroyed;
    o[2] = forwards;
    o[3] = last_kw;
    return fx::OK;
}

/* ---- crashy_relu ---- */

static int one_in_one_out(const Attrs &, int *nin, int *nout)
{
    *nin = 1;
    *nout = 1;
    return fx::OK;
}

static int same_shape(const Attrs &, const Shapes &in, Shapes &out)
{
    out[0] = in.at(0);
    return fx::OK;
}

static int relu_forward(const Attrs &, std::vector<Tensor> &in, std::vector<Tensor> &out,
                        const Res &)
{
    const float *x = in.at(0).ptr<float>();
    float *y = out.at(0).ptr<float>();
    for (size_t i = 0; i < in[0].size(); i++) {
        if (x[i] == -12345.0f)
            *(volatile int *)nullptr = 1;
        if (x[i] == -54321.0f)
            for (volatile int spin = 0;; spin++) {
            }
        y[i] = x[i] > 0 ? x[i] : 0;
    }
    return fx::OK;
}

/* Inputs: dy, x, y; output: dx. */
static int relu_backward(const Attrs &, std::vector<Tensor> &in, std::vector<Tensor> &out,
                         const Res &)
{
    const float *dy = in.at(0).ptr<float>(), *x = in.at(1).ptr<float>();
    float *dx = out.at(0).ptr<float>();
    for (size_t i = 0; i < in[0].size(); i++)
        dx[i] = x[i] > 0 ? dy[i] : 0;
    return fx::OK;
}

static const fx::Op ops[] = {
    {"state_gemm", two_in_one_out, f32_type, nullptr, gemm_shape, nullptr, nullptr, nullptr,
     gemm_create, 0, 0},
    {"gemm_counts", counts_parse, counts_type, nullptr, counts_shape, nullptr, counts_forward,
     nullptr, nullptr, 0, 0},
    {"crashy_relu", one_in_one_out, f32_type, nullptr, same_shape, nullptr, relu_forward,
     relu_backward, nullptr, 0, 0},
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
