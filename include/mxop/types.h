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
    /**
     * The op comes from an MXNet extension library: a binding passes its
     * attributes as MXNet does (Python's str() of each value: "True", "1.0",
     * "[2, 3]"), since the library compares the strings it was written for.
     */
    MXOP_OP_MXNET = 1u << 1,
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
 * Every dtype once: X(enum name, short name, element size in bytes,
 * framework name).  The framework name is the one NumPy's dtype.name and
 * PyTorch's str(dtype) (less "torch.") give.  The one table from which
 * names and sizes are derived, here, in libmxop (mxop_dtype_info,
 * mxop_dtype_from_name) and through those in the bindings; use it for
 * your own switch over dtypes:
 *     #define CASE(e, name, size, fw) case e: ...
 *     switch (dtype) { MXOP_DTYPE_MAP(CASE) }
 */
#define MXOP_DTYPE_MAP(X)                                                                          \
    X(MXOP_F32, "f32", 4, "float32")                                                               \
    X(MXOP_F64, "f64", 8, "float64")                                                               \
    X(MXOP_F16, "f16", 2, "float16")                                                               \
    X(MXOP_BF16, "bf16", 2, "bfloat16")                                                            \
    X(MXOP_I32, "i32", 4, "int32")                                                                 \
    X(MXOP_I64, "i64", 8, "int64")                                                                 \
    X(MXOP_U8, "u8", 1, "uint8")                                                                   \
    X(MXOP_I8, "i8", 1, "int8")                                                                    \
    X(MXOP_BOOL, "bool", 1, "bool")

/** Size in bytes of one element of `dtype`, or 0 for an unknown dtype. */
static inline size_t mxop_dtype_size(int32_t dtype)
{
    switch (dtype) {
#define MXOP_DTYPE_SIZE_CASE_(e, name, size, fw)                                                   \
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
#define MXOP_DTYPE_NAME_CASE_(e, name, size, fw)                                                   \
    case e: return name;
        MXOP_DTYPE_MAP(MXOP_DTYPE_NAME_CASE_)
#undef MXOP_DTYPE_NAME_CASE_
    default: return "unknown";
    }
}

/**
 * Half-precision conversions, for ops that take MXOP_F16 (IEEE binary16)
 * or MXOP_BF16 (the top half of a binary32).  Values travel as uint16_t;
 * rounding is to nearest, ties to even; NaN stays NaN, overflow is inf.
 */
static inline float mxop_f16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        /* Zero or subnormal: man * 2^-24, exact in a float. */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    v.u = exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112u) << 23) | (man << 13);
    return v.f;
}

static inline uint16_t mxop_f32_to_f16(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {f};
    uint16_t sign = (uint16_t)((v.u >> 16) & 0x8000u);
    uint32_t ax = v.u & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    uint32_t e = ax >> 23;
    if (e < 113) {
        /* A binary16 subnormal (or zero): round full * 2^(e-150) to a multiple of 2^-24. */
        if (e < 102)
            return sign;
        uint32_t full = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t m = full >> shift, rem = full & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (m & 1u)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t h = ((e - 112) << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right answer, up to inf */
    return (uint16_t)(sign | h);
}

static inline float mxop_bf16_to_f32(uint16_t b)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)b << 16};
    return v.f;
}

static inline uint16_t mxop_f32_to_bf16(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}

/**
 * Writes "[2,3,4]" (or "[]" for a scalar) into buf, truncated to len;
 * returns buf.  For messages: "x has shape %s".
 */
static inline char *mxop_shape_format(char *buf, size_t len, int32_t ndim, const int64_t *dims)
{
    size_t at = 0;
    if (len == 0)
        return buf;
    buf[at++] = '[';
    for (int32_t i = 0; i < ndim && at < len; i++) {
        char tmp[24];
        int n = 0;
        int64_t v = dims[i];
        uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        do
            tmp[n++] = (char)('0' + u % 10);
        while ((u /= 10) != 0);
        if (v < 0)
            tmp[n++] = '-';
        if (i > 0 && at < len)
            buf[at++] = ',';
        while (n > 0 && at < len)
            buf[at++] = tmp[--n];
    }
    if (at < len)
        buf[at++] = ']';
    buf[at < len ? at : len - 1] = '\0';
    return buf;
}

#endif /* MXOP_TYPES_H */
