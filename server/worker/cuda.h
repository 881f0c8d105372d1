/*
 * server/worker/cuda.h - the worker's GPU side: device regions opened
 * through CUDA IPC, the stream of a GPU call, GPU workspace, cuBLAS.
 *
 * The CUDA runtime (libcudart) and cuBLAS are loaded with dlopen the first
 * time a device region is mapped, never at start-up: a worker on a machine
 * without CUDA libraries or without a GPU starts and serves CPU ops as
 * always, and only a device region is refused, with MXOP_ENO_DEVICE and a
 * sentence ("no CUDA device: cudaGetDeviceCount returned ...").  The same
 * binary is built with and without the CUDA toolkit, so this path is
 * compiled and its no-device answers tested on every machine.
 *
 * A CUDA error that leaves the context unusable (an illegal address, a
 * device-side assert, a launch failure: the "sticky" errors) cannot be
 * recovered in this process.  The worker then leaves a note in the status
 * page (code MXOP_ECUDA, the CUDA error's name and text) and exits with
 * MXOP__W_EXIT_CUDA while the call is still published as in flight; the
 * daemon reports the note in its WorkerEvent and restarts the worker,
 * which re-opens the session's device regions.
 */
#ifndef MXOP_SERVER_WORKER_CUDA_H
#define MXOP_SERVER_WORKER_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "mxop/op.h"

/* The size of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE). */
#define MXOP__CUDA_IPC_HANDLE_SIZE 64

/**
 * Maps device region `id`: opens the IPC handle (`len` bytes) of an
 * allocation of `size` bytes on CUDA device `device` and adds it to the
 * region table (regions.c).  Returns 0, MXOP_EINVAL (id 0, size 0, a
 * duplicate id, a handle of the wrong length, the allocation smaller than
 * `size`), MXOP_ENO_DEVICE (no CUDA runtime, no device, no such ordinal),
 * MXOP_ECUDA (cudaIpcOpenMemHandle failed: the CUDA error in the message),
 * MXOP_ENOMEM, with the reason in msg.
 */
int mxop__region_add_cuda(uint32_t id, uint64_t size, int32_t device, const uint8_t *handle,
                          size_t len, char *msg, size_t msglen);

/**
 * Opens an IPC handle on `device`; *ptr gets the device pointer.  Checks
 * that the allocation behind it has at least `size` bytes where the driver
 * can tell.  Codes as mxop__region_add_cuda.
 */
int mxop__cuda_open_ipc(int32_t device, const uint8_t *handle, size_t len, uint64_t size,
                        void **ptr, char *msg, size_t msglen);

/** Closes what mxop__cuda_open_ipc opened (at unmap). */
void mxop__cuda_close_ipc(int32_t device, void *ptr);

/**
 * Before a GPU call's callback: makes `device` current and its stream the
 * call's (created once per device).  Returns 0, or MXOP_ENO_DEVICE /
 * MXOP_ECUDA with the reason in msg.
 */
int mxop__cuda_begin_call(int32_t device, char *msg, size_t msglen);

/**
 * After a GPU call's callback returned `rc`: synchronises the call's
 * stream and collects any CUDA error the op left.  A sticky error does not
 * return (see the top of this file).  Returns rc when it is non-zero, else
 * 0 or MXOP_ECUDA with the CUDA error (naming op `op`) in msg.  The call's
 * stream and workspace are forgotten either way.
 */
int mxop__cuda_end_call(const char *op, int rc, char *msg, size_t msglen);

/** The stream of the GPU call in flight (a cudaStream_t), or NULL. */
void *mxop__cuda_call_stream(void);

/** The device of the GPU call in flight, or -1. */
int32_t mxop__cuda_call_device(void);

/** The host table's gpu_workspace and gpu_gemm (cuda.c, cuda_blas.c). */
void *mxop__cuda_host_workspace(mxop_ctx_t *ctx, size_t bytes);
int mxop__cuda_host_gemm(mxop_ctx_t *ctx, int32_t dtype, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, double alpha, const void *a, int64_t lda,
                         const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* ---- which callback a call runs (devcall.c) ---- */

struct mxop__worker_op;

typedef int (*mxop__op_fn_t)(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out);
typedef int (*mxop__state_fn_t)(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                                int n_out, mxop_tensor_t *out);

/**
 * The device of a call: -1 when every tensor is in host memory, the CUDA
 * ordinal when every tensor is on that device (a call without tensors is
 * a host call).  MXOP_EINVAL ("device mismatch: ...") otherwise.
 */
int mxop__call_device(int n_in, const mxop_tensor_t *in, int n_out, const mxop_tensor_t *out,
                      int32_t *dev, char *msg, size_t msglen);

/**
 * The callback a call of `op` runs (forward or backward, stateless or
 * stateful, host or GPU): sets *fn or *sfn (the one that applies; NULL when
 * the op lacks it) and returns the callback's name ("forward_gpu").
 */
const char *mxop__pick_callback(const struct mxop__worker_op *op, int backward, int32_t dev,
                                mxop__op_fn_t *fn, mxop__state_fn_t *sfn);

/** MXOP_ENOT_SUPPORTED with a sentence: `op` has no callback `cb` for tensors on `dev`. */
int mxop__no_callback(const struct mxop__worker_op *op, const char *cb, int32_t dev, char *msg,
                      size_t msglen);

/* ---- shared between cuda.c and cuda_blas.c ---- */

/* cudaIpcMemHandle_t, passed by value as the runtime takes it. */
typedef struct mxop__ipc_handle {
    char reserved[MXOP__CUDA_IPC_HANDLE_SIZE];
} mxop__ipc_handle_t;

/*
 * The runtime functions the worker uses, found with dlsym.  cudaError_t is
 * an int-sized enum and cudaStream_t a pointer, so the prototypes need no
 * CUDA header.
 */
typedef struct mxop__cudart {
    int (*GetDeviceCount)(int *count);
    int (*SetDevice)(int device);
    int (*GetDevice)(int *device);
    const char *(*GetErrorName)(int err);
    const char *(*GetErrorString)(int err);
    int (*GetLastError)(void);
    int (*IpcOpenMemHandle)(void **ptr, mxop__ipc_handle_t handle, unsigned int flags);
    int (*IpcCloseMemHandle)(void *ptr);
    int (*StreamCreateWithFlags)(void **stream, unsigned int flags);
    int (*StreamSynchronize)(void *stream);
    int (*StreamDestroy)(void *stream);
    int (*Malloc)(void **ptr, size_t bytes);
    int (*Free)(void *ptr);
    int (*RuntimeGetVersion)(int *v);
    int (*DriverGetVersion)(int *v);
} mxop__cudart_t;

/**
 * The loaded runtime, or NULL with the reason ("no CUDA device: ...") in
 * msg and *code MXOP_ENO_DEVICE.  Loaded and checked once; the answer is
 * kept.
 */
const mxop__cudart_t *mxop__cudart(int *code, char *msg, size_t msglen);

/** "cudaErrorIllegalAddress (an illegal memory access was encountered)" into buf. */
const char *mxop__cuda_errstr(int err, char *buf, size_t len);

/**
 * Has `fn` run at exit before the worker's streams and workspaces go (and
 * not when the worker exits inside a GPU call): how cuda_blas.c frees its
 * cuBLAS handles, bound to those streams.  One such function; a later call
 * replaces it.
 */
void mxop__cuda_before_cleanup(void (*fn)(void));

/**
 * dlopen of the first of `names` (n of them) that loads, each tried by the
 * loader's search and then in the toolkit's lib64 directory; NULL, with
 * the first failure's reason in why[whylen], when none does.
 */
void *mxop__cuda_dlopen(const char *const *names, size_t n, char *why, size_t whylen);

#endif /* MXOP_SERVER_WORKER_CUDA_H */
