/*
 * mxop/types.h - the vocabulary shared by the plugin ABI (op.h) and the
 * engine API (client.h): dtypes, write requests, shapes.
 *
 * Includes only <stddef.h> and <stdint.h>; compiles on its own.
 */
#ifndef MXOP_TYPES_H
#define MXOP_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/** The most dimensions a tensor may have. */
#define MXOP_MAX_DIMS 8

/** The most inputs (or outputs) one call may carry. */
#define MXOP_MAX_TENSORS 64

/** Element types.  The numbers travel on the wire: never renumber. */
enum mxop_dtype {
    MXOP_F32 = 0,
    MXOP_F64 = 1,
    MXOP_F16 = 2,
    MXOP_BF16 = 3,
    MXOP_I32 = 4,
    MXOP_I64 = 5,
    MXOP_U8 = 6,
    MXOP_I8 = 7,
    MXOP_BOOL = 8,
    MXOP_DTYPE_COUNT = 9
};

/**
 * What an op must do with an output buffer: overwrite it, add its result
 * to what is there (gradient accumulation), or nothing (output unused).
 */
enum mxop_req { MXOP_REQ_WRITE = 0, MXOP_REQ_ADD = 1, MXOP_REQ_NULL = 2 };

/** A shape: ndim in [0, MXOP_MAX_DIMS], dims[i] >= 0. */
typedef struct mxop_shape {
    int32_t ndim;
    int64_t dims[MXOP_MAX_DIMS];
} mxop_shape_t;

/** Size in bytes of one element of `dtype`, or 0 for an unknown dtype. */
static inline size_t mxop_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case MXOP_F64:
    case MXOP_I64: return 8;
    case MXOP_F32:
    case MXOP_I32: return 4;
    case MXOP_F16:
    case MXOP_BF16: return 2;
    case MXOP_U8:
    case MXOP_I8:
    case MXOP_BOOL: return 1;
    default: return 0;
    }
}

#endif /* MXOP_TYPES_H */
