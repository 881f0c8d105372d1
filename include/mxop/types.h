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

/** Flags of an op definition. */
enum mxop_op_flags {
    /** The op accepts non-contiguous (strided) tensors. */
    MXOP_OP_STRIDED = 1u << 0,
};

/** The type of a declared attribute.  The numbers travel on the wire: never renumber. */
enum mxop_attr_type {
    MXOP_ATTR_INT = 1,        /* a 64-bit integer, e.g. "-1" */
    MXOP_ATTR_FLOAT = 2,      /* a finite double, e.g. "0.5" */
    MXOP_ATTR_BOOL = 3,       /* 1, 0, true or false */
    MXOP_ATTR_STRING = 4,     /* any string */
    MXOP_ATTR_INT_LIST = 5,   /* integers separated by commas, e.g. "2,3" or "(2, 3)" */
    MXOP_ATTR_FLOAT_LIST = 6, /* numbers separated by commas, e.g. "[0.5, 1]" */
};

/**
 * Every dtype once: X(enum name, short name, element size in bytes).  The
 * one table from which names and sizes are derived, here and in the
 * bindings' checks; use it for your own switch over dtypes:
 *     #define CASE(e, name, size) case e: ...
 *     switch (dtype) { MXOP_DTYPE_MAP(CASE) }
 */
#define MXOP_DTYPE_MAP(X)                                                                          \
    X(MXOP_F32, "f32", 4)                                                                          \
    X(MXOP_F64, "f64", 8)                                                                          \
    X(MXOP_F16, "f16", 2)                                                                          \
    X(MXOP_BF16, "bf16", 2)                                                                        \
    X(MXOP_I32, "i32", 4)                                                                          \
    X(MXOP_I64, "i64", 8)                                                                          \
    X(MXOP_U8, "u8", 1)                                                                            \
    X(MXOP_I8, "i8", 1)                                                                            \
    X(MXOP_BOOL, "bool", 1)

/** Size in bytes of one element of `dtype`, or 0 for an unknown dtype. */
static inline size_t mxop_dtype_size(int32_t dtype)
{
    switch (dtype) {
#define MXOP_DTYPE_SIZE_CASE_(e, name, size)                                                       \
    case e: return size;
        MXOP_DTYPE_MAP(MXOP_DTYPE_SIZE_CASE_)
#undef MXOP_DTYPE_SIZE_CASE_
    default: return 0;
    }
}

/** The short name of `dtype` ("f32", "bf16", ...), or "unknown". */
static inline const char *mxop_dtype_name(int32_t dtype)
{
    switch (dtype) {
#define MXOP_DTYPE_NAME_CASE_(e, name, size)                                                       \
    case e: return name;
        MXOP_DTYPE_MAP(MXOP_DTYPE_NAME_CASE_)
#undef MXOP_DTYPE_NAME_CASE_
    default: return "unknown";
    }
}

#endif /* MXOP_TYPES_H */
