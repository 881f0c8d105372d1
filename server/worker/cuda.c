/*
 * server/worker/cuda.c - the CUDA runtime loaded at run time, device regions
 * opened through CUDA IPC, the stream and workspace of a GPU call.
 *
 * Why dlopen rather than linking libcudart: the worker is one binary for
 * every machine.  Built without the toolkit it still answers a device
 * region with MXOP_ENO_DEVICE and a reason, and built with it, it still
 * starts where there is no driver or no GPU (most CI machines), serving
 * CPU ops.  Nothing here needs a CUDA header: the few runtime functions
 * used are declared in cuda.h with plain C types.
 *
 * The runtime is loaded the first time a device region is mapped, so a
 * session that never registers one never pays for CUDA's start-up (or
 * its memory) and never touches the GPU.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "server/worker/cuda.h"
#include "shm/worker_exit.h"
#include "server/worker/worker.h"

#ifndef MXOP_CUDA_HOME
#define MXOP_CUDA_HOME "/usr/local/cuda"
#endif

/* The most device ordinals the worker keeps a stream for. */
#define MAX_DEVICES 64

/* Device workspace pieces are aligned like cudaMalloc's (256 bytes). */
#define GPU_WS_ALIGN 256

/* cudaStreamNonBlocking, cudaIpcMemLazyEnablePeerAccess. */
#define STREAM_NON_BLOCKING 0x01u
#define IPC_LAZY_PEER_ACCESS 0x01u

static mxop__cudart_t rt;
static int rt_state; /* 0: not tried; 1: loaded and a device seen; < 0: the code */
static char rt_msg[MXOP__W_MSG_MAX];
static int n_devices;

/* cuMemGetAddressRange_v2 of the driver, if it can be found (size checks only). */
static int (*mem_range)(unsigned long long *base, size_t *size, unsigned long long ptr);

typedef struct devstate {
    void *stream;
    uint8_t *ws; /* device memory */
    size_t ws_cap;
    size_t ws_want; /* what the last call on this device asked for in all */
} devstate_t;

static devstate_t devs[MAX_DEVICES];

/* The GPU call in flight. */
static int32_t call_dev = -1;
static size_t call_ws_used;
static size_t call_ws_want;
static void **call_extra; /* device blocks beyond the main workspace, freed at the call's end */
static size_t n_extra, cap_extra;

/* Every IPC mapping open, so that exit closes them before the runtime goes. */
typedef struct opened {
    int32_t device;
    void *ptr;
} opened_t;

static opened_t *opened;
static size_t n_opened, cap_opened;

/* ------------------------------------------------------------------------ */
/* Loading the runtime */

const char *mxop__cuda_errstr(int err, char *buf, size_t len)
{
    const char *name = rt.GetErrorName != NULL ? rt.GetErrorName(err) : NULL;
    const char *text = rt.GetErrorString != NULL ? rt.GetErrorString(err) : NULL;
    mxop__fmt(buf, len, "%s (%s)", name != NULL ? name : "cudaError?",
              text != NULL ? text : "no description");
    if (name == NULL)
        mxop__fmt(buf, len, "CUDA error %d (%s)", err, text != NULL ? text : "no description");
    return buf;
}

static const struct {
    const char *name;
    size_t off;
} syms[] = {
#define SYM(f)                                                                                     \
    {                                                                                              \
        "cuda" #f, offsetof(mxop__cudart_t, f)                                                     \
    }
    SYM(GetDeviceCount),
    SYM(SetDevice),
    SYM(GetDevice),
    SYM(GetErrorName),
    SYM(GetErrorString),
    SYM(GetLastError),
    SYM(IpcOpenMemHandle),
    SYM(IpcCloseMemHandle),
    SYM(StreamCreateWithFlags),
    SYM(StreamSynchronize),
    SYM(StreamDestroy),
    SYM(Malloc),
    SYM(Free),
    SYM(RuntimeGetVersion),
    SYM(DriverGetVersion),
#undef SYM
};

void *mxop__cuda_dlopen(const char *const *names, size_t n, char *why, size_t whylen)
{
    void *h;
    why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
        if (why[0] == '\0') {
            const char *e = dlerror();
            mxop__fmt(why, whylen, "%s", e != NULL ? e : names[i]);
        }
        char path[512];
        mxop__fmt(path, sizeof(path), "%s/lib64/%s", MXOP_CUDA_HOME, names[i]);
        if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
    }
    return NULL;
}

/* dlopen of the runtime: $MXOP_CUDART, then the usual names, then the toolkit's directory. */
static void *open_runtime(char *why, size_t whylen)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                        "libcudart.so"};
    const char *env = getenv("MXOP_CUDART");
    void *h;
    why[0] = '\0';
    if (env != NULL && env[0] != '\0') {
        if ((h = dlopen(env, RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
        const char *e = dlerror();
        mxop__fmt(why, whylen, "MXOP_CUDART=%s cannot be loaded: %s", env, e ? e : "?");
        return NULL;
    }
    return mxop__cuda_dlopen(names, sizeof(names) / sizeof(names[0]), why, whylen);
}

static void cleanup_at_exit(void);

static int load_runtime(void)
{
    char why[400];
    void *h = open_runtime(why, sizeof(why));
    if (h == NULL) {
        mxop__fmt(rt_msg, sizeof(rt_msg), "no CUDA device: the CUDA runtime cannot be loaded (%s)",
                  why);
        return MXOP_ENO_DEVICE;
    }
    mxop__cudart_t t;
    memset(&t, 0, sizeof(t));
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(h, syms[i].name);
        if (f == NULL) {
            mxop__fmt(rt_msg, sizeof(rt_msg),
                      "no CUDA device: the CUDA runtime that was loaded lacks %s", syms[i].name);
            dlclose(h);
            return MXOP_ENO_DEVICE;
        }
        memcpy((char *)&t + syms[i].off, &f, sizeof(f));
    }
    rt = t;

    int n = 0;
    int err = rt.GetDeviceCount(&n);
    if (err != 0 || n <= 0) {
        char es[256];
        if (err != 0)
            mxop__fmt(rt_msg, sizeof(rt_msg), "no CUDA device: cudaGetDeviceCount returned %s",
                      mxop__cuda_errstr(err, es, sizeof(es)));
        else
            mxop__fmt(rt_msg, sizeof(rt_msg), "no CUDA device: cudaGetDeviceCount found none");
        rt.GetLastError();
        /* The handle stays open: a runtime is not unloaded safely once called. */
        return MXOP_ENO_DEVICE;
    }
    n_devices = n;

    /* The driver is loaded by now; its address-range query checks region sizes. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (drv != NULL) {
        void *f = dlsym(drv, "cuMemGetAddressRange_v2");
        memcpy(&mem_range, &f, sizeof(f));
    }
    /*
     * Registered after the runtime's own exit handlers, so this runs first:
     * the IPC mappings are closed while the runtime can still close them.
     */
    atexit(cleanup_at_exit);
    return 0;
}

const mxop__cudart_t *mxop__cudart(int *code, char *msg, size_t msglen)
{
    if (rt_state == 0) {
        int rc = load_runtime();
        rt_state = rc == 0 ? 1 : rc;
    }
    if (rt_state < 0) {
        *code = rt_state;
        mxop__fmt(msg, msglen, "%s", rt_msg);
        return NULL;
    }
    *code = 0;
    return &rt;
}

/* ------------------------------------------------------------------------ */
/* Errors that end the worker */

/* The errors after which the context cannot be used again (CUDA's "sticky" ones). */
static int is_sticky(int err)
{
    switch (err) {
    case 214: /* cudaErrorECCUncorrectable */
    case 220: /* cudaErrorNvlinkUncorrectable */
    case 700: /* cudaErrorIllegalAddress */
    case 702: /* cudaErrorLaunchTimeout */
    case 709: /* cudaErrorContextIsDestroyed */
    case 710: /* cudaErrorAssert */
    case 714: /* cudaErrorHardwareStackError */
    case 715: /* cudaErrorIllegalInstruction */
    case 716: /* cudaErrorMisalignedAddress */
    case 717: /* cudaErrorInvalidAddressSpace */
    case 718: /* cudaErrorInvalidPc */
    case 719: /* cudaErrorLaunchFailure */
    case 999: /* cudaErrorUnknown */ return 1;
    default: return 0;
    }
}

/*
 * Leaves the note for the daemon and exits at once: exit handlers would
 * call into the broken context (and may hang there), and the process's
 * end is what releases the context.
 */
_Noreturn static void die_cuda(const char *op, int err)
{
    char es[256];
    mxop__cuda_errstr(err, es, sizeof(es));
    mxop__status_page_t *page = mxop__status_page();
    if (page != NULL) {
        if (op != NULL)
            mxop__fmt(page->fault_msg, sizeof(page->fault_msg),
                      "op '%s': CUDA error %s; the CUDA context is unusable, so the worker exits "
                      "and is restarted",
                      op, es);
        else
            mxop__fmt(page->fault_msg, sizeof(page->fault_msg),
                      "CUDA error %s; the CUDA context is unusable, so the worker exits and is "
                      "restarted",
                      es);
        atomic_store_explicit(&page->fault_code, MXOP_ECUDA, memory_order_release);
    }
    _exit(MXOP__W_EXIT_CUDA);
}

/* ------------------------------------------------------------------------ */
/* IPC handles */

static int device_ok(int32_t device, char *msg, size_t msglen)
{
    if (device < 0 || device >= n_devices || device >= MAX_DEVICES) {
        mxop__fmt(msg, msglen, "no CUDA device %d: the worker sees %d device%s", device, n_devices,
                  n_devices == 1 ? "" : "s");
        return MXOP_ENO_DEVICE;
    }
    return 0;
}

static int set_device(int32_t device, char *msg, size_t msglen)
{
    int err = rt.SetDevice(device);
    if (err != 0) {
        char es[256];
        if (is_sticky(err))
            die_cuda(NULL, err);
        mxop__fmt(msg, msglen, "cannot use CUDA device %d: cudaSetDevice returned %s", device,
                  mxop__cuda_errstr(err, es, sizeof(es)));
        rt.GetLastError();
        return MXOP_ECUDA;
    }
    return 0;
}

int mxop__cuda_open_ipc(int32_t device, const uint8_t *handle, size_t len, uint64_t size,
                        void **ptr, char *msg, size_t msglen)
{
    int code;
    char es[256];
    *ptr = NULL;
    if (len != MXOP__CUDA_IPC_HANDLE_SIZE) {
        mxop__fmt(msg, msglen, "the CUDA IPC handle has %zu bytes, not %d", len,
                  MXOP__CUDA_IPC_HANDLE_SIZE);
        return MXOP_EINVAL;
    }
    if (mxop__cudart(&code, msg, msglen) == NULL)
        return code;
    if ((code = device_ok(device, msg, msglen)) != 0)
        return code;
    if (n_opened == cap_opened) {
        size_t cap = cap_opened ? cap_opened * 2 : 16;
        opened_t *o = realloc(opened, cap * sizeof(*o));
        if (o == NULL) {
            mxop__fmt(msg, msglen, "out of memory for the table of opened IPC handles");
            return MXOP_ENOMEM;
        }
        opened = o;
        cap_opened = cap;
    }
    if ((code = set_device(device, msg, msglen)) != 0)
        return code;
    rt.GetLastError();

    mxop__ipc_handle_t h;
    memcpy(h.reserved, handle, sizeof(h.reserved));
    void *p = NULL;
    int err = rt.IpcOpenMemHandle(&p, h, IPC_LAZY_PEER_ACCESS);
    if (err != 0) {
        if (is_sticky(err))
            die_cuda(NULL, err);
        rt.GetLastError();
        mxop__fmt(msg, msglen,
                  "cannot open the CUDA IPC handle on device %d: cudaIpcOpenMemHandle returned %s",
                  device, mxop__cuda_errstr(err, es, sizeof(es)));
        return MXOP_ECUDA;
    }
    /* A size beyond the allocation would let ops address memory that is not the engine's. */
    unsigned long long base = 0;
    size_t alloc = 0;
    if (mem_range != NULL && mem_range(&base, &alloc, (unsigned long long)(uintptr_t)p) == 0 &&
        (uint64_t)(base + alloc - (uintptr_t)p) < size) {
        rt.IpcCloseMemHandle(p);
        mxop__fmt(msg, msglen,
                  "the CUDA allocation behind the IPC handle has %llu bytes, fewer than the %llu "
                  "registered",
                  (unsigned long long)(base + alloc - (uintptr_t)p), (unsigned long long)size);
        return MXOP_EINVAL;
    }
    opened[n_opened++] = (opened_t){device, p};
    *ptr = p;
    return 0;
}

void mxop__cuda_close_ipc(int32_t device, void *ptr)
{
    for (size_t i = 0; i < n_opened; i++) {
        if (opened[i].ptr == ptr && opened[i].device == device) {
            opened[i] = opened[--n_opened];
            break;
        }
    }
    if (rt_state != 1 || ptr == NULL)
        return;
    char msg[64];
    if (set_device(device, msg, sizeof(msg)) == 0 && rt.IpcCloseMemHandle(ptr) != 0)
        rt.GetLastError();
}

/* ------------------------------------------------------------------------ */
/* The GPU call */

int mxop__cuda_begin_call(int32_t device, char *msg, size_t msglen)
{
    int code;
    char es[256];
    if (mxop__cudart(&code, msg, msglen) == NULL)
        return code;
    if ((code = device_ok(device, msg, msglen)) != 0)
        return code;
    if ((code = set_device(device, msg, msglen)) != 0)
        return code;
    devstate_t *d = &devs[device];
    if (d->stream == NULL) {
        int err = rt.StreamCreateWithFlags(&d->stream, STREAM_NON_BLOCKING);
        if (err != 0) {
            if (is_sticky(err))
                die_cuda(NULL, err);
            rt.GetLastError();
            d->stream = NULL;
            mxop__fmt(msg, msglen, "cannot create a CUDA stream on device %d: %s", device,
                      mxop__cuda_errstr(err, es, sizeof(es)));
            return MXOP_ECUDA;
        }
    }
    /* Grow the workspace to what the last call here wanted in all (see host.c's ws_reset). */
    if (d->ws_want > d->ws_cap) {
        if (d->ws != NULL)
            rt.Free(d->ws);
        d->ws = NULL;
        d->ws_cap = 0;
        void *p = NULL;
        if (rt.Malloc(&p, d->ws_want) == 0) {
            d->ws = p;
            d->ws_cap = d->ws_want;
        }
        rt.GetLastError(); /* an allocation that failed is retried piecewise in the call */
    }
    /* Whatever an earlier runtime call left must not be blamed on this op. */
    rt.GetLastError();
    call_dev = device;
    call_ws_used = 0;
    call_ws_want = 0;
    return 0;
}

int mxop__cuda_end_call(const char *op, int rc, char *msg, size_t msglen)
{
    if (call_dev < 0)
        return rc;
    devstate_t *d = &devs[call_dev];
    int err = rt.StreamSynchronize(d->stream);
    if (err == 0)
        err = rt.GetLastError();
    else
        rt.GetLastError();
    if (err != 0 && is_sticky(err))
        die_cuda(op, err);
    for (size_t i = 0; i < n_extra; i++)
        rt.Free(call_extra[i]);
    n_extra = 0;
    d->ws_want = call_ws_want;
    call_dev = -1;
    if (rc != 0 || err == 0)
        return rc;
    char es[256];
    mxop__fmt(msg, msglen, "op '%s' left a CUDA error: %s", op,
              mxop__cuda_errstr(err, es, sizeof(es)));
    return MXOP_ECUDA;
}

void *mxop__cuda_call_stream(void)
{
    return call_dev >= 0 ? devs[call_dev].stream : NULL;
}

int32_t mxop__cuda_call_device(void)
{
    return call_dev;
}

void *mxop__cuda_host_workspace(mxop_ctx_t *ctx, size_t bytes)
{
    if (call_dev < 0) {
        mxop__host.set_error(ctx, MXOP_ENO_DEVICE, "gpu_workspace: this is not a GPU call");
        return NULL;
    }
    if (bytes > SIZE_MAX - 2 * GPU_WS_ALIGN)
        return NULL;
    size_t r = bytes == 0 ? GPU_WS_ALIGN : (bytes + GPU_WS_ALIGN - 1) & ~(size_t)(GPU_WS_ALIGN - 1);
    if (call_ws_want <= SIZE_MAX - r)
        call_ws_want += r;
    devstate_t *d = &devs[call_dev];
    if (d->ws != NULL && r <= d->ws_cap - call_ws_used) {
        void *p = d->ws + call_ws_used;
        call_ws_used += r;
        return p;
    }
    if (n_extra == cap_extra) {
        size_t cap = cap_extra ? cap_extra * 2 : 8;
        void **e = realloc(call_extra, cap * sizeof(*e));
        if (e == NULL) {
            mxop__host.set_error(ctx, MXOP_ENOMEM, "gpu_workspace: out of host memory");
            return NULL;
        }
        call_extra = e;
        cap_extra = cap;
    }
    void *p = NULL;
    int err = rt.Malloc(&p, r);
    if (err != 0) {
        char es[256];
        rt.GetLastError();
        mxop__host.set_error(ctx, MXOP_ECUDA,
                             "gpu_workspace: cudaMalloc of %zu bytes on device %d: %s", r, call_dev,
                             mxop__cuda_errstr(err, es, sizeof(es)));
        return NULL;
    }
    call_extra[n_extra++] = p;
    return p;
}

/* ------------------------------------------------------------------------ */

/* What another file holds on the devices, freed before the streams (mxop__cuda_before_cleanup). */
static void (*before_cleanup)(void);

void mxop__cuda_before_cleanup(void (*fn)(void))
{
    before_cleanup = fn;
}

static void cleanup_at_exit(void)
{
    /* A worker that exits inside a GPU call (an op called exit) leaves it as it is. */
    if (rt_state != 1 || call_dev >= 0)
        return;
    for (size_t i = 0; i < n_opened; i++)
        if (rt.SetDevice(opened[i].device) == 0)
            rt.IpcCloseMemHandle(opened[i].ptr);
    n_opened = 0;
    if (before_cleanup != NULL)
        before_cleanup();
    for (int i = 0; i < MAX_DEVICES && i < n_devices; i++) {
        if (devs[i].stream == NULL && devs[i].ws == NULL)
            continue;
        if (rt.SetDevice(i) != 0)
            continue;
        if (devs[i].ws != NULL)
            rt.Free(devs[i].ws);
        if (devs[i].stream != NULL)
            rt.StreamDestroy(devs[i].stream);
        devs[i] = (devstate_t){0};
    }
    free(opened);
    free(call_extra);
    opened = NULL;
    call_extra = NULL;
}
