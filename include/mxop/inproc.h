/*
 * mxop/inproc.h - running an op library inside the calling process, for
 * debugging: no daemon, no worker, no sandbox, no shared memory.
 *
 * Link with build/lib/libmxop-inproc.a (the worker's own op runtime, so
 * that the library sees the same host table and the same checks as in a
 * worker) and -lprotobuf-c -ldl -lm plus the BLAS the worker uses; see
 * docs/op-author-guide.md, "Debugging".  A crash in an op is a crash of
 * the calling process: that is the point, under gdb or a sanitizer.
 *
 * Not thread-safe (one call at a time, as in a worker); stateful ops and
 * GPU tensors are not supported here (MXOP_ENOT_SUPPORTED).
 */
#ifndef MXOP_INPROC_H
#define MXOP_INPROC_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Loads an op library (a path, as dlopen takes it) and registers its ops. */
int mxop_inproc_load(const char *path);

/**
 * Runs op `name` forward (backward = 0) or backward on caller-owned tensors,
 * after the checks a worker makes: counts, declared attributes, check_attrs,
 * and the outputs' dtypes and shapes against inference.  Tensors whose
 * strides are all zero are taken as contiguous (strides filled in).
 * attrs: NULL or {"key", "value", ..., NULL}.
 */
int mxop_inproc_call(const char *name, int backward, const char *const *attrs, int n_in,
                     const mxop_tensor_t *in, int n_out, mxop_tensor_t *out);

/** Inference as mxop_infer does it. */
int mxop_inproc_infer(const char *name, const char *const *attrs, int n_in,
                      const int32_t *in_dtypes, const mxop_shape_t *in_shapes, int n_out,
                      int32_t *out_dtypes, mxop_shape_t *out_shapes);

/** The message of the last failure ("" after a success). */
const char *mxop_inproc_error(void);

/** A tensor over caller memory: contiguous, on the host, req write. */
static inline mxop_tensor_t mxop_inproc_tensor(void *data, int32_t dtype, int32_t ndim,
                                               const int64_t *shape)
{
    mxop_tensor_t t;
    size_t n = 1;
    int64_t s = 1;
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < MXOP_MAX_DIMS; i++)
        t.shape[i] = t.strides[i] = 0;
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    for (int i = ndim - 1; i >= 0; i--) {
        t.strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
    t.req = MXOP_REQ_WRITE;
    t.device = -1;
    t.size = n;
    return t;
}

#ifdef __cplusplus
}
#endif

#endif /* MXOP_INPROC_H */
