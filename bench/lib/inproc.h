/*
 * bench/lib/inproc.h - an op library loaded into the benchmark itself.
 *
 * The in-process baseline of the benchmark: the same .so the worker loads,
 * dlopen'd here and initialised with a host table of this file, whose
 * tensor routines call CBLAS directly, as the worker's do.  A forward is
 * then one plain function call with no checks around it, the floor that
 * any out-of-process call is measured against.
 */
#ifndef MXOP_BENCH_LIB_INPROC_H
#define MXOP_BENCH_LIB_INPROC_H

#include <stddef.h>

#include "mxop/op.h"

#define MXB_INPROC_MAX_OPS 16

typedef struct mxb_inproc mxb_inproc_t;

/**
 * Loads the library at `path` (borrowed) and runs its init.  *out is freed
 * with mxb_inproc_close.  Returns 0, or -1 with the reason in err[errlen].
 */
int mxb_inproc_open(const char *path, mxb_inproc_t **out, char *err, size_t errlen);

/** Closes the library; accepts NULL. */
void mxb_inproc_close(mxb_inproc_t *lib);

/** The registered definition of op `name`, or NULL. */
const mxop_op_def_t *mxb_inproc_op(mxb_inproc_t *lib, const char *name);

/**
 * Calls the op's forward with `attrs` (borrowed; NULL or {"k", "v", ..., NULL}).
 * Returns what the op returned; its message, if it set one, in
 * mxb_inproc_error.
 */
int mxb_inproc_forward(mxb_inproc_t *lib, const mxop_op_def_t *op, const char *const *attrs,
                       int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out);

/** The message the last call set with set_error ("" if none). */
const char *mxb_inproc_error(const mxb_inproc_t *lib);

/**
 * Describes contiguous row-major memory as a tensor (data borrowed), with
 * req MXOP_REQ_WRITE and host memory.
 */
mxop_tensor_t mxb_tensor(void *data, int32_t dtype, int32_t ndim, const int64_t *shape);

#endif /* MXOP_BENCH_LIB_INPROC_H */
