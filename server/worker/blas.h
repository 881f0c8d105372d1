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
#include <stdint.h>

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

/*
 * A product of at most this many multiply-adds (m * n * k) runs on one
 * BLAS thread.  Measured (docs/performance.md, section 7): gemm 96x96
 * (884 736) made 54.9k and 25.9k calls/s from one client thread with
 * OpenBLAS on one thread, against 15.8k and 16.2k with its default two;
 * handing a product that small to a second thread costs a wake-up of the
 * other vCPU (tens of microseconds here) and, with several sessions in
 * flight, competes with the other workers for the same two CPUs.
 */
#define MXOP__BLAS_SMALL_PRODUCT (128.0 * 128.0 * 128.0)

/**
 * Sets OpenBLAS's thread count for a product of m x k by k x n: one
 * thread for a small one, the library's own choice otherwise (only when
 * it changes; nothing for a BLAS without the switch).  Call it after
 * mxop__blas_get succeeded.
 */
void mxop__blas_fit_threads(int64_t m, int64_t n, int64_t k);

/**
 * The most BLAS threads a product used since the last call of this
 * function (1 when none ran, or the BLAS has no thread switch), and starts
 * counting again.  The worker says it with each result (shm/mailbox.h
 * busy_cpus), so that a client does not spin on a CPU its op's threads want.
 */
int mxop__blas_take_threads_used(void);

#endif /* MXOP_SERVER_WORKER_BLAS_H */
