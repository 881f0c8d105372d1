/*
 * common/mxnet_abi.h - facts of MXNet's extension-library ABI (lib_api
 * version 11: MXNet 1.9.x and 2.0) that both sides of mxop's MXNet support
 * need: the worker running MXNet libraries (server/worker/mxnet/) and the
 * proxy MXNet loads (mxnet_proxy/).  Written from the ABI's documented
 * numbers (docs/mxnet.md), no MXNet code.
 */
#ifndef MXOP_COMMON_MXNET_ABI_H
#define MXOP_COMMON_MXNET_ABI_H

#include <stdint.h>

#include "mxop/types.h"

/* MX_LIBRARY_VERSION: MXNet aborts unless a library's is exactly its own. */
#define MXOP__MX_LIB_VERSION 11

/* MXReturnValue. */
#define MXOP__MX_FAIL 0
#define MXOP__MX_OK 1

/* MXNet's dtype numbers (MXDType), mxop's dtype for each, MXNet's name;
 * lib_api has no bf16 or bool. */
#define MXOP__MX_DTYPE_MAP(X)                                                                      \
    X(0, MXOP_F32, "float32")                                                                      \
    X(1, MXOP_F64, "float64")                                                                      \
    X(2, MXOP_F16, "float16")                                                                      \
    X(3, MXOP_U8, "uint8")                                                                         \
    X(4, MXOP_I32, "int32")                                                                        \
    X(5, MXOP_I8, "int8")                                                                          \
    X(6, MXOP_I64, "int64")

enum { MXOP__MX_F32 = 0, MXOP__MX_I64 = 6, MXOP__MX_DTYPE_COUNT = 7 };

/* Storage types. */
enum { MXOP__MX_DENSE = 0, MXOP__MX_ROW_SPARSE = 1, MXOP__MX_CSR = 2 };

/* mxop's dtype for MXNet's number `mx`, or -1 for a number MXNet does not have. */
static inline int32_t mxop__mx_to_dtype(int mx)
{
#define MXOP__MX_TO_(n, dt, name)                                                                  \
    case n: return dt;
    switch (mx) {
        MXOP__MX_DTYPE_MAP(MXOP__MX_TO_)
    }
#undef MXOP__MX_TO_
    return -1;
}

/* MXNet's number for mxop's dtype `dt`, or -1 where lib_api has none (bf16, bool). */
static inline int mxop__mx_of_dtype(int32_t dt)
{
#define MXOP__MX_OF_(n, d, name)                                                                   \
    if (dt == (d))                                                                                 \
        return n;
    MXOP__MX_DTYPE_MAP(MXOP__MX_OF_)
#undef MXOP__MX_OF_
    return -1;
}

/* MXNet's name of its dtype number `mx`. */
static inline const char *mxop__mx_dtype_name(int mx)
{
#define MXOP__MX_NAME_(n, dt, name)                                                                \
    case n: return name;
    switch (mx) {
        MXOP__MX_DTYPE_MAP(MXOP__MX_NAME_)
    }
#undef MXOP__MX_NAME_
    return "a dtype mxop does not have";
}

#endif /* MXOP_COMMON_MXNET_ABI_H */
