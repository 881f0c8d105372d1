/*
 * server/worker/blas.h - BLAS, loaded on first use.
 *
 * Linking OpenBLAS into the worker costs every worker start several
 * milliseconds (its constructor sizes the machine and starts its threads,
 * which then spin), on the path from a crash to the next call.  Most ops
 * never call gemm, so the worker dlopens BLAS the first time one does.
 */
#ifndef MXOP_SERVER_WORKER_BLAS_H
#define MXOP_SERVER_WORKER_BLAS_H

#include <cblas.h>

typedef struct mxop__blas {
    void (*sgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int, int,
                  float, const float *, int, const float *, int, float, float *, int);
    void (*dgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int, int,
                  double, const double *, int, const double *, int, double, double *, int);
    void (*saxpy)(int, float, const float *, int, float *, int);
    void (*daxpy)(int, double, const double *, int, double *, int);
} mxop__blas_t;

/**
 * The BLAS functions, loading the library on the first call (thread-safe).
 * NULL if no CBLAS library could be loaded; *why then says which and why.
 */
const mxop__blas_t *mxop__blas_get(const char **why);

#endif /* MXOP_SERVER_WORKER_BLAS_H */
