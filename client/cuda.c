/*
 * client/cuda.c - device regions: the engine's GPU memory shared with the
 * worker through CUDA IPC handles.
 *
 * libmxop links no CUDA library: an engine without CUDA links and runs as
 * before.  The driver (libcuda.so.1, present wherever a GPU is) is loaded
 * at the first mxop_region_register_cuda, for four questions about a
 * pointer: is it device memory, which device, which allocation (base and
 * size: a caching allocator's tensor is a piece of a larger cudaMalloc),
 * and that allocation's IPC handle.  The driver API is used rather than
 * the runtime because it answers for any pointer of any context, whatever
 * runtime (or none) the engine uses.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"

#define IPC_BYTES 64

/* The driver's enums, as cuda.h numbers them. */
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2

typedef int curesult_t;
typedef unsigned long long cudeviceptr_t;
typedef struct cu_ipc_handle {
    char reserved[IPC_BYTES];
} cu_ipc_handle_t;

static struct {
    int code; /* 0: loaded; < 0: why not (msg) */
    char msg[MXOP__ERR_MAX];
    curesult_t (*Init)(unsigned int flags);
    curesult_t (*PointerGetAttribute)(void *data, int attribute, cudeviceptr_t ptr);
    curesult_t (*CtxPushCurrent)(void *ctx);
    curesult_t (*CtxPopCurrent)(void **ctx);
    curesult_t (*MemGetAddressRange)(cudeviceptr_t *base, size_t *size, cudeviceptr_t ptr);
    curesult_t (*IpcGetMemHandle)(cu_ipc_handle_t *handle, cudeviceptr_t ptr);
    curesult_t (*GetErrorName)(curesult_t err, const char **name);
    curesult_t (*GetErrorString)(curesult_t err, const char **text);
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static const char *cu_err(curesult_t err, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (drv.GetErrorName != NULL)
        drv.GetErrorName(err, &name);
    if (drv.GetErrorString != NULL)
        drv.GetErrorString(err, &text);
    if (name != NULL)
        mxop__fmt(buf, len, "%s (%s)", name, text != NULL ? text : "no description");
    else
        mxop__fmt(buf, len, "CUDA driver error %d", err);
    return buf;
}

static void load_driver(void)
{
    static const struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cuInit", (void **)&drv.Init},
        {"cuPointerGetAttribute", (void **)&drv.PointerGetAttribute},
        {"cuCtxPushCurrent_v2", (void **)&drv.CtxPushCurrent},
        {"cuCtxPopCurrent_v2", (void **)&drv.CtxPopCurrent},
        {"cuMemGetAddressRange_v2", (void **)&drv.MemGetAddressRange},
        {"cuIpcGetMemHandle", (void **)&drv.IpcGetMemHandle},
        {"cuGetErrorName", (void **)&drv.GetErrorName},
        {"cuGetErrorString", (void **)&drv.GetErrorString},
    };
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        mxop__fmt(drv.msg, sizeof(drv.msg),
                  "no CUDA device: the CUDA driver (libcuda.so.1) cannot be loaded: %s",
                  e != NULL ? e : "?");
        drv.code = MXOP_ENO_DEVICE;
        return;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(h, syms[i].name);
        if (f == NULL) {
            mxop__fmt(drv.msg, sizeof(drv.msg),
                      "no CUDA device: the CUDA driver (libcuda.so.1) lacks %s", syms[i].name);
            drv.code = MXOP_ENO_DEVICE;
            return;
        }
        memcpy(syms[i].slot, &f, sizeof(f));
    }
    curesult_t err = drv.Init(0);
    if (err != 0) {
        char es[200];
        mxop__fmt(drv.msg, sizeof(drv.msg), "no CUDA device: cuInit returned %s",
                  cu_err(err, es, sizeof(es)));
        drv.code = MXOP_ENO_DEVICE;
        return;
    }
    drv.code = 0;
}

/* The region of the same handle on the same device, or NULL. */
static mxop__region_t *find_handle(mxop_client_t *c, int32_t device, const void *handle)
{
    for (size_t i = 0; i < c->nregions; i++) {
        mxop__region_t *e = &c->regions[i];
        if (e->cuda && e->device == device && memcmp(e->ipc, handle, IPC_BYTES) == 0)
            return e;
    }
    return NULL;
}

/* Registers (handle, device, bytes) with the daemon and records it; *out gets the entry. */
static int register_handle(mxop_client_t *c, const void *handle, int32_t device, size_t bytes,
                           void *base, mxop__region_t **out)
{
    Mxop__RegisterRegion body = MXOP__REGISTER_REGION__INIT;
    body.size = bytes;
    body.cuda_ipc_handle.data = (uint8_t *)handle;
    body.cuda_ipc_handle.len = IPC_BYTES;
    body.device = device;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_REGISTER_REGION;
    req.register_region = &body;

    /* Room first: a region the daemon holds must never miss the table. */
    int rc = mxop__region_reserve(c);
    if (rc < 0)
        return rc;
    Mxop__Reply *r;
    rc = mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL);
    if (rc < 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_REGISTER_REGION || r->register_region == NULL ||
        r->register_region->region == MXOP_REGION_HEAP)
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "mxop-serverd answered RegisterRegion without a region id");
    mxop__region_t e;
    memset(&e, 0, sizeof(e));
    e.id = r->register_region->region;
    e.wire = e.id;
    e.fd = -1;
    e.base = base;
    e.size = bytes;
    e.owned = 0;
    e.kind = MXOP__REGION_USER;
    e.cuda = 1;
    e.device = device;
    memcpy(e.ipc, handle, IPC_BYTES);
    pthread_mutex_lock(&c->regions_lock);
    c->regions[c->nregions++] = e;
    pthread_mutex_unlock(&c->regions_lock);
    *out = &c->regions[c->nregions - 1];
    return 0;
}

/* What the driver says about dev_ptr: its allocation, device and IPC handle. */
static int query_pointer(mxop_client_t *c, const void *dev_ptr, cudeviceptr_t *base, size_t *size,
                         int32_t *device, cu_ipc_handle_t *handle)
{
    char es[200];
    cudeviceptr_t p = (cudeviceptr_t)(uintptr_t)dev_ptr;
    unsigned int mtype = 0, managed = 0;
    int ordinal = -1;
    void *ctx = NULL;
    curesult_t err = drv.PointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (err != 0)
        return mxop__fail(c, MXOP_EINVAL,
                          "mxop_region_register_cuda: %p is not CUDA memory (cuPointerGetAttribute "
                          "returned %s)",
                          dev_ptr, cu_err(err, es, sizeof(es)));
    if (mtype != CU_MEMORYTYPE_DEVICE)
        return mxop__fail(c, MXOP_EINVAL,
                          "mxop_region_register_cuda: %p is CUDA host memory, not device memory; "
                          "pass host memory as an ordinary region",
                          dev_ptr);
    if (drv.PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == 0 && managed)
        return mxop__fail(c, MXOP_EINVAL,
                          "mxop_region_register_cuda: %p is managed memory (cudaMallocManaged), "
                          "which CUDA IPC cannot share",
                          dev_ptr);
    if ((err = drv.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p)) != 0 ||
        (err = drv.PointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p)) != 0)
        return mxop__fail(c, MXOP_ECUDA,
                          "mxop_region_register_cuda: the device of %p cannot be found: %s",
                          dev_ptr, cu_err(err, es, sizeof(es)));

    /* The queries below need the pointer's context current; the engine's is put back after. */
    if ((err = drv.CtxPushCurrent(ctx)) != 0)
        return mxop__fail(c, MXOP_ECUDA,
                          "mxop_region_register_cuda: cannot make the context of %p current: %s",
                          dev_ptr, cu_err(err, es, sizeof(es)));
    int rc = 0;
    err = drv.MemGetAddressRange(base, size, p);
    if (err != 0) {
        rc = mxop__fail(c, MXOP_ECUDA,
                        "mxop_region_register_cuda: the allocation of %p cannot be found "
                        "(cuMemGetAddressRange returned %s)",
                        dev_ptr, cu_err(err, es, sizeof(es)));
    } else if ((err = drv.IpcGetMemHandle(handle, *base)) != 0) {
        rc = mxop__fail(c, MXOP_ECUDA,
                        "mxop_region_register_cuda: the allocation at 0x%llx (%zu bytes) that "
                        "holds %p cannot be shared: cuIpcGetMemHandle returned %s (memory of "
                        "cudaMallocAsync pools and cuMemCreate needs another kind of handle)",
                        *base, *size, dev_ptr, cu_err(err, es, sizeof(es)));
    }
    void *popped;
    drv.CtxPopCurrent(&popped);
    *device = ordinal;
    return rc;
}

int mxop_region_register_cuda(mxop_client_t *c, const void *dev_ptr, size_t bytes, uint32_t *region,
                              uint64_t *offset)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    if (region == NULL || offset == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_cuda: %s is NULL",
                        region == NULL ? "region" : "offset");
        goto out;
    }
    *region = 0;
    *offset = 0;
    if (dev_ptr == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_cuda: dev_ptr is NULL");
        goto out;
    }
    pthread_once(&drv_once, load_driver);
    if (drv.code != 0) {
        rc = mxop__fail(c, drv.code, "%s", drv.msg);
        goto out;
    }

    cudeviceptr_t base = 0;
    size_t size = 0;
    int32_t device = -1;
    cu_ipc_handle_t h;
    memset(&h, 0, sizeof(h));
    rc = query_pointer(c, dev_ptr, &base, &size, &device, &h);
    if (rc < 0)
        goto out;
    uint64_t off = (uint64_t)(uintptr_t)dev_ptr - base;
    if (bytes > size - off) {
        rc = mxop__fail(c, MXOP_EBOUNDS,
                        "mxop_region_register_cuda: %zu bytes at %p run past its allocation "
                        "(0x%llx, %zu bytes) by %llu bytes",
                        bytes, dev_ptr, base, size, (unsigned long long)(bytes - (size - off)));
        goto out;
    }

    /*
     * The same allocation is the same region.  An entry at the same base
     * with another handle or size is an allocation that was freed (and its
     * region not released): that region is stale and goes first.
     */
    mxop__region_t *e = NULL;
    for (size_t i = 0; i < c->nregions; i++) {
        mxop__region_t *r = &c->regions[i];
        if (r->cuda && r->device == device && (cudeviceptr_t)(uintptr_t)r->base == base) {
            e = r;
            break;
        }
    }
    if (e != NULL && (e->size != size || memcmp(e->ipc, h.reserved, IPC_BYTES) != 0)) {
        rc = mxop__region_drop(c, e->id);
        if (rc < 0)
            goto out;
        e = NULL;
    }
    if (e == NULL) {
        rc = register_handle(c, h.reserved, device, size, (void *)(uintptr_t)base, &e);
        if (rc < 0)
            goto out;
    }
    *region = e->id;
    *offset = off;
    rc = 0;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_region_register_cuda_ipc(mxop_client_t *c, const void *handle, size_t handle_len,
                                  int32_t device, size_t bytes, uint32_t *region)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    if (region == NULL || handle == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_cuda_ipc: %s is NULL",
                        region == NULL ? "region" : "handle");
        goto out;
    }
    *region = 0;
    if (handle_len != IPC_BYTES) {
        rc = mxop__fail(c, MXOP_EINVAL,
                        "mxop_region_register_cuda_ipc: handle_len is %zu; a CUDA IPC handle "
                        "(cudaIpcMemHandle_t) has %d bytes",
                        handle_len, IPC_BYTES);
        goto out;
    }
    if (device < 0) {
        rc = mxop__fail(c, MXOP_EINVAL,
                        "mxop_region_register_cuda_ipc: device %d is not a CUDA "
                        "ordinal",
                        (int)device);
        goto out;
    }
    if (bytes == 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_cuda_ipc: bytes is 0");
        goto out;
    }
    mxop__region_t *e = find_handle(c, device, handle);
    if (e != NULL && e->size != bytes) {
        rc = mxop__fail(c, MXOP_EINVAL,
                        "mxop_region_register_cuda_ipc: this handle is region %u already, of %zu "
                        "bytes, not %zu",
                        e->id, e->size, bytes);
        goto out;
    }
    if (e == NULL) {
        rc = register_handle(c, handle, device, bytes, NULL, &e);
        if (rc < 0)
            goto out;
    }
    *region = e->id;
    rc = 0;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}
