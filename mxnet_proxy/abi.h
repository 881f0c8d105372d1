/*
 * mxnet_proxy/abi.h - the library side of MXNet's extension-library C ABI
 * (lib_api version 11, MXNet 1.9.x and 2.0), as far as the proxy needs it.
 *
 * Written here from the ABI's facts (docs/mxnet.md, shared notes), no
 * MXNet code; the numbers both sides of mxop's MXNet support need are in
 * common/mxnet_abi.h.  MXNet looks every entry point up by name and calls it with
 * these argument lists; the "function pointers" _opRegGet hands out
 * (parse, infer, forward, ...) are never called by MXNet, only passed back
 * to the library's _opCall* entry points, so the proxy hands out pointers
 * that name its own op records (see ops.c).
 */
#ifndef MXOP_MXNET_PROXY_ABI_H
#define MXOP_MXNET_PROXY_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "common/mxnet_abi.h"

/* An opaque callback handed to MXNet and passed back (fcomp_t, parseAttrs_t, ...). */
typedef void (*mxop__px_fn)(void);

/* The host's allocator callbacks (the size is an int in this ABI). */
typedef void *(*mxop__px_xpu_malloc)(void *ctx, int size);
typedef void (*mxop__px_sparse_malloc)(void *ctx, int index, int indices_len, int idxptr_len,
                                       void **data, int64_t **indices, int64_t **indptr);

/*
 * What MXNet reads of the object CreateOpState returns (a C++
 * CustomStatefulOp): a vtable pointer, then `bool ignore_warn` and `bool
 * created`.  It reads the two flags (a state not "created" is logged as a
 * warning) and never calls through the vtable: compute and destruction go
 * through _opCallFStatefulCompute and _opCallDestroyOpState.
 */
typedef struct mxop__px_stateful_head {
    const void *vptr;
    _Bool ignore_warn;
    _Bool created;
} mxop__px_stateful_head_t;

#endif /* MXOP_MXNET_PROXY_ABI_H */
