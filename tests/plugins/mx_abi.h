/*
 * tests/plugins/mx_abi.h - the library side of MXNet's extension-library C
 * ABI (lib_api version 11), written here for the test libraries: no MXNet
 * code.  A fixture defines its ops with the small C++ interface below and
 * includes this header once; the header defines the exported C entry
 * points mxop's worker drives (_opVersion, initialize, _opRegGet,
 * _opCall*, ...) with the argument lists MXNet 1.9 uses.
 *
 * Like a real lib_api library it does not catch what an op throws: an op
 * calling attrs.at() on a missing key, or throwing itself, lets the C++
 * exception escape through the C ABI.
 *
 * Before including, a fixture may define FX_LIB_VERSION (default 11; below
 * 11 there is no _opCallDestroyOpState, as in MXNet 1.8), FX_PARTITIONERS
 * and FX_PASSES (default 0); it must define
 * `static const fx::Op *fx_ops(int *n)` and `static int fx_init(int version)`.
 */
#ifndef MXOP_TESTS_PLUGINS_MX_ABI_H
#define MXOP_TESTS_PLUGINS_MX_ABI_H

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#ifndef FX_LIB_VERSION
#define FX_LIB_VERSION 11
#endif
#ifndef FX_PARTITIONERS
#define FX_PARTITIONERS 0
#endif
#ifndef FX_PASSES
#define FX_PASSES 0
#endif

#define FX_EXPORT extern "C" __attribute__((visibility("default")))

namespace fx
{

enum { F32 = 0, F64 = 1, F16 = 2, U8 = 3, I32 = 4, I8 = 5, I64 = 6 };
enum { DENSE = 0, ROW_SPARSE = 1, CSR = 2 };
enum { FAIL = 0, OK = 1 };

using Attrs = std::map<std::string, std::string>;
using Shapes = std::vector<std::vector<unsigned>>;

struct Tensor {
    void *data;
    std::vector<int64_t> shape;
    int dtype;
    size_t size() const
    {
        size_t n = 1;
        for (int64_t d : shape)
            n *= (size_t)d;
        return n;
    }
    template <class T> T *ptr() const
    {
        return static_cast<T *>(data);
    }
};

struct Res {
    void *(*cpu_malloc)(void *, int);
    void *cpu_alloc;
    void *rng_cpu;
    void *(*gpu_malloc)(void *, int);
    void *gpu_alloc;
    void *stream; /* a cudaStream_t in a GPU call */
    void *alloc_cpu(int bytes) const
    {
        return cpu_malloc(cpu_alloc, bytes);
    }
    void *alloc_gpu(int bytes) const
    {
        return gpu_malloc(gpu_alloc, bytes);
    }
    std::mt19937 *cpu_rand_states() const
    {
        return static_cast<std::mt19937 *>(rng_cpu);
    }
};

/* The library's messages: the list only grows, as MXNet's does. */
inline std::vector<std::string> &msgs()
{
    static std::vector<std::string> m;
    return m;
}
inline int error(const std::string &s)
{
    msgs().push_back(s);
    return FAIL;
}

typedef int (*parse_fn)(const Attrs &, int *num_in, int *num_out);
typedef int (*type_fn)(const Attrs &, std::vector<int> &in, std::vector<int> &out);
typedef int (*shape_fn)(const Attrs &, const Shapes &in, Shapes &out);
typedef int (*mutate_fn)(const Attrs &, std::vector<int> &inputs);
typedef int (*comp_fn)(const Attrs &, std::vector<Tensor> &in, std::vector<Tensor> &out,
                       const Res &res);

struct StatefulOp {
    virtual int forward(std::vector<Tensor> &in, std::vector<Tensor> &out, const Res &res) = 0;
    virtual int backward(std::vector<Tensor> &, std::vector<Tensor> &, const Res &)
    {
        return error("this stateful op has no backward");
    }
    virtual ~StatefulOp()
    {
    }
};
typedef int (*create_fn)(const Attrs &, const Shapes &in_shapes, const std::vector<int> &in_types,
                         StatefulOp **op);

struct Op {
    const char *name;
    parse_fn parse;
    type_fn type;
    type_fn stype; /* storage types; NULL: dense */
    shape_fn shape;
    mutate_fn mutate;
    comp_fn forward, backward;
    create_fn create;
    int is_subgraph;
    int gpu; /* forward, backward and create are registered for "gpu", not "cpu" */
};

inline Attrs attrs_of(const char *const *keys, const char *const *vals, int num)
{
    Attrs a;
    for (int i = 0; i < num; i++)
        a[keys[i]] = vals[i];
    return a;
}

inline std::vector<Tensor> tensors(const int64_t **shapes, int *dims, void **data, int *types,
                                   int n)
{
    std::vector<Tensor> v;
    for (int i = 0; i < n; i++)
        v.push_back(
            Tensor{data[i], std::vector<int64_t>(shapes[i], shapes[i] + dims[i]), types[i]});
    return v;
}

} // namespace fx

static const fx::Op *fx_ops(int *n);
static int fx_init(int version);

static const char *fx_cpu_ctx[1] = {"cpu"};
static const char *fx_gpu_ctx[1] = {"gpu"};

FX_EXPORT int _opVersion(void)
{
    return FX_LIB_VERSION;
}

FX_EXPORT int initialize(int version)
{
    return fx_init(version);
}

FX_EXPORT int _msgSize(void)
{
    return (int)fx::msgs().size();
}

FX_EXPORT void _msgGet(int idx, const char **msg)
{
    *msg = fx::msgs().at((size_t)idx).c_str();
}

FX_EXPORT int _opRegSize(void)
{
    int n;
    fx_ops(&n);
    return n;
}

FX_EXPORT int _partRegSize(void)
{
    return FX_PARTITIONERS;
}

FX_EXPORT int _passRegSize(void)
{
    return FX_PASSES;
}

/*
 * MXNet's loader looks up every partitioner and pass entry point even when
 * the counts are 0 (and refuses the library without them), so that the
 * fixtures also load into MXNet itself: stubs, never called at count 0.
 */
FX_EXPORT int _partRegGetCount(int, const char **name)
{
    *name = "";
    return 0;
}
FX_EXPORT void _partRegGet(int, int, const char **, void **, void **, void **, const char **)
{
}
FX_EXPORT int _partCallSupportedOps(void *, const char *, int, int *, const char *const *,
                                    const char *const *, int)
{
    return fx::FAIL;
}
FX_EXPORT int _partCallCreateSelector(void *, const char *, void **, const char *const *,
                                      const char *const *, int)
{
    return fx::FAIL;
}
FX_EXPORT void _partCallSelect(void *, int, int *)
{
}
FX_EXPORT void _partCallSelectInput(void *, int, int, int *)
{
}
FX_EXPORT void _partCallSelectOutput(void *, int, int, int *)
{
}
FX_EXPORT void _partCallFilter(void *, int *, int, int **, int *)
{
}
FX_EXPORT void _partCallReset(void *)
{
}
FX_EXPORT int _partCallReviewSubgraph(void *, const char *, int, int *)
{
    return fx::FAIL;
}
FX_EXPORT void _passRegGet(int, void **, const char **)
{
}
FX_EXPORT int _passCallGraphPass(void *, const char *, char **)
{
    return fx::FAIL;
}

FX_EXPORT void _opRegGet(int idx, const char **name, int *is_sg, const char ***fwd_ctx,
                         fx::comp_fn **fwd_fp, int *fwd_count, const char ***bwd_ctx,
                         fx::comp_fn **bwd_fp, int *bwd_count, const char ***create_ctx,
                         fx::create_fn **create_fp, int *create_count, fx::parse_fn *parse,
                         fx::type_fn *type, fx::type_fn *stype, fx::shape_fn *shape,
                         fx::mutate_fn *mutate)
{
    int n;
    fx::Op *op = const_cast<fx::Op *>(&fx_ops(&n)[idx]);
    *name = op->name;
    *is_sg = op->is_subgraph;
    *fwd_ctx = op->gpu ? fx_gpu_ctx : fx_cpu_ctx;
    *fwd_fp = &op->forward;
    *fwd_count = op->forward != nullptr;
    *bwd_ctx = op->gpu ? fx_gpu_ctx : fx_cpu_ctx;
    *bwd_fp = &op->backward;
    *bwd_count = op->backward != nullptr;
    *create_ctx = op->gpu ? fx_gpu_ctx : fx_cpu_ctx;
    *create_fp = &op->create;
    *create_count = op->create != nullptr;
    *parse = op->parse;
    *type = op->type;
    *stype = op->stype;
    *shape = op->shape;
    *mutate = op->mutate;
}

FX_EXPORT void _opCallFree(void *p)
{
    free(p);
}

FX_EXPORT int _opCallParseAttrs(fx::parse_fn parse, const char *const *keys,
                                const char *const *vals, int num, int *num_in, int *num_out)
{
    return parse(fx::attrs_of(keys, vals, num), num_in, num_out);
}

FX_EXPORT int _opCallInferShape(fx::shape_fn shape, const char *const *keys,
                                const char *const *vals, int num, unsigned **inshapes, int *indims,
                                int num_in, unsigned ***mod_inshapes, int **mod_indims,
                                unsigned ***outshapes, int **outdims, int num_out)
{
    fx::Shapes in, out((size_t)num_out);
    for (int i = 0; i < num_in; i++)
        in.push_back(std::vector<unsigned>(inshapes[i], inshapes[i] + indims[i]));
    if (shape(fx::attrs_of(keys, vals, num), in, out) != fx::OK)
        return fx::FAIL;
    *mod_inshapes = (unsigned **)malloc(sizeof(unsigned *) * (size_t)(num_in ? num_in : 1));
    *mod_indims = (int *)malloc(sizeof(int) * (size_t)(num_in ? num_in : 1));
    for (int i = 0; i < num_in; i++) {
        (*mod_indims)[i] = indims[i];
        (*mod_inshapes)[i] = (unsigned *)malloc(sizeof(unsigned) * (size_t)(indims[i] + 1));
        memcpy((*mod_inshapes)[i], inshapes[i], sizeof(unsigned) * (size_t)indims[i]);
    }
    *outshapes = (unsigned **)malloc(sizeof(unsigned *) * (size_t)(num_out ? num_out : 1));
    *outdims = (int *)malloc(sizeof(int) * (size_t)(num_out ? num_out : 1));
    for (int j = 0; j < num_out; j++) {
        (*outdims)[j] = (int)out[(size_t)j].size();
        (*outshapes)[j] = (unsigned *)malloc(sizeof(unsigned) * (out[(size_t)j].size() + 1));
        for (size_t d = 0; d < out[(size_t)j].size(); d++)
            (*outshapes)[j][d] = out[(size_t)j][d];
    }
    return fx::OK;
}

static int fx_types(fx::type_fn fn, const char *const *keys, const char *const *vals, int num,
                    int *in, int num_in, int *out, int num_out)
{
    std::vector<int> i(in, in + num_in), o(out, out + num_out);
    if (fn(fx::attrs_of(keys, vals, num), i, o) != fx::OK)
        return fx::FAIL;
    for (int j = 0; j < num_out; j++)
        out[j] = o.at((size_t)j);
    return fx::OK;
}

FX_EXPORT int _opCallInferType(fx::type_fn type, const char *const *keys, const char *const *vals,
                               int num, int *intypes, int num_in, int *outtypes, int num_out)
{
    return fx_types(type, keys, vals, num, intypes, num_in, outtypes, num_out);
}

FX_EXPORT int _opCallInferSType(fx::type_fn stype, const char *const *keys, const char *const *vals,
                                int num, int *instypes, int num_in, int *outstypes, int num_out)
{
    return fx_types(stype, keys, vals, num, instypes, num_in, outstypes, num_out);
}

FX_EXPORT int _opCallMutateInputs(fx::mutate_fn mutate, const char *const *keys,
                                  const char *const *vals, int num, int **indices, int *size)
{
    std::vector<int> v;
    int rc = mutate(fx::attrs_of(keys, vals, num), v);
    /* Allocated even when empty, as MXNet's does. */
    *indices = (int *)malloc(sizeof(int) * (v.size() + 1));
    for (size_t i = 0; i < v.size(); i++)
        (*indices)[i] = v[i];
    *size = (int)v.size();
    return rc;
}

FX_EXPORT int _opCallCreateOpState(fx::create_fn create, const char *const *keys,
                                   const char *const *vals, int num, const char *dev_type,
                                   int dev_id, unsigned **inshapes, int *indims, int num_in,
                                   const int *intypes, void **state_op)
{
    std::string dev(dev_type); /* MXNet makes a std::string of it: NULL would crash */
    (void)dev_id;
    fx::Shapes in;
    for (int i = 0; i < num_in; i++)
        in.push_back(std::vector<unsigned>(inshapes[i], inshapes[i] + indims[i]));
    fx::StatefulOp *op = nullptr;
    int rc =
        create(fx::attrs_of(keys, vals, num), in, std::vector<int>(intypes, intypes + num_in), &op);
    *state_op = op;
    return rc;
}

/* Version 11 brought the state's destructor: a library of an older version lacks it. */
#if FX_LIB_VERSION >= 11
FX_EXPORT void _opCallDestroyOpState(void *state_op)
{
    delete static_cast<fx::StatefulOp *>(state_op);
}
#endif

#define FX_COMPUTE_PARAMS                                                                          \
    const int64_t **inshapes, int *indims, void **indata, int *intypes, size_t *inIDs,             \
        const char **indev_type, int *indev_id, int num_in, const int64_t **outshapes,             \
        int *outdims, void **outdata, int *outtypes, size_t *outIDs, const char **outdev_type,     \
        int *outdev_id, int num_out, void *(*cpu_malloc)(void *, int), void *cpu_alloc,            \
        void *(*gpu_malloc)(void *, int), void *gpu_alloc, void *cuda_stream,                      \
        void (*sparse_malloc)(void *, int, int, int, void **, int64_t **, int64_t **),             \
        void *sparse_alloc, int *instypes, int *outstypes, void **in_indices, void **out_indices,  \
        void **in_indptr, void **out_indptr, int64_t *in_indices_shapes,                           \
        int64_t *out_indices_shapes, int64_t *in_indptr_shapes, int64_t *out_indptr_shapes,        \
        void *rng_cpu_states, void *rng_gpu_states

/* What MXNet's side does with every array: read it (a NULL array crashes, as it does there). */
static void fx_touch(int *intypes, size_t *inIDs, const char **indev_type, int *indev_id,
                     int num_in, int *instypes)
{
    for (int i = 0; i < num_in; i++) {
        std::string dev(indev_type[i]);
        (void)intypes[i];
        (void)inIDs[i];
        (void)indev_id[i];
        (void)instypes[i];
    }
}

FX_EXPORT int _opCallFCompute(fx::comp_fn fcomp, const char *const *keys, const char *const *vals,
                              int num, FX_COMPUTE_PARAMS)
{
    fx_touch(intypes, inIDs, indev_type, indev_id, num_in, instypes);
    fx_touch(outtypes, outIDs, outdev_type, outdev_id, num_out, outstypes);
    std::vector<fx::Tensor> in = fx::tensors(inshapes, indims, indata, intypes, num_in);
    std::vector<fx::Tensor> out = fx::tensors(outshapes, outdims, outdata, outtypes, num_out);
    fx::Res res{cpu_malloc, cpu_alloc, rng_cpu_states, gpu_malloc, gpu_alloc, cuda_stream};
    return fcomp(fx::attrs_of(keys, vals, num), in, out, res);
}

FX_EXPORT int _opCallFStatefulCompute(int is_forward, void *state_op, FX_COMPUTE_PARAMS)
{
    fx_touch(intypes, inIDs, indev_type, indev_id, num_in, instypes);
    fx_touch(outtypes, outIDs, outdev_type, outdev_id, num_out, outstypes);
    std::vector<fx::Tensor> in = fx::tensors(inshapes, indims, indata, intypes, num_in);
    std::vector<fx::Tensor> out = fx::tensors(outshapes, outdims, outdata, outtypes, num_out);
    fx::Res res{cpu_malloc, cpu_alloc, rng_cpu_states, gpu_malloc, gpu_alloc, cuda_stream};
    fx::StatefulOp *op = static_cast<fx::StatefulOp *>(state_op);
    return is_forward ? op->forward(in, out, res) : op->backward(in, out, res);
}

#endif /* MXOP_TESTS_PLUGINS_MX_ABI_H */
