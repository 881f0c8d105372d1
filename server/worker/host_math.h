/*
 * server/worker/host_math.h - the core tensor routines of the host table.
 *
 * Each checks its arguments (dtype, counts, leading dimensions, pointers)
 * and records a message with set_error before returning a code, so an op
 * that passes the code on gives its caller the reason.
 */
#ifndef MXOP_SERVER_WORKER_HOST_MATH_H
#define MXOP_SERVER_WORKER_HOST_MATH_H

#include <stdint.h>

#include "mxop/op.h"

int mxop__host_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                    double beta, void *c, int64_t ldc);
int mxop__host_add(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b,
                   void *out);
int mxop__host_mul(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *a, const void *b,
                   void *out);
int mxop__host_axpy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double alpha, const void *x,
                    void *y);
int mxop__host_fill(mxop_ctx_t *ctx, int32_t dtype, int64_t n, double value, void *out);
int mxop__host_copy(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *src, void *dst);
int mxop__host_sum(mxop_ctx_t *ctx, int32_t dtype, int64_t n, const void *x, double *out);
int mxop__host_convert(mxop_ctx_t *ctx, int64_t n, int32_t src_dtype, const void *src,
                       int32_t dst_dtype, void *dst);

#endif /* MXOP_SERVER_WORKER_HOST_MATH_H */
