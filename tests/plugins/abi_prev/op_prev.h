/*
 * tests/plugins/abi_prev/op_prev.h - the plugin ABI as it was at version 2,
 * frozen: a verbatim copy of include/mxop/op.h before version 3 appended
 * mxop_plugin_info_t.abi_required / tensor_size and mxop_host_t.tensor_size.
 *
 * tests/plugins/abi_prev.c is built against this header, never against
 * the current one, so that tests/test_abi.c proves that a library built
 * with the previous, smaller structs loads and runs in today's worker.
 * Never edit the declarations below: they are what such a library has.
 */
/*
 * mxop/op.h - the plugin ABI: everything an op library needs, in one header.
 *
 * An op library links against nothing from mxop.  It is built with one line:
 *
 *     cc -shared -fPIC -O3 $(pkg-config --cflags mxop-plugin) myops.c -o myops.so
 *
 * and exports two symbols, both made by the macros at the end of this file:
 *
 *   - `mxop_plugin_info`, a struct naming the ABI version the library was
 *     compiled against (checked before any of its code runs), and
 *   - `mxop_plugin_init`, called once in the worker with the host table; it
 *     registers the library's ops with host->register_op().
 *
 * Compatibility rules (the SQLite / Redis-module pattern):
 *   - Every struct that crosses the boundary starts with `struct_size`.
 *     The host reads a plugin's struct by the size the plugin compiled with;
 *     fields the plugin does not know about read as zero.
 *   - New members are added at the end only, marked with the ABI version
 *     that brought them.  Nothing is ever removed or reordered.
 *   - A library whose mxop_plugin_info.abi_version is newer than the
 *     worker's is refused at load with MXOP_EABI and a message, never run.
 *
 * Ownership: every pointer an op receives is borrowed for the duration of
 * that call only, unless its comment says otherwise.
 *
 * Includes only <stddef.h> and <stdint.h> (through types.h).
 */
#ifndef MXOP_OP_PREV_H
#define MXOP_OP_PREV_H

#include "mxop/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The plugin ABI version this header describes.
 *
 *   1: the first ABI, and the GPU members (forward_gpu ..., gpu_workspace,
 *      gpu_gemm, rng_seed) appended to it before any release was made.
 *   2: declared attributes (mxop_op_def_t.attrs / num_attrs), the typed
 *      attribute readers attr_string, attr_int_list, attr_float_list, the
 *      host routines for every dtype, convert, and outputs of data-dependent
 *      shape (dynamic_outputs, alloc_output).
 *
 * A library built against version 2 that uses nothing of version 2 still
 * needs a version 2 worker: the worker refuses a newer version at load.
 */
#define MXOP_ABI_VERSION 2

/**
 * A tensor as an op sees it.  `data` points into shared memory mapped in the
 * worker: inputs are mapped read-only (writing one faults, which ends only
 * the worker), outputs and declared mutated inputs read-write.  For a
 * tensor in a device region (`device` >= 0) `data` is a CUDA device pointer
 * into the engine's allocation, opened in the worker through CUDA IPC; GPU
 * memory has no read-only mapping, so nothing stops a write to an input.
 * `strides` are in elements; for a contiguous row-major tensor (always the
 * case unless the op sets MXOP_OP_STRIDED) they are the usual products.
 */
typedef struct mxop_tensor {
    void *data; /* host memory, or a device pointer when device >= 0 */
    int32_t dtype;
    int32_t ndim;
    int64_t shape[MXOP_MAX_DIMS];
    int64_t strides[MXOP_MAX_DIMS];
    int32_t req;    /* outputs: enum mxop_req; inputs: MXOP_REQ_WRITE */
    int32_t device; /* -1: host memory; >= 0: GPU ordinal */
    size_t size;    /* number of elements (product of shape) */
} mxop_tensor_t;

/**
 * The per-call context, owned by the worker.  During mxop_plugin_init it is
 * the registration context; during a call it carries the attributes, the
 * workspace, the random generator and the error message of that call.
 */
typedef struct mxop_ctx mxop_ctx_t;

/**
 * One declared attribute of an op (ABI version 2).  An op that declares its
 * attributes gets them checked by the worker before any of its callbacks
 * runs: an unknown key, a value that does not parse as the declared type or
 * a missing required attribute is refused with MXOP_EATTR, naming the op,
 * the key and the attributes the op knows.  The typed readers (attr_int ...)
 * return the declared default when the call omits the key.  The bindings
 * read the declarations (mxop_op_attr in client.h) to build keyword
 * signatures.
 *
 * This struct is frozen: arrays of it cross the boundary, so it can never
 * grow.  Strings are borrowed for the duration of register_op (the worker
 * copies them).
 */
typedef struct mxop_attr_decl {
    const char *name;          /* [A-Za-z0-9_]+, unique within the op */
    int32_t type;              /* enum mxop_attr_type */
    int32_t required;          /* nonzero: every call must give it (no default then) */
    const char *default_value; /* the default as a string in the type's syntax; NULL: none */
    const char *doc;           /* one line for help texts; may be NULL */
} mxop_attr_decl_t;

/**
 * One op.  The library fills one with designated initialisers and passes it
 * to host->register_op(); the worker copies it, so it may live on the stack.
 *
 * Forward:  in = the op's inputs,  out = its outputs.
 * Backward: in = [gradients of the outputs (num_outputs),
 *                 the forward inputs (num_inputs),
 *                 the forward outputs (num_outputs)],
 *           out = gradients of the inputs (num_inputs), each with its req.
 *
 * Every callback returns 0 or a negative MXOP_E* code; on failure it should
 * say why with host->set_error(), which returns the code it was given.
 *
 * Before any callback runs, the worker has checked: the number of inputs
 * and outputs, that every descriptor lies inside its region, and (through
 * infer_type and infer_shape) that the outputs have the dtypes and shapes
 * the op expects.  An op therefore needs to check only its attributes.
 */
typedef struct mxop_op_def {
    uint32_t struct_size; /* sizeof(mxop_op_def_t) as compiled by the plugin */

    /* ---- ABI version 1 ---- */
    const char *name;        /* borrowed for the library's lifetime; [A-Za-z0-9_.]+ */
    const char *description; /* borrowed; may be NULL */
    int32_t num_inputs;      /* >= 0, or -1 for "any number >= min_inputs" */
    int32_t min_inputs;      /* used when num_inputs == -1 */
    int32_t num_outputs;     /* >= 0 */
    uint32_t flags;          /* enum mxop_op_flags */
    uint64_t mutated_inputs; /* bit i set: the op writes input i in place */

    /**
     * Validates the attributes (host->attr_*).  NULL: any attributes pass.
     * Runs before every other callback of a call.
     */
    int (*check_attrs)(mxop_ctx_t *ctx);

    /**
     * Output shapes from input shapes.  NULL: each output takes the shape of
     * input 0.  Return MXOP_ESHAPE with a message for incompatible inputs.
     */
    int (*infer_shape)(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                       mxop_shape_t *out);

    /**
     * Output dtypes from input dtypes.  NULL: every input must have the dtype
     * of input 0 and every output gets it too.  Return MXOP_EDTYPE with a
     * message for a dtype the op does not support.
     */
    int (*infer_type)(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out);

    /** Stateless forward and backward.  backward may be NULL. */
    int (*forward)(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out);
    int (*backward)(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                    mxop_tensor_t *out);

    /**
     * Stateful ops.  state_create makes an instance for inputs of the given
     * shapes and dtypes (and the call's attributes) and stores it in *state
     * (owned by the op until state_destroy).  The worker calls state_destroy
     * when the client destroys the state or its session ends.
     * state_forward / state_backward have the layout of forward / backward.
     * An op is stateful when state_create is set; it then needs
     * state_forward and state_destroy, and forward is not used.
     */
    int (*state_create)(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in_shapes,
                        const int32_t *in_dtypes, void **state);
    int (*state_forward)(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out);
    int (*state_backward)(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                          int n_out, mxop_tensor_t *out);
    void (*state_destroy)(void *state);

    /* ---- ABI version 1, appended: GPU ---- */

    /**
     * The same callbacks for device tensors (CUDA memory; every tensor of
     * the call has `device` >= 0, all the same ordinal).  The worker calls
     * these instead of forward / backward / state_forward / state_backward
     * when a call's tensors are on a GPU, with that device current and
     * host->cuda_stream() giving the stream to launch on; it synchronises
     * that stream before the result goes back, so a callback need not.
     * NULL: the op cannot run on device tensors (MXOP_ENOT_SUPPORTED).
     * An op may have only GPU callbacks; host tensors then answer
     * MXOP_ENOT_SUPPORTED.  See docs/op-author-guide.md, "GPU ops".
     */
    int (*forward_gpu)(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out);
    int (*backward_gpu)(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out);
    int (*state_forward_gpu)(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                             int n_out, mxop_tensor_t *out);
    int (*state_backward_gpu)(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                              int n_out, mxop_tensor_t *out);

    /* ---- ABI version 2 ---- */

    /**
     * Declared attributes: `num_attrs` entries of `attrs` (see
     * mxop_attr_decl_t).  num_attrs == 0: the op declares nothing and its
     * calls may carry any attributes, which check_attrs then judges alone.
     * With declarations check_attrs still runs, after the worker's check,
     * for what a type cannot say (ranges, combinations).
     */
    const mxop_attr_decl_t *attrs;
    int32_t num_attrs;

    /**
     * Outputs whose shape is known only during forward (bit j: output j),
     * e.g. the selected elements of a mask.  infer_shape gives such an
     * output's largest shape: the caller allocates that much (in shared
     * memory, as any output).  forward then calls host->alloc_output with
     * the real shape, which must fit, and writes the data where it says;
     * the caller gets the output with its real shape.  In backward, the
     * gradient of such an output and the output itself have that real shape.
     */
    uint64_t dynamic_outputs;
} mxop_op_def_t;

/**
 * The host table: what the worker offers an op.  Passed to mxop_plugin_init;
 * the pointer stays valid for the library's lifetime, so a library may keep
 * it in a static.  Read members only if struct_size covers them.
 */
typedef struct mxop_host {
    uint32_t struct_size; /* sizeof(mxop_host_t) of the worker */
    uint32_t abi_version; /* MXOP_ABI_VERSION of the worker */

    /* ---- ABI version 1 ---- */

    /** Registers an op (during mxop_plugin_init only).  The def is copied. */
    int (*register_op)(mxop_ctx_t *ctx, const mxop_op_def_t *def);

    /**
     * Records a printf-style message for the current call (or init) and
     * returns `code`, so that `return host->set_error(ctx, MXOP_EATTR, ...)`
     * reads naturally.  The message reaches the engine's caller.
     */
    int (*set_error)(mxop_ctx_t *ctx, int code, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

    /** The call's attributes as strings.  NULL if the key is absent. */
    const char *(*attr_get)(mxop_ctx_t *ctx, const char *key);
    int (*attr_count)(mxop_ctx_t *ctx);
    const char *(*attr_key)(mxop_ctx_t *ctx, int i);
    const char *(*attr_value)(mxop_ctx_t *ctx, int i);

    /**
     * Typed attribute readers: *out gets the parsed value, or `dflt` when
     * the key is absent.  A present value that does not parse returns
     * MXOP_EATTR with a message naming the key (already recorded).
     * Booleans accept 1/0/true/false.
     */
    int (*attr_int)(mxop_ctx_t *ctx, const char *key, int64_t dflt, int64_t *out);
    int (*attr_float)(mxop_ctx_t *ctx, const char *key, double dflt, double *out);
    int (*attr_bool)(mxop_ctx_t *ctx, const char *key, int dflt, int *out);

    /**
     * Temporary host memory for this call, 64-byte aligned, valid until the
     * callback returns (the worker reuses it).  NULL if it cannot be had.
     */
    void *(*workspace)(mxop_ctx_t *ctx, size_t bytes);

    /**
     * The call's random generator.  Seeded per call: by the caller's seed
     * when it gave one (reproducible), else from the session's sequence.
     */
    uint64_t (*rng_u64)(mxop_ctx_t *ctx);
    double (*rng_uniform)(mxop_ctx_t *ctx); /* [0, 1) */
    double (*rng_normal)(mxop_ctx_t *ctx);  /* mean 0, variance 1 */

    /**
     * The CUDA stream to launch on (a cudaStream_t): in a GPU call the
     * worker's non-blocking stream of the call's device, NULL in a CPU call.
     */
    void *(*cuda_stream)(mxop_ctx_t *ctx);

    /*
     * Core tensor routines.  Pointers are borrowed; n counts elements.
     * Dtypes (ABI version 2; version 1 workers took f32 and f64 only):
     *   gemm: f32, f64, and f16 / bf16 (widened to f32 in the call's
     *         workspace, accumulated in f32, rounded back once);
     *   add, mul, fill, copy, sum: every dtype (integers wrap in add and
     *         mul; bool add is or, mul is and);
     *   axpy: every dtype but bool (non-float ones computed in double,
     *         then rounded and saturated like convert below).
     * Anything else answers MXOP_EDTYPE with a message.
     */

    /** C = alpha * op(A) op(B) + beta * C, row-major, through BLAS. */
    int (*gemm)(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                double beta, void *c, int64_t ldc);
    /** out = a + b, out = a * b (out may alias a or b). */
    int (*add)(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b, void *out);
    int (*mul)(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b, void *out);
    /** y += alpha * x. */
    int (*axpy)(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double alpha, const void *x, void *y);
    /** out[i] = value. */
    int (*fill)(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double value, void *out);
    /** dst = src (no overlap). */
    int (*copy)(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *src, void *dst);
    /** *out = sum of x (accumulated in double). */
    int (*sum)(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *x, double *out);

    /* ---- ABI version 1, appended: GPU ---- */

    /**
     * Temporary device memory for this call on the call's device, 256-byte
     * aligned, valid until the callback returns (the worker reuses it; the
     * stream is synchronised before it does).  NULL in a CPU call or if it
     * cannot be had (the reason is recorded with set_error).
     */
    void *(*gpu_workspace)(mxop_ctx_t *ctx, size_t bytes);

    /**
     * gemm on device pointers through cuBLAS, on the call's stream: the
     * arguments of gemm above (row-major, MXOP_F32 / MXOP_F64), for a GPU
     * call only (MXOP_ENO_DEVICE otherwise).  A cuBLAS failure returns
     * MXOP_ECUDA with cuBLAS's status in the message.
     */
    int (*gpu_gemm)(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                    double beta, void *c, int64_t ldc);

    /**
     * The call's 64-bit random seed: the caller's seed when it gave one
     * (reproducible), else a fresh one from the session's sequence.  The
     * host generator (rng_u64 ...) starts from the same seed.  For device
     * random numbers feed it to curand_init / Philox (seed, subsequence =
     * thread, offset 0): every call gets its own stream of numbers.
     */
    uint64_t (*rng_seed)(mxop_ctx_t *ctx);

    /* ---- ABI version 2 ---- */

    /**
     * The attribute `key` as a string: the call's value, else the declared
     * default, else `dflt` (which may be NULL).  Never fails.
     */
    const char *(*attr_string)(mxop_ctx_t *ctx, const char *key, const char *dflt);

    /**
     * List attributes ("2,3", "(2, 3)" or "[2, 3]"; "" or "()" is empty).
     * Up to `cap` values go to out[]; *n gets the count.  Absent and without
     * a declared default: *n = 0 and 0 is returned.  A value that does not
     * parse, or has more than `cap` entries, returns MXOP_EATTR with a
     * message naming the key (already recorded).
     */
    int (*attr_int_list)(mxop_ctx_t *ctx, const char *key, int64_t *out, int cap, int *n);
    int (*attr_float_list)(mxop_ctx_t *ctx, const char *key, double *out, int cap, int *n);

    /**
     * dst[i] = src[i] converted from src_dtype to dst_dtype (no overlap
     * unless the dtypes are equal).  Floats round to nearest even; to an
     * integer a value rounds to nearest and saturates (NaN gives 0); to
     * bool, nonzero is 1.  Integers to integers convert exactly (saturating).
     */
    int (*convert)(mxop_ctx_t *ctx, int64_t n, int32_t src_dtype, const void *src,
                   int32_t dst_dtype, void *dst);

    /**
     * Gives dynamic output `i` (mxop_op_def_t.dynamic_outputs) its real
     * shape, during forward: out[i]'s shape, strides and size change to it,
     * and its data pointer is returned (the caller's memory, in shared
     * memory).  NULL, with the reason recorded, when i is not a dynamic
     * output, the shape is invalid or larger than what infer_shape allowed,
     * or outside a forward.  Every dynamic output must get its shape, or
     * the call fails.
     */
    void *(*alloc_output)(mxop_ctx_t *ctx, int i, int32_t ndim, const int64_t *shape);
} mxop_host_t;

/**
 * Whether the host table `host` (a const mxop_host_t *) has `member`: a
 * library built against a newer header may run in an older worker only if
 * it tests what it uses, e.g.
 *     if (MXOP_HOST_HAS(host, attr_string)) s = host->attr_string(ctx, "mode", "sum");
 */
#define MXOP_HOST_HAS(host, member)                                                                \
    ((host)->struct_size >= offsetof(mxop_host_t, member) + sizeof((host)->member) &&              \
     (host)->member != NULL)

/** What a library says about itself; checked before its init runs. */
typedef struct mxop_plugin_info {
    uint32_t struct_size;
    uint32_t abi_version; /* MXOP_ABI_VERSION the library was built with */
    const char *name;     /* a short name for messages */
    const char *version;  /* the library's own version string */
} mxop_plugin_info_t;

/** The signature of the exported init function. */
typedef int (*mxop_plugin_init_fn)(mxop_ctx_t *ctx, const mxop_host_t *host);

#if defined(__GNUC__)
#define MXOP_EXPORT __attribute__((visibility("default")))
#else
#define MXOP_EXPORT
#endif

/*
 * Builds a function twice, for AVX2 and for the baseline x86-64 (SSE2), and
 * has the dynamic loader pick the one this CPU runs when the library loads.
 * For the hot loop of an op: a library built for the baseline cannot use
 * AVX2's 32-byte vectors, and one built with -mavx2 would not load on a
 * CPU without it.  relu of 1 MiB: 23 us with the baseline loop, 21 us
 * with this (docs/op-author-guide.md, "Threads, OpenMP and
 * vectorisation").  Empty where the compiler or the target has no
 * target_clones.
 */
#if defined(__x86_64__) && defined(__linux__) &&                                                   \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6) ||                                \
     (defined(__clang__) && __clang_major__ >= 14)) &&                                             \
    !defined(__CUDACC__)
#define MXOP_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MXOP_VECTOR_CLONES
#endif

/* C linkage for the two exported symbols when a library is C++ or CUDA. */
#ifdef __cplusplus
#define MXOP_EXTERN_C extern "C"
#else
#define MXOP_EXTERN_C extern
#endif

/**
 * Declares the library.  Use once, at file scope:
 *     MXOP_PLUGIN("myops", "1.0");
 */
#define MXOP_PLUGIN(name_, version_)                                                               \
    MXOP_EXTERN_C MXOP_EXPORT const mxop_plugin_info_t mxop_plugin_info;                           \
    const mxop_plugin_info_t mxop_plugin_info = {sizeof(mxop_plugin_info_t), MXOP_ABI_VERSION,     \
                                                 (name_), (version_)}

/**
 * Defines the init function:
 *     MXOP_PLUGIN_INIT(ctx, host) { return host->register_op(ctx, &def); }
 */
#define MXOP_PLUGIN_INIT(ctx_, host_)                                                              \
    MXOP_EXTERN_C MXOP_EXPORT int mxop_plugin_init(mxop_ctx_t *ctx_, const mxop_host_t *host_);    \
    int mxop_plugin_init(mxop_ctx_t *ctx_, const mxop_host_t *host_)

#ifdef __cplusplus
}
#endif

#endif /* MXOP_OP_PREV_H */
