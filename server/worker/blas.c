/*
 * server/worker/blas.c - see blas.h.
 */
#include "server/worker/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

/* Tried in order: OpenBLAS (what the build depends on), then any CBLAS. */
static const char *const candidates[] = {"libopenblas.so.0", "libcblas.so.3", "libblas.so.3"};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static mxop__blas_t blas;
static int loaded;
static char failure[256] = "no BLAS library tried";

/*
 * OpenBLAS's thread-count switches, where the library has them (NULL for
 * another CBLAS): the count it chose at load, and the one set now.
 */
static void (*set_threads)(int);
static int (*get_threads)(void);
static int default_threads;
static int current_threads;
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int threads_used = 1; /* the most used since the last take */

static void load(void)
{
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            snprintf(failure, sizeof(failure), "cannot load BLAS: %s", dlerror());
            continue;
        }
        /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
        *(void **)&blas.sgemm = dlsym(h, "cblas_sgemm");
        *(void **)&blas.dgemm = dlsym(h, "cblas_dgemm");
        *(void **)&blas.saxpy = dlsym(h, "cblas_saxpy");
        *(void **)&blas.daxpy = dlsym(h, "cblas_daxpy");
        if (blas.sgemm && blas.dgemm && blas.saxpy && blas.daxpy) {
            *(void **)&set_threads = dlsym(h, "openblas_set_num_threads");
            *(void **)&get_threads = dlsym(h, "openblas_get_num_threads");
            if (set_threads != NULL && get_threads != NULL)
                default_threads = current_threads = get_threads();
            loaded = 1;
            return; /* The handle stays open for the worker's lifetime. */
        }
        snprintf(failure, sizeof(failure), "%s lacks the CBLAS functions", candidates[i]);
        dlclose(h);
    }
}

const mxop__blas_t *mxop__blas_get(const char **why)
{
    pthread_once(&once, load);
    if (!loaded) {
        if (why != NULL)
            *why = failure;
        return NULL;
    }
    return &blas;
}

void mxop__blas_fit_threads(int64_t m, int64_t n, int64_t k)
{
    if (set_threads == NULL || default_threads <= 1)
        return;
    double work = (double)m * (double)n * (double)k;
    int want = work <= MXOP__BLAS_SMALL_PRODUCT ? 1 : default_threads;
    pthread_mutex_lock(&threads_lock);
    if (want != current_threads) {
        set_threads(want);
        current_threads = want;
    }
    pthread_mutex_unlock(&threads_lock);
    int was = atomic_load_explicit(&threads_used, memory_order_relaxed);
    while (want > was && !atomic_compare_exchange_weak_explicit(
                             &threads_used, &was, want, memory_order_relaxed, memory_order_relaxed))
        ;
}

int mxop__blas_take_threads_used(void)
{
    return atomic_exchange_explicit(&threads_used, 1, memory_order_relaxed);
}
