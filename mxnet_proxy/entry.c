/*
 * mxnet_proxy/entry.c - the C entry points MXNet looks up by name in an
 * extension library (lib_api version 11), the only symbols the proxy
 * exports (mxnet_proxy/exports.map).
 *
 * MXNet's loader (MXLoadLib) reads _opVersion, calls initialize(its
 * version), then enumerates ops with _opRegSize / _opRegGet, partitioners
 * and graph passes (none here; it still looks their entry points up), and
 * from then on calls _opCall* with the callbacks _opRegGet handed out.
 * After any of them it reads the messages (_msgSize, _msgGet) and raises
 * an MXNetError with them when the callback returned failure.
 */
#include <stdlib.h>
#include <string.h>

#include "mxnet_proxy/proxy.h"

#define EXPORT __attribute__((visibility("default")))

static const char *cpu_ctx[1] = {"cpu"};

EXPORT int _opVersion(void)
{
    return MXOP__MX_LIB_VERSION;
}

EXPORT int initialize(int version)
{
    mxop__px_msgs_clear();
    /* lib_api version 11 is MXNet 1.9 and 2.0; MXNet has checked _opVersion already. */
    if (version < 10900)
        return mxop__px_fail("mxop proxy: MXNet %d is older than 1.9, the first with lib_api 11",
                             version);
    if (mxop__px_client_start() == NULL)
        return MXOP__MX_FAIL;
    mxop_client_t *c = mxop__px_client_lock();
    if (c == NULL)
        return MXOP__MX_FAIL;
    int rc = mxop__px_ops_build(c);
    mxop__px_client_unlock();
    if (rc != 0) {
        mxop__px_client_stop();
        return MXOP__MX_FAIL;
    }
    return MXOP__MX_OK;
}

EXPORT int _msgSize(void)
{
    return mxop__px_msgs_count();
}

EXPORT void _msgGet(int idx, const char **msg)
{
    *msg = mxop__px_msgs_get(idx);
}

EXPORT int _opRegSize(void)
{
    return mxop__px_ops_count();
}

EXPORT void _opRegGet(int idx, const char **name, int *is_sg, const char ***fwd_ctx,
                      mxop__px_fn **fwd_fp, int *fwd_count, const char ***bwd_ctx,
                      mxop__px_fn **bwd_fp, int *bwd_count, const char ***create_ctx,
                      mxop__px_fn **create_fp, int *create_count, mxop__px_fn *parse,
                      mxop__px_fn *type, mxop__px_fn *stype, mxop__px_fn *shape,
                      mxop__px_fn *mutate)
{
    mxop__px_op_t *o = mxop__px_op_at(idx);
    *name = o->name;
    *is_sg = 0;
    *fwd_ctx = *bwd_ctx = *create_ctx = cpu_ctx;
    *fwd_fp = o->fwd;
    *bwd_fp = o->bwd;
    *create_fp = o->create;
    /* A stateful op is CreateOpState alone: MXNet then routes forward and backward to the state. */
    *fwd_count = !o->stateful;
    *bwd_count = !o->stateful && o->has_backward;
    *create_count = o->stateful;
    *parse = mxop__px_fn_of(o, MXOP__PX_PARSE);
    *type = mxop__px_fn_of(o, MXOP__PX_TYPE);
    /* Given even though everything is dense: without it MXNet refuses an op with no inputs. */
    *stype = mxop__px_fn_of(o, MXOP__PX_STYPE);
    *shape = mxop__px_fn_of(o, MXOP__PX_SHAPE);
    *mutate = o->mutated ? mxop__px_fn_of(o, MXOP__PX_MUTATE) : NULL;
}

EXPORT void _opCallFree(void *ptr)
{
    free(ptr);
}

EXPORT int _opCallParseAttrs(mxop__px_fn parse, const char *const *keys, const char *const *vals,
                             int num, int *num_in, int *num_out)
{
    mxop__px_msgs_clear();
    return mxop__px_parse_attrs(parse, keys, vals, num, num_in, num_out);
}

EXPORT int _opCallInferShape(mxop__px_fn shape, const char *const *keys, const char *const *vals,
                             int num, unsigned int **inshapes, int *indims, int num_in,
                             unsigned int ***mod_inshapes, int **mod_indims,
                             unsigned int ***outshapes, int **outdims, int num_out)
{
    mxop__px_msgs_clear();
    return mxop__px_infer_shape(shape, keys, vals, num, inshapes, indims, num_in, mod_inshapes,
                                mod_indims, outshapes, outdims, num_out);
}

EXPORT int _opCallInferType(mxop__px_fn type, const char *const *keys, const char *const *vals,
                            int num, int *intypes, int num_in, int *outtypes, int num_out)
{
    mxop__px_msgs_clear();
    return mxop__px_infer_type(type, keys, vals, num, intypes, num_in, outtypes, num_out);
}

EXPORT int _opCallInferSType(mxop__px_fn stype, const char *const *keys, const char *const *vals,
                             int num, int *instypes, int num_in, int *outstypes, int num_out)
{
    mxop__px_msgs_clear();
    return mxop__px_infer_stype(stype, instypes, num_in, outstypes, num_out);
}

EXPORT int _opCallMutateInputs(mxop__px_fn mutate, const char *const *keys, const char *const *vals,
                               int num, int **indices, int *indices_size)
{
    mxop__px_msgs_clear();
    return mxop__px_mutate_inputs(mutate, indices, indices_size);
}

#define COMPUTE_PARAMS                                                                             \
    const int64_t **inshapes, int *indims, void **indata, int *intypes, size_t *in_ids,            \
        const char **indev_type, int *indev_id, int num_in, const int64_t **outshapes,             \
        int *outdims, void **outdata, int *outtypes, size_t *out_ids, const char **outdev_type,    \
        int *outdev_id, int num_out, mxop__px_xpu_malloc cpu_malloc, void *cpu_alloc,              \
        mxop__px_xpu_malloc gpu_malloc, void *gpu_alloc, void *cuda_stream,                        \
        mxop__px_sparse_malloc sparse_malloc, void *sparse_alloc, int *instypes, int *outstypes,   \
        void **in_indices, void **out_indices, void **in_indptr, void **out_indptr,                \
        int64_t *in_indices_shapes, int64_t *out_indices_shapes, int64_t *in_indptr_shapes,        \
        int64_t *out_indptr_shapes, void *rng_cpu_states, void *rng_gpu_states

EXPORT int _opCallFCompute(mxop__px_fn fcomp, const char *const *keys, const char *const *vals,
                           int num, COMPUTE_PARAMS)
{
    mxop__px_msgs_clear();
    /* Forward and backward come through here: the callback says which. */
    mxop__px_op_t *o = mxop__px_op_of(fcomp, MXOP__PX_FWD);
    int backward = 0;
    if (o == NULL) {
        mxop__px_msgs_clear();
        o = mxop__px_op_of(fcomp, MXOP__PX_BWD);
        backward = 1;
    }
    if (o == NULL)
        return MXOP__MX_FAIL;
    return mxop__px_compute(o, backward, keys, vals, num, inshapes, indims, indata, intypes,
                            indev_type, instypes, num_in, outshapes, outdims, outdata, outtypes,
                            outdev_type, outstypes, num_out, rng_cpu_states);
}

EXPORT int _opCallCreateOpState(mxop__px_fn create_op, const char *const *keys,
                                const char *const *vals, int num, const char *dev_type, int dev_id,
                                unsigned int **inshapes, int *indims, int num_in,
                                const int *intypes, void **state_op)
{
    mxop__px_msgs_clear();
    return mxop__px_state_create(create_op, keys, vals, num, dev_type, inshapes, indims, num_in,
                                 intypes, state_op);
}

EXPORT void _opCallDestroyOpState(void *state_op)
{
    mxop__px_state_destroy(state_op);
}

EXPORT int _opCallFStatefulCompute(int is_forward, void *state_op, COMPUTE_PARAMS)
{
    mxop__px_msgs_clear();
    return mxop__px_state_compute(is_forward, state_op, inshapes, indims, indata, intypes,
                                  indev_type, instypes, num_in, outshapes, outdims, outdata,
                                  outtypes, outdev_type, outstypes, num_out, rng_cpu_states);
}

/*
 * Partitioners and graph passes: the proxy has none (mxop runs ops).  MXNet
 * looks every entry point up even so; with the counts at 0 it calls none
 * of the others, which only answer failure.
 */
EXPORT int _partRegSize(void)
{
    return 0;
}

EXPORT int _partRegGetCount(int idx, const char **name)
{
    *name = "";
    return 0;
}

EXPORT void _partRegGet(int part_idx, int stg_idx, const char **strategy,
                        mxop__px_fn *supported_ops, mxop__px_fn *create_selector,
                        mxop__px_fn *review_subgraph, const char **op_name)
{
    *strategy = *op_name = "";
    *supported_ops = *create_selector = *review_subgraph = NULL;
}

EXPORT int _partCallSupportedOps(mxop__px_fn supported_ops, const char *json, int num_ids, int *ids,
                                 const char *const *opt_keys, const char *const *opt_vals,
                                 int num_opts)
{
    return MXOP__MX_FAIL;
}

EXPORT int _partCallCreateSelector(mxop__px_fn create_selector, const char *json, void **selector,
                                   const char *const *opt_keys, const char *const *opt_vals,
                                   int num_opts)
{
    *selector = NULL;
    return MXOP__MX_FAIL;
}

EXPORT void _partCallSelect(void *sel_inst, int node_id, int *selected)
{
    *selected = 0;
}

EXPORT void _partCallSelectInput(void *sel_inst, int node_id, int input_node_id, int *selected)
{
    *selected = 0;
}

EXPORT void _partCallSelectOutput(void *sel_inst, int node_id, int output_node_id, int *selected)
{
    *selected = 0;
}

EXPORT void _partCallFilter(void *sel_inst, int *candidates, int num_candidates, int **keep,
                            int *num_keep)
{
    *keep = NULL;
    *num_keep = 0;
}

EXPORT void _partCallReset(void *sel_inst)
{
}

/* The two longest entry points: never called with no partitioner or pass, only present. */
EXPORT int _partCallReviewSubgraph(mxop__px_fn review_subgraph, const char *json, int subgraph_id,
                                   int *accept)
{
    return MXOP__MX_FAIL;
}

EXPORT int _passRegSize(void)
{
    return 0;
}

EXPORT void _passRegGet(int pass_idx, mxop__px_fn *graph_pass, const char **pass_name)
{
    *graph_pass = NULL;
    *pass_name = "";
}

EXPORT int _passCallGraphPass(mxop__px_fn graph_pass, const char *in_graph, char **out_graph)
{
    return MXOP__MX_FAIL;
}
