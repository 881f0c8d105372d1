/*
 * server/worker/runtime.h - what another component may use of the worker's
 * op runtime: the op table, the call prologue and epilogue, the checks and
 * inference, as inproc/ drives them by direct calls instead of the data
 * channel.
 *
 * The worker's private header (worker.h) includes this one; nothing outside
 * server/worker/ includes worker.h.  The context a callback receives stays
 * opaque here: only the worker's files read its fields.
 */
#ifndef MXOP_SERVER_WORKER_RUNTIME_H
#define MXOP_SERVER_WORKER_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "mxop/op.h"

/* The longest detail message a reply carries (set_error truncates to it). */
#define MXOP__W_MSG_MAX 1024

/* The most attributes one call may carry. */
#define MXOP__W_MAX_ATTRS 64

/* The longest op name (without the NUL); fits the status page's op field. */
#define MXOP__W_NAME_MAX 63

/* A call's input count bound: backward takes ograds, inputs and outputs. */
#define MXOP__W_MAX_IN (3 * MXOP_MAX_TENSORS)
#define MXOP__W_MAX_OUT MXOP_MAX_TENSORS

/* An op's declarations in their wire form (common.proto); the runtime's callers never read them. */
struct Mxop__AttrDecl;

/* ------------------------------------------------------------------------ */
/* Ops (ops.c, plugin_loader.c). */

typedef struct mxop__worker_op {
    mxop_op_def_t def; /* the plugin's def, zero beyond its struct_size */
    char name[MXOP__W_NAME_MAX + 1];
    char *description; /* owned; "" when the op gave none */
    uint32_t lib;      /* index into the library table */
    uint32_t index;    /* OpInfo.index */
    /* sizeof(mxop_tensor_t) its library was built with (op.h, rule 4). */
    uint32_t tensor_stride;

    /* Declared attributes (attrs.c): owned copies; def.attrs points at them. */
    int n_decls;
    mxop_attr_decl_t *decls;
    struct Mxop__AttrDecl *pb_decls; /* their wire form, pointing into decls */
    struct Mxop__AttrDecl **pb_ptrs;
} mxop__worker_op_t;

/**
 * Loads the library at `path` (named `name` in messages), runs its init
 * and registers its ops.  With `fd` >= 0 (taken: the descriptor the daemon
 * opened) the file is never opened by path: that descriptor's content is
 * what loads (integrity.c, with `expect` and `where` as there); `path` then
 * only names it.  fd -1 (in-process use, no daemon) loads by path.  On
 * success *lib is its index (an already loaded library answers its
 * existing index).  Returns 0 or MXOP_ELIB_INVALID, MXOP_EABI,
 * MXOP_ELIB_INIT, MXOP_EDUPLICATE, MXOP_EINVAL, MXOP_ENOMEM, MXOP_EDENIED,
 * with the reason in msg[msglen]; a failed library leaves nothing behind.
 */
int mxop__plugin_load(const char *path, const char *name, int fd, const char *expect,
                      const char *where, uint32_t *lib, char *msg, size_t msglen);

/** The op named `name`, or NULL. */
const mxop__worker_op_t *mxop__op_find(const char *name);

/* ------------------------------------------------------------------------ */
/* A call: its attributes, prologue and epilogue (host.c), checks and tensors. */

/* A call's attributes as its op reads them: C strings, valid until the next call. */
typedef struct mxop__call_attrs {
    size_t n; /* how many the call carries; past MXOP__W_MAX_ATTRS none is filled in */
    const char *keys[MXOP__W_MAX_ATTRS];
    const char *vals[MXOP__W_MAX_ATTRS];
} mxop__call_attrs_t;

/* The one context of this process (host.c), handed to every plugin callback. */
extern struct mxop_ctx mxop__ctx;

/**
 * The start of every call that runs op code (Invoke, Infer, StateCreate,
 * and the in-process runner): the context (mxop__ctx_begin_call), the call
 * published in the status page with its deadline (0: none) and, when `in`
 * is not NULL, its inputs, then the op's check_attrs.  Returns 0, the call
 * then ended by mxop__call_end; or an error with msg[msglen] set, the call
 * already ended.
 */
int mxop__call_begin(const struct mxop__worker_op *op, uint64_t call_id, uint32_t deadline_ms,
                     const struct mxop__call_attrs *attrs, uint64_t seed, int n_in,
                     const mxop_tensor_t *in, char *msg, size_t msglen);

/** The end of a call begun by mxop__call_begin: the status page, then the context. */
void mxop__call_end(void);

/* Call checks (checks.c).  Each returns 0 or a code with the reason in msg. */

/**
 * Checks the tensor counts of a call of `op`: forward (backward 0) or
 * backward.  check_out 0 skips the outputs (StateCreate has none).  For
 * backward, *k gets the number of forward inputs.  MXOP_EARITY.
 */
int mxop__check_arity(const mxop__worker_op_t *op, int backward, size_t n_in, size_t n_out,
                      int check_out, int *k, char *msg, size_t msglen);

/**
 * Runs the op's type and shape inference (or the defaults) on n_in inputs.
 * Outputs the op leaves open (the defaults with no input) come back as
 * dtype -1 and ndim -1: anything goes.
 */
int mxop__infer(const mxop__worker_op_t *op, int n_in, const int32_t *dt, const mxop_shape_t *sh,
                int n_out, int32_t *odt, mxop_shape_t *osh, char *msg, size_t msglen);

/**
 * Turns a callback's non-zero return into the reply: the code if it is a
 * known MXOP_E* code, else MXOP_EOP_FAILED; the op's message, else one
 * naming the op and the callback.
 */
int mxop__op_error(const mxop__worker_op_t *op, int rc, const char *callback, char *msg,
                   size_t msglen);

/*
 * The arrays to pass to op `op`: in and out themselves when its library
 * has the worker's stride (no copy), else copies at its stride held until
 * the next call, with members the worker does not know zeroed.  A forward
 * of an op with dynamic outputs records the copy for alloc_output
 * (tensor_view.c).
 */
void mxop__tensor_view(const mxop__worker_op_t *op, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out, const mxop_tensor_t **lib_in, mxop_tensor_t **lib_out);

#endif /* MXOP_SERVER_WORKER_RUNTIME_H */
