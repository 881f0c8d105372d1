/*
 * server/worker/mxnet/mxnet.h - running MXNet extension libraries (lib_api
 * version 11) as mxop op libraries.
 *
 * A library built against MXNet's lib_api.h exports a C ABI (_opVersion,
 * initialize, _opRegGet, _opCall*).  The worker recognises it by those
 * exports, drives it through that ABI, and registers each of its ops as an
 * ordinary mxop op whose callbacks translate mxop's call into MXNet's.
 * Nothing of MXNet is compiled in: the ABI's entry points are looked up by
 * name and called with the argument lists MXNet 1.9 / master use.
 *
 * The layer is split by concern: lib.c (recognising and loading a library,
 * registering its ops, its error messages), call.c (the op callbacks) and
 * cxx.cc (the only C++: the random states MXNet hands to ops and the
 * exception guard used while probing an op at load).
 */
#ifndef MXOP_SERVER_WORKER_MXNET_MXNET_H
#define MXOP_SERVER_WORKER_MXNET_MXNET_H

#include <stddef.h>
#include <stdint.h>

#include "common/mxnet_abi.h" /* the lib_api version, return values, dtype numbers */
#include "mxop/op.h"

/*
 * The MXNet versions the layer announces to initialize() (lib.c tries them
 * in turn): 1.9.1, then 2.0.0 (master), both at lib_api version 11.
 */
#define MXOP__MX_HOST_VERSION 10901
#define MXOP__MX_HOST_VERSION_MASTER 20000

/* A function pointer of the library's own (fcomp_t, parseAttrs_t, ...), passed back opaque. */
typedef void (*mxop__mx_fn)(void);

/* The ABI's allocator callbacks. */
typedef void *(*mxop__mx_xpu_malloc)(void *ctx, int size);
typedef void (*mxop__mx_sparse_malloc)(void *ctx, int index, int indices_len, int idxptr_len,
                                       void **data, int64_t **indices, int64_t **indptr);

/* The library-wide entry points (every one is required). */
typedef struct mxop__mx_abi {
    int (*op_version)(void);
    int (*initialize)(int version);
    int (*msg_size)(void);
    void (*msg_get)(int idx, const char **msg);
    int (*reg_size)(void);
    void (*reg_get)(int idx, const char **name, int *is_sg, const char ***fwd_ctx,
                    mxop__mx_fn **fwd_fp, int *fwd_count, const char ***bwd_ctx,
                    mxop__mx_fn **bwd_fp, int *bwd_count, const char ***create_ctx,
                    mxop__mx_fn **create_fp, int *create_count, mxop__mx_fn *parse,
                    mxop__mx_fn *type, mxop__mx_fn *stype, mxop__mx_fn *shape, mxop__mx_fn *mutate);
    void (*free_)(void *ptr);
    int (*parse_attrs)(mxop__mx_fn parse, const char *const *keys, const char *const *vals, int num,
                       int *num_in, int *num_out);
    int (*infer_shape)(mxop__mx_fn shape, const char *const *keys, const char *const *vals, int num,
                       unsigned int **inshapes, int *indims, int num_in,
                       unsigned int ***mod_inshapes, int **mod_indims, unsigned int ***outshapes,
                       int **outdims, int num_out);
    int (*infer_type)(mxop__mx_fn type, const char *const *keys, const char *const *vals, int num,
                      int *intypes, int num_in, int *outtypes, int num_out);
    int (*infer_stype)(mxop__mx_fn stype, const char *const *keys, const char *const *vals, int num,
                       int *instypes, int num_in, int *outstypes, int num_out);
    int (*fcompute)(mxop__mx_fn fcomp, const char *const *keys, const char *const *vals, int num,
                    const int64_t **inshapes, int *indims, void **indata, int *intypes,
                    size_t *in_ids, const char **indev_type, int *indev_id, int num_in,
                    const int64_t **outshapes, int *outdims, void **outdata, int *outtypes,
                    size_t *out_ids, const char **outdev_type, int *outdev_id, int num_out,
                    mxop__mx_xpu_malloc cpu_malloc, void *cpu_alloc, mxop__mx_xpu_malloc gpu_malloc,
                    void *gpu_alloc, void *cuda_stream, mxop__mx_sparse_malloc sparse_malloc,
                    void *sparse_alloc, int *instypes, int *outstypes, void **in_indices,
                    void **out_indices, void **in_indptr, void **out_indptr,
                    int64_t *in_indices_shapes, int64_t *out_indices_shapes,
                    int64_t *in_indptr_shapes, int64_t *out_indptr_shapes, void *rng_cpu_states,
                    void *rng_gpu_states);
    int (*mutate_inputs)(mxop__mx_fn mutate, const char *const *keys, const char *const *vals,
                         int num, int **indices, int *indices_size);
    int (*create_state)(mxop__mx_fn create, const char *const *keys, const char *const *vals,
                        int num, const char *dev_type, int dev_id, unsigned int **inshapes,
                        int *indims, int num_in, const int *intypes, void **state_op);
    void (*destroy_state)(void *state_op);
    int (*fstateful)(int is_forward, void *state_op, const int64_t **inshapes, int *indims,
                     void **indata, int *intypes, size_t *in_ids, const char **indev_type,
                     int *indev_id, int num_in, const int64_t **outshapes, int *outdims,
                     void **outdata, int *outtypes, size_t *out_ids, const char **outdev_type,
                     int *outdev_id, int num_out, mxop__mx_xpu_malloc cpu_malloc, void *cpu_alloc,
                     mxop__mx_xpu_malloc gpu_malloc, void *gpu_alloc, void *cuda_stream,
                     mxop__mx_sparse_malloc sparse_malloc, void *sparse_alloc, int *instypes,
                     int *outstypes, void **in_indices, void **out_indices, void **in_indptr,
                     void **out_indptr, int64_t *in_indices_shapes, int64_t *out_indices_shapes,
                     int64_t *in_indptr_shapes, int64_t *out_indptr_shapes, void *rng_cpu_states,
                     void *rng_gpu_states);
} mxop__mx_abi_t;

/* One loaded MXNet library. */
typedef struct mxop__mx_lib {
    mxop__mx_abi_t abi;
    char name[64];    /* for messages */
    int host_version; /* the MXNet version its initialize() accepted */
    int msgs_seen;    /* the library's message list only grows: what was read already */
} mxop__mx_lib_t;

/* What _opRegGet said about one op, kept per mxop op index. */
typedef struct mxop__mx_op {
    uint32_t lib; /* index into the MXNet library table */
    mxop__mx_fn parse, type, stype, shape, mutate;
    mxop__mx_fn fwd_cpu, fwd_gpu, bwd_cpu, bwd_gpu, create_cpu, create_gpu;
    int rng; /* enum mxop__mx_rng: learned from the op's calls */
} mxop__mx_op_t;

/*
 * Whether an op draws from the CPU random states.  The ABI does not say, so
 * the first call reseeds and looks; an op seen not to draw gets the states
 * as they are (still random, not reseeded from its call's seed) until it
 * is seen drawing, and from then on they are reseeded for each of its calls.
 */
enum mxop__mx_rng { MXOP__MX_RNG_UNKNOWN = 0, MXOP__MX_RNG_USES = 1, MXOP__MX_RNG_NONE = 2 };

/* ---- lib.c: opening a library, registering its ops ---- */

/** Whether the dlopen'ed library `h` is an MXNet extension library (exports _opVersion). */
int mxop__mx_detect(void *h);

/**
 * Checks library `h` (named `lname` in messages): its lib_api version, its
 * initialize(), that it registers no partitioner or graph pass and no
 * subgraph op.  On success the library is pending: the next call of
 * mxop__mx_plugin_init registers its ops.  Returns 0 or MXOP_EABI,
 * MXOP_ELIB_INVALID, MXOP_ELIB_INIT, MXOP_ENOT_SUPPORTED with the reason in msg.
 */
int mxop__mx_open(void *h, const char *lname, char *msg, size_t msglen);

/** The init function the plugin loader runs for a pending MXNet library. */
int mxop__mx_plugin_init(mxop_ctx_t *ctx, const mxop_host_t *host);

/* ---- registry.c: the libraries and ops (lib.c adds, call.c finds) ---- */

/** Adds an opened library; returns its index, or -1 when out of memory. */
int mxop__mx_lib_add(const mxop__mx_lib_t *l);

/** Makes room for ops 0 .. need-1; returns 0 or MXOP_ENOMEM. */
int mxop__mx_op_reserve(uint32_t need);

/** Records the MXNet op behind mxop op `index` (room made by mxop__mx_op_reserve). */
void mxop__mx_op_set(uint32_t index, const mxop__mx_op_t *mo);

/** The MXNet op behind mxop op `index`, or NULL (not an MXNet op). */
const mxop__mx_op_t *mxop__mx_op_get(uint32_t index);
mxop__mx_lib_t *mxop__mx_lib_get(uint32_t lib);

/** Library l's messages since the last read, joined with "; " into buf (emptied first). */
void mxop__mx_read_msgs(mxop__mx_lib_t *l, char *buf, size_t len);

/**
 * Records the library's new messages (after a call returned MXOP__MX_FAIL)
 * as the call's error: "op 'x': <what the library said>", or `fallback`
 * when it said nothing.  Returns `code`.
 */
int mxop__mx_fail(mxop_ctx_t *ctx, uint32_t lib, int code, const char *fallback);

/**
 * As mxop__mx_fail, for a refusal mxop explains itself: the message is
 * "op 'x': <what the library said> (<why>)", or "op 'x': <why>" when the
 * library said nothing, so neither account is lost.  Returns `code`.
 */
int mxop__mx_fail_why(mxop_ctx_t *ctx, uint32_t lib, int code, const char *why);

/** Forgets messages the library left after a successful call. */
void mxop__mx_skip_msgs(uint32_t lib);

/** Records what a call of op `index` showed about its use of the random states. */
void mxop__mx_note_rng(uint32_t index, int used);

/* ---- call.c: the op's callbacks ---- */

/** Fills the mxop op definition's callbacks for an MXNet op. */
void mxop__mx_fill_def(const mxop__mx_op_t *mo, mxop_op_def_t *def);

/* ---- cxx.cc ---- */

/**
 * The CPU random states MXNet hands an op: 1024 std::mt19937, state i
 * seeded with the low 32 bits of splitmix64(seed + i).  Made once (kept
 * for the worker's life); reseeded when `reseed` is set (seeding all 1024
 * costs about a millisecond, so call.c asks for it only for ops that draw
 * from them).  NULL when out of memory.
 */
void *mxop__mx_cpu_rand_states(uint64_t seed, int reseed);

/** Whether any state drew since it was last seeded. */
int mxop__mx_rand_used(void);

/*
 * ParseAttrs with no attributes and MutateInputs, run at load to learn an
 * op's arity and mutated inputs.  A library may throw here (a required
 * attribute is missing): that is caught and answered -1, since at load it
 * only means "depends on the attributes".  Returns the library's status.
 */
int mxop__mx_probe_parse(const mxop__mx_abi_t *abi, mxop__mx_fn parse, int *num_in, int *num_out);
int mxop__mx_probe_mutate(const mxop__mx_abi_t *abi, mxop__mx_fn mutate, int **indices, int *n);

#endif /* MXOP_SERVER_WORKER_MXNET_MXNET_H */
