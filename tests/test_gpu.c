/*
 * tests/test_gpu.c - device regions and GPU ops, through the real daemon
 * and worker.
 *
 * Two kinds of test.  Those that run everywhere: a device region where
 * there is no GPU is refused with MXOP_ENO_DEVICE and a reason, and the
 * session goes on; bad arguments; the CUDA op libraries load and their
 * host paths work.  Those that need a GPU allocate device memory here
 * (the CUDA runtime is loaded with dlopen, so this file builds without
 * CUDA) and are skipped, saying why, where there is none: never passed
 * silently.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

/* ------------------------------------------------------------------------ */
/* This process's own CUDA, for the tests that need a device. */

static struct {
    int tried;
    int count; /* devices; 0 with the reason in why */
    char why[300];
    int (*GetDeviceCount)(int *);
    const char *(*GetErrorName)(int);
    int (*Malloc)(void **, size_t);
    int (*Free)(void *);
    int (*Memcpy)(void *, const void *, size_t, int);
    int (*DeviceSynchronize)(void);
} cu;

#define H2D 1
#define D2H 2

static int gpu_count(void)
{
    if (cu.tried)
        return cu.count;
    cu.tried = 1;
    const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *h = NULL;
    for (size_t i = 0; h == NULL && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(cu.why, sizeof(cu.why), "the CUDA runtime cannot be loaded (%s)", dlerror());
        return 0;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cudaGetDeviceCount", (void **)&cu.GetDeviceCount},
        {"cudaGetErrorName", (void **)&cu.GetErrorName},
        {"cudaMalloc", (void **)&cu.Malloc},
        {"cudaFree", (void **)&cu.Free},
        {"cudaMemcpy", (void **)&cu.Memcpy},
        {"cudaDeviceSynchronize", (void **)&cu.DeviceSynchronize},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(h, syms[i].name);
        if (f == NULL) {
            snprintf(cu.why, sizeof(cu.why), "the CUDA runtime lacks %s", syms[i].name);
            return 0;
        }
        memcpy(syms[i].slot, &f, sizeof(f));
    }
    int n = 0;
    int err = cu.GetDeviceCount(&n);
    if (err != 0 || n <= 0) {
        snprintf(cu.why, sizeof(cu.why), "cudaGetDeviceCount returned %s, %d devices",
                 err != 0 ? cu.GetErrorName(err) : "cudaSuccess", n);
        return 0;
    }
    cu.count = n;
    return n;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (gpu_count() <= 0)                                                                      \
            cr_skip_test("no CUDA device: %s", cu.why);                                            \
    } while (0)

static int built(const char *dir, const char *lib)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s/%s", mxt_build_dir(), dir, lib);
    return stat(path, &st) == 0;
}

#define NEED_PLUGIN(dir, lib)                                                                      \
    do {                                                                                           \
        if (!built(dir, lib))                                                                      \
            cr_skip_test("%s/%s is not built (the build found no CUDA toolkit: CUDA: no)", dir,    \
                         lib);                                                                     \
    } while (0)

static void *dmalloc(size_t bytes)
{
    void *p = NULL;
    int err = cu.Malloc(&p, bytes);
    cr_assert_eq(err, 0, "cudaMalloc(%zu): %s", bytes, cu.GetErrorName(err));
    return p;
}

static void to_dev(void *dst, const void *src, size_t bytes)
{
    int err = cu.Memcpy(dst, src, bytes, H2D);
    cr_assert_eq(err, 0, "cudaMemcpy to the device: %s", cu.GetErrorName(err));
}

static void from_dev(void *dst, const void *src, size_t bytes)
{
    int err = cu.Memcpy(dst, src, bytes, D2H);
    cr_assert_eq(err, 0, "cudaMemcpy from the device: %s", cu.GetErrorName(err));
}

/* ------------------------------------------------------------------------ */

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    client = mxt_connect(&daemon_);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(gpu, .init = setup, .fini = teardown, .timeout = 120);

static void load(const char *lib)
{
    int rc = mxop_load_library(client, lib);
    cr_assert_eq(rc, 0, "load %s: %s: %s", lib, mxop_err_name(rc), mxop_last_error(client));
}

/* The session still serves: relu.so on host tensors. */
static void session_still_works(void)
{
    load("relu.so");
    int64_t shape[] = {5};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, shape, 7, &x);
    mxt_array(client, MXOP_F32, 1, shape, 8, &y);
    int rc = mxop_forward(client, mxt_op(client, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "relu after the refusal: %s: %s", mxop_err_name(rc),
                 mxop_last_error(client));
    for (size_t i = 0; i < 5; i++)
        cr_assert_float_eq(mxt_get(&y, i), fmax(mxt_get(&x, i), 0.0), 1e-7);
    cr_assert(mxt_daemon_alive(&daemon_));
}

static uint64_t regions_now(void)
{
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(client, &st), 0, "%s", mxop_last_error(client));
    return st.regions;
}

/* ---- everywhere ---------------------------------------------------------- */

Test(gpu, fake_ipc_handle_without_device_is_refused_cleanly)
{
    unsigned char handle[64];
    for (int i = 0; i < 64; i++)
        handle[i] = (unsigned char)(0xA5 ^ i);
    uint64_t before = regions_now();
    for (int attempt = 0; attempt < 2; attempt++) {
        uint32_t region = 77;
        int rc = mxop_region_register_cuda_ipc(client, handle, sizeof(handle), 0, 1 << 20, &region);
        const char *msg = mxop_last_error(client);
        cr_assert_eq(region, 0, "a refused registration gives region 0");
        if (gpu_count() > 0) {
            /* A device is there: the handle itself is what cannot be opened. */
            cr_assert_eq(rc, MXOP_ECUDA, "fake handle with a GPU: %s: %s", mxop_err_name(rc), msg);
            cr_assert(strstr(msg, "cudaIpcOpenMemHandle") != NULL, "message: %s", msg);
        } else {
            cr_assert_eq(rc, MXOP_ENO_DEVICE, "fake handle, no GPU: %s: %s", mxop_err_name(rc),
                         msg);
            cr_assert(strncmp(msg, "no CUDA device: ", 16) == 0, "message: %s", msg);
            cr_assert(strstr(msg, "device region") != NULL, "message names the region: %s", msg);
        }
    }
    cr_assert_eq(regions_now(), before, "a refused device region is not kept");
    session_still_works();
}

Test(gpu, register_cuda_without_device_or_with_a_host_pointer)
{
    static float host_memory[16];
    uint32_t region = 5;
    uint64_t offset = 5;
    int rc = mxop_region_register_cuda(client, host_memory, sizeof(host_memory), &region, &offset);
    const char *msg = mxop_last_error(client);
    cr_assert_eq(region, 0);
    cr_assert_eq(offset, 0);
    /*
     * The client asks the driver, the runtime of gpu_count() may disagree
     * with it (a runtime newer than the driver): a driver that works says
     * "not CUDA memory" even where this process's runtime sees no device.
     */
    if (gpu_count() > 0 || rc == MXOP_EINVAL) {
        cr_assert_eq(rc, MXOP_EINVAL, "host pointer: %s: %s", mxop_err_name(rc), msg);
        cr_assert(strstr(msg, "not CUDA memory") != NULL || strstr(msg, "not device") != NULL,
                  "message: %s", msg);
    } else {
        cr_assert_eq(rc, MXOP_ENO_DEVICE, "no GPU: %s: %s", mxop_err_name(rc), msg);
        cr_assert(strncmp(msg, "no CUDA device: ", 16) == 0, "message: %s", msg);
    }
    session_still_works();
}

Test(gpu, bad_arguments)
{
    unsigned char handle[64] = {1};
    uint32_t region;
    uint64_t offset;
    cr_assert_eq(mxop_region_register_cuda_ipc(client, handle, 63, 0, 4096, &region), MXOP_EINVAL);
    cr_assert(strstr(mxop_last_error(client), "64 bytes") != NULL, "%s", mxop_last_error(client));
    cr_assert_eq(mxop_region_register_cuda_ipc(client, handle, 64, -1, 4096, &region), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_cuda_ipc(client, handle, 64, 0, 0, &region), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_cuda_ipc(client, NULL, 64, 0, 4096, &region), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_cuda_ipc(client, handle, 64, 0, 4096, NULL), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_cuda(client, NULL, 16, &region, &offset), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_cuda(client, handle, 16, NULL, &offset), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_cuda(NULL, handle, 16, &region, &offset), MXOP_EINVAL);
    session_still_works();
}

Test(gpu, cuda_library_loads_and_its_host_paths_work)
{
    NEED_PLUGIN("plugins", "relu_cuda.so");
    load("relu_cuda.so");
    const char *names[] = {"relu_cuda", "matmul_cuda", "dropout_cuda"};
    for (int i = 0; i < 3; i++) {
        const mxop_op_t *op;
        cr_assert_eq(mxop_op_find(client, names[i], &op), 0, "op %s is listed", names[i]);
        mxop_op_info_t info;
        cr_assert_eq(mxop_op_info(op, &info), 0);
        cr_assert_str_eq(info.library, "relu_cuda.so");
        cr_assert_eq(info.has_backward, i < 2, "%s has_backward", names[i]);
    }

    /* relu_cuda on host tensors: its host forward and backward. */
    int64_t shape[] = {3, 41};
    mxop_array_t x, y, dy, dx;
    mxt_array(client, MXOP_F64, 2, shape, 1, &x);
    mxt_array(client, MXOP_F64, 2, shape, 2, &y);
    mxt_array(client, MXOP_F64, 2, shape, 3, &dy);
    mxt_array(client, MXOP_F64, 2, shape, 4, &dx);
    size_t n = mxt_elems(&x);
    int rc = mxop_forward(client, mxt_op(client, "relu_cuda"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    double want[3 * 41];
    for (size_t i = 0; i < n; i++)
        want[i] = fmax(mxt_get(&x, i), 0.0);
    mxt_assert_close(&y, want, n, 0, 0);
    mxop_array_t bin[3] = {dy, x, y};
    rc = mxop_backward(client, mxt_op(client, "relu_cuda"), NULL, bin, 3, &dx, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    for (size_t i = 0; i < n; i++)
        want[i] = mxt_get(&x, i) > 0 ? mxt_get(&dy, i) : 0.0;
    mxt_assert_close(&dx, want, n, 0, 0);

    /* matmul_cuda on host tensors: the host gemm. */
    int64_t sa[] = {4, 3}, sb[] = {3, 5}, sc[] = {4, 5};
    mxop_array_t a, b, c;
    mxt_array(client, MXOP_F64, 2, sa, 5, &a);
    mxt_array(client, MXOP_F64, 2, sb, 6, &b);
    mxt_array(client, MXOP_F64, 2, sc, 7, &c);
    mxop_array_t min[2] = {a, b};
    rc = mxop_forward(client, mxt_op(client, "matmul_cuda"), NULL, min, 2, &c, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    double wc[20];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            double s = 0;
            for (int l = 0; l < 3; l++)
                s += mxt_get(&a, (size_t)(i * 3 + l)) * mxt_get(&b, (size_t)(l * 5 + j));
            wc[i * 5 + j] = s;
        }
    mxt_assert_close(&c, wc, 20, 1e-12, 1e-12);

    /* dropout_cuda: the same seed draws the same mask; about p are dropped. */
    int64_t sd[] = {4096};
    mxop_array_t dxin, d1, d2;
    mxt_array(client, MXOP_F32, 1, sd, 9, &dxin);
    mxt_array(client, MXOP_F32, 1, sd, 10, &d1);
    mxt_array(client, MXOP_F32, 1, sd, 11, &d2);
    for (size_t i = 0; i < 4096; i++)
        mxt_set(&dxin, i, 1.0);
    const char *attrs[] = {"p", "0.25", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .seed = 1234};
    cr_assert_eq(mxop_forward(client, mxt_op(client, "dropout_cuda"), &call, &dxin, 1, &d1, 1), 0,
                 "%s", mxop_last_error(client));
    cr_assert_eq(mxop_forward(client, mxt_op(client, "dropout_cuda"), &call, &dxin, 1, &d2, 1), 0,
                 "%s", mxop_last_error(client));
    size_t dropped = 0;
    for (size_t i = 0; i < 4096; i++) {
        cr_assert_eq(mxt_get(&d1, i), mxt_get(&d2, i), "element %zu differs for one seed", i);
        double v = mxt_get(&d1, i);
        cr_assert(v == 0.0 || fabs(v - 1.0 / 0.75) < 1e-6, "element %zu = %g", i, v);
        dropped += v == 0.0;
    }
    cr_assert(dropped > 4096 * 0.2 && dropped < 4096 * 0.3, "dropped %zu of 4096 at p 0.25",
              dropped);
}

Test(gpu, gpu_only_op_refuses_host_tensors)
{
    NEED_PLUGIN("tests/plugins", "crash_cuda.so");
    load("crash_cuda.so");
    int64_t shape[] = {8};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, shape, 1, &x);
    mxt_array(client, MXOP_F32, 1, shape, 2, &y);
    int rc = mxop_forward(client, mxt_op(client, "cuda_gpu_only"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ENOT_SUPPORTED, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "device tensors only") != NULL, "%s",
              mxop_last_error(client));
    session_still_works();
}

/* ---- with a GPU ---------------------------------------------------------- */

/* One allocation holding x at +4096 and y at +(1 MiB + 256): offsets inside a block. */
typedef struct devbuf {
    uint8_t *base;
    size_t bytes;
} devbuf_t;

static devbuf_t dev_block(size_t bytes)
{
    devbuf_t b = {dmalloc(bytes), bytes};
    return b;
}

/* Releases the block's region (it must go before the memory does), then frees it. */
static void dev_free(devbuf_t *b, uint32_t region)
{
    int rc = mxop_region_release(client, region);
    cr_assert_eq(rc, 0, "release: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    cu.Free(b->base);
}

static mxop_array_t dev_view(devbuf_t *b, size_t at, int32_t dtype, int ndim, const int64_t *shape,
                             size_t nbytes)
{
    uint32_t region = 0;
    uint64_t offset = 0;
    int rc = mxop_region_register_cuda(client, b->base + at, nbytes, &region, &offset);
    cr_assert_eq(rc, 0, "register_cuda: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert_eq(offset, at, "the offset inside the allocation");
    mxop_array_t a;
    rc = mxop_array_view(client, region, offset, dtype, ndim, shape, &a);
    cr_assert_eq(rc, 0, "array_view: %s", mxop_last_error(client));
    cr_assert_eq(a.data, b->base + at, "a device view's data is the device pointer");
    return a;
}

Test(gpu, relu_cuda_on_device_matches_host)
{
    NEED_GPU();
    NEED_PLUGIN("plugins", "relu_cuda.so");
    load("relu_cuda.so");
    enum { N = 100003 };
    size_t nb = N * sizeof(float);
    devbuf_t blk = dev_block(8u << 20);
    int64_t shape[] = {N};
    mxop_array_t x = dev_view(&blk, 4096, MXOP_F32, 1, shape, nb);
    mxop_array_t y = dev_view(&blk, (1u << 20) + 256, MXOP_F32, 1, shape, nb);
    mxop_array_t dy = dev_view(&blk, (2u << 20), MXOP_F32, 1, shape, nb);
    mxop_array_t dx = dev_view(&blk, (3u << 20) + 512, MXOP_F32, 1, shape, nb);
    cr_assert_eq(x.region, y.region, "one allocation is one region");
    cr_assert_eq(x.region, dx.region);

    float *hx = malloc(nb), *hdy = malloc(nb), *got = malloc(nb);
    for (size_t i = 0; i < N; i++) {
        hx[i] = (float)((double)((i * 7919) % 2001) - 1000.0) / 97.0f;
        hdy[i] = (float)(i % 13) - 6.0f;
    }
    to_dev(x.data, hx, nb);
    to_dev(dy.data, hdy, nb);
    cr_assert_eq(cu.DeviceSynchronize(), 0);

    int rc = mxop_forward(client, mxt_op(client, "relu_cuda"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "relu_cuda forward on the GPU: %s: %s", mxop_err_name(rc),
                 mxop_last_error(client));
    from_dev(got, y.data, nb);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(got[i], hx[i] > 0 ? hx[i] : 0.0f, "y[%zu]", i);

    mxop_array_t bin[3] = {dy, x, y};
    rc = mxop_backward(client, mxt_op(client, "relu_cuda"), NULL, bin, 3, &dx, 1);
    cr_assert_eq(rc, 0, "relu_cuda backward on the GPU: %s: %s", mxop_err_name(rc),
                 mxop_last_error(client));
    from_dev(got, dx.data, nb);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(got[i], hx[i] > 0 ? hdy[i] : 0.0f, "dx[%zu]", i);

    /* Bounds: a view past the allocation is refused here. */
    mxop_array_t bad;
    int64_t big[] = {(int64_t)(8u << 20) / 4};
    cr_assert_eq(mxop_array_view(client, x.region, 4096, MXOP_F32, 1, big, &bad), MXOP_EBOUNDS);

    dev_free(&blk, x.region);
    free(hx);
    free(hdy);
    free(got);
}

Test(gpu, matmul_cuda_cublas_matches_host_gemm)
{
    NEED_GPU();
    NEED_PLUGIN("plugins", "relu_cuda.so");
    load("relu_cuda.so");
    enum { M = 67, K = 45, NN = 93 };
    int64_t sa[] = {M, K}, sb[] = {K, NN}, sc[] = {M, NN};
    mxop_array_t ha, hb, hc;
    mxt_array(client, MXOP_F64, 2, sa, 1, &ha);
    mxt_array(client, MXOP_F64, 2, sb, 2, &hb);
    mxt_array(client, MXOP_F64, 2, sc, 3, &hc);
    mxop_array_t hin[2] = {ha, hb};
    cr_assert_eq(mxop_forward(client, mxt_op(client, "matmul_cuda"), NULL, hin, 2, &hc, 1), 0, "%s",
                 mxop_last_error(client));

    devbuf_t blk = dev_block(1u << 20);
    mxop_array_t da = dev_view(&blk, 0, MXOP_F64, 2, sa, M * K * 8);
    mxop_array_t db = dev_view(&blk, 65536, MXOP_F64, 2, sb, K * NN * 8);
    mxop_array_t dc = dev_view(&blk, 262144, MXOP_F64, 2, sc, M * NN * 8);
    to_dev(da.data, ha.data, M * K * 8);
    to_dev(db.data, hb.data, K * NN * 8);
    mxop_array_t din[2] = {da, db};
    int rc = mxop_forward(client, mxt_op(client, "matmul_cuda"), NULL, din, 2, &dc, 1);
    cr_assert_eq(rc, 0, "matmul_cuda on the GPU: %s: %s", mxop_err_name(rc),
                 mxop_last_error(client));
    double *got = malloc(M * NN * 8);
    from_dev(got, dc.data, M * NN * 8);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)M * NN; i++) {
        double w = mxt_get(&hc, i);
        num += (got[i] - w) * (got[i] - w);
        den += w * w;
    }
    cr_assert(sqrt(num / den) < 1e-12, "relative error %g", sqrt(num / den));
    free(got);
    dev_free(&blk, da.region);
}

Test(gpu, device_mismatch_and_host_only_op)
{
    NEED_GPU();
    NEED_PLUGIN("plugins", "relu_cuda.so");
    load("relu_cuda.so");
    load("relu.so");
    devbuf_t blk = dev_block(1u << 16);
    int64_t shape[] = {16};
    mxop_array_t dxa = dev_view(&blk, 0, MXOP_F32, 1, shape, 64);
    mxop_array_t hy;
    mxt_array(client, MXOP_F32, 1, shape, 1, &hy);
    int rc = mxop_forward(client, mxt_op(client, "relu_cuda"), NULL, &dxa, 1, &hy, 1);
    cr_assert_eq(rc, MXOP_EINVAL, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "device mismatch") != NULL, "%s",
              mxop_last_error(client));
    mxop_array_t dya = dev_view(&blk, 1024, MXOP_F32, 1, shape, 64);
    rc = mxop_forward(client, mxt_op(client, "relu"), NULL, &dxa, 1, &dya, 1);
    cr_assert_eq(rc, MXOP_ENOT_SUPPORTED, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "forward_gpu") != NULL, "%s",
              mxop_last_error(client));
    dev_free(&blk, dxa.region);
}

Test(gpu, cuda_errors_are_named_and_a_lost_context_restarts_the_worker)
{
    NEED_GPU();
    NEED_PLUGIN("plugins", "relu_cuda.so");
    NEED_PLUGIN("tests/plugins", "crash_cuda.so");
    load("relu_cuda.so");
    load("crash_cuda.so");
    devbuf_t blk = dev_block(1u << 20);
    int64_t shape[] = {1000};
    mxop_array_t x = dev_view(&blk, 0, MXOP_F32, 1, shape, 4000);
    mxop_array_t y = dev_view(&blk, 8192, MXOP_F32, 1, shape, 4000);
    mxop_stats_t st0, st1;
    cr_assert_eq(mxop_stats(client, &st0), 0);

    int rc = mxop_forward(client, mxt_op(client, "cuda_bad_launch"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ECUDA, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "cuda_bad_launch") != NULL, "%s",
              mxop_last_error(client));
    rc = mxop_forward(client, mxt_op(client, "cuda_unchecked_launch"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ECUDA, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "left a CUDA error") != NULL, "%s",
              mxop_last_error(client));
    cr_assert_eq(mxop_stats(client, &st1), 0);
    cr_assert_eq(st1.worker_restarts, st0.worker_restarts, "a launch error keeps the worker");

    rc = mxop_forward(client, mxt_op(client, "cuda_illegal_address"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ECUDA, "%s: %s", mxop_err_name(rc), mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "cudaErrorIllegalAddress") != NULL, "%s",
              mxop_last_error(client));
    cr_assert(strstr(mxop_last_error(client), "restarted") != NULL, "%s", mxop_last_error(client));

    /* The new worker re-opened the region: the same arrays work again. */
    float hx[1000], got[1000];
    for (int i = 0; i < 1000; i++)
        hx[i] = (float)(i - 500);
    to_dev(x.data, hx, sizeof(hx));
    rc = mxop_forward(client, mxt_op(client, "relu_cuda"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "relu_cuda after the restart: %s: %s", mxop_err_name(rc),
                 mxop_last_error(client));
    from_dev(got, y.data, sizeof(got));
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(got[i], hx[i] > 0 ? hx[i] : 0.0f);
    cr_assert_eq(mxop_stats(client, &st1), 0);
    cr_assert_eq(st1.worker_restarts, st0.worker_restarts + 1);
    dev_free(&blk, x.region);
}

Test(gpu, workspace_stream_and_repeat)
{
    NEED_GPU();
    NEED_PLUGIN("tests/plugins", "crash_cuda.so");
    load("crash_cuda.so");
    devbuf_t blk = dev_block(1u << 20);
    int64_t shape[] = {4096};
    mxop_array_t x = dev_view(&blk, 0, MXOP_F32, 1, shape, 16384);
    mxop_array_t y = dev_view(&blk, 65536, MXOP_F32, 1, shape, 16384);
    float hx[4096], got[4096];
    for (int i = 0; i < 4096; i++)
        hx[i] = (float)i * 0.5f;
    to_dev(x.data, hx, sizeof(hx));
    for (int round = 0; round < 3; round++) {
        int rc = mxop_forward(client, mxt_op(client, "cuda_workspace"), NULL, &x, 1, &y, 1);
        cr_assert_eq(rc, 0, "round %d: %s: %s", round, mxop_err_name(rc), mxop_last_error(client));
        from_dev(got, y.data, sizeof(got));
        for (int i = 0; i < 4096; i++)
            cr_assert_eq(got[i], hx[i] + 1.0f, "round %d, y[%d]", round, i);
    }
    dev_free(&blk, x.region);
}
