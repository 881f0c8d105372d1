/*
 * bench/gpu_check.c - the GPU check: correctness and cost of GPU ops through
 * mxop, on a machine with a CUDA device.  Run by bench/gpu-check.sh.
 *
 *     gpu_check [BUILD]
 *
 * 1. relu_cuda forward and backward on device tensors against the same op's
 *    host path through mxop (relative error printed);
 * 2. matmul_cuda (cuBLAS through the host table's gpu_gemm) against the
 *    host gemm (OpenBLAS) through mxop, f32 and f64;
 * 3. the IPC path: many tensors at offsets inside one cudaMalloc block, one
 *    region, including an offset that is not 256-byte aligned;
 * 4. an illegal address inside a CUDA op: the call answers MXOP_ECUDA, the
 *    worker is restarted and the same device arrays work again;
 * 5. overhead: a small relu_cuda through mxop (engine stream sync, call,
 *    worker stream sync) against the same op called in this process
 *    (launch and stream sync), median and p99.
 *
 * Exits 77 with "no GPU: ..." where there is no device, 0 when every check
 * passed, 1 otherwise.  The CUDA runtime is loaded with dlopen, so this
 * file builds everywhere (make builds it as BUILD/bin/gpu_check).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/lib/daemon.h"
#include "bench/lib/env.h"
#include "bench/lib/stats.h"
#include "mxop/client.h"
#include "mxop/op.h"

#define H2D 1
#define D2H 2

static struct {
    int (*GetDeviceCount)(int *);
    const char *(*GetErrorName)(int);
    int (*Malloc)(void **, size_t);
    int (*Free)(void *);
    int (*Memcpy)(void *, const void *, size_t, int);
    int (*DeviceSynchronize)(void);
    int (*StreamCreateWithFlags)(void **, unsigned);
    int (*StreamSynchronize)(void *);
    int (*RuntimeGetVersion)(int *);
    int (*DriverGetVersion)(int *);
} cu;

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("  FAIL: ");                                                                    \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CU(call)                                                                                   \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        if (e_ != 0) {                                                                             \
            printf("gpu_check: %s failed: %s\n", #call, cu.GetErrorName(e_));                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* 0 with the runtime loaded and a device seen, else -1 with the reason. */
static int load_cuda(char *why, size_t len)
{
    const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *h = NULL;
    for (size_t i = 0; h == NULL && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, len, "the CUDA runtime cannot be loaded (%s)", dlerror());
        return -1;
    }
    struct {
        const char *n;
        void **slot;
    } syms[] = {
        {"cudaGetDeviceCount", (void **)&cu.GetDeviceCount},
        {"cudaGetErrorName", (void **)&cu.GetErrorName},
        {"cudaMalloc", (void **)&cu.Malloc},
        {"cudaFree", (void **)&cu.Free},
        {"cudaMemcpy", (void **)&cu.Memcpy},
        {"cudaDeviceSynchronize", (void **)&cu.DeviceSynchronize},
        {"cudaStreamCreateWithFlags", (void **)&cu.StreamCreateWithFlags},
        {"cudaStreamSynchronize", (void **)&cu.StreamSynchronize},
        {"cudaRuntimeGetVersion", (void **)&cu.RuntimeGetVersion},
        {"cudaDriverGetVersion", (void **)&cu.DriverGetVersion},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(h, syms[i].n);
        if (f == NULL) {
            snprintf(why, len, "the CUDA runtime lacks %s", syms[i].n);
            return -1;
        }
        memcpy(syms[i].slot, &f, sizeof(f));
    }
    int n = 0, err = cu.GetDeviceCount(&n);
    if (err != 0 || n <= 0) {
        snprintf(why, len, "cudaGetDeviceCount returned %s with %d devices",
                 err ? cu.GetErrorName(err) : "cudaSuccess", n);
        return -1;
    }
    return 0;
}

static mxop_client_t *client;

static const mxop_op_t *op_named(const char *name)
{
    const mxop_op_t *op = NULL;
    if (mxop_op_find(client, name, &op) != 0) {
        printf("gpu_check: op %s: %s\n", name, mxop_last_error(client));
        exit(1);
    }
    return op;
}

static void ok(int rc, const char *what)
{
    if (rc != 0) {
        printf("gpu_check: %s: %s: %s\n", what, mxop_err_name(rc), mxop_last_error(client));
        exit(1);
    }
}

/* A view of `bytes` at base+at, registered through the device pointer. */
static mxop_array_t dview(uint8_t *base, size_t at, int32_t dtype, int ndim, const int64_t *shape,
                          size_t bytes)
{
    uint32_t region;
    uint64_t offset;
    ok(mxop_region_register_cuda(client, base + at, bytes, &region, &offset), "register_cuda");
    CHECK(offset == at, "offset %llu, expected %zu", (unsigned long long)offset, at);
    mxop_array_t a;
    ok(mxop_array_view(client, region, offset, dtype, ndim, shape, &a), "array_view");
    return a;
}

static double rel_err_f(const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double rel_err_d(const double *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 250.0f;
    }
}

/* ---- 1, 3: relu_cuda and the IPC offsets -------------------------------- */

static void check_relu(uint8_t *blk)
{
    enum { N = 1 << 20 };
    size_t nb = (size_t)N * 4;
    int64_t shape[] = {N};
    /* Offsets inside one 64 MiB block, one of them only 4-byte aligned. */
    mxop_array_t x = dview(blk, 4096, MXOP_F32, 1, shape, nb);
    mxop_array_t y = dview(blk, (8u << 20) + 4, MXOP_F32, 1, shape, nb);
    mxop_array_t dy = dview(blk, 16u << 20, MXOP_F32, 1, shape, nb);
    mxop_array_t dx = dview(blk, (24u << 20) + 256, MXOP_F32, 1, shape, nb);
    CHECK(x.region == y.region && y.region == dy.region && dy.region == dx.region,
          "one allocation gave regions %u %u %u %u", x.region, y.region, dy.region, dx.region);

    mxop_array_t hx, hy, hdy, hdx;
    ok(mxop_array_alloc(client, MXOP_F32, 1, shape, &hx), "alloc");
    ok(mxop_array_alloc(client, MXOP_F32, 1, shape, &hy), "alloc");
    ok(mxop_array_alloc(client, MXOP_F32, 1, shape, &hdy), "alloc");
    ok(mxop_array_alloc(client, MXOP_F32, 1, shape, &hdx), "alloc");
    fill(hx.data, N, 1);
    fill(hdy.data, N, 2);
    CU(cu.Memcpy(x.data, hx.data, nb, H2D));
    CU(cu.Memcpy(dy.data, hdy.data, nb, H2D));
    CU(cu.DeviceSynchronize());

    const mxop_op_t *relu = op_named("relu_cuda");
    ok(mxop_forward(client, relu, NULL, &hx, 1, &hy, 1), "relu_cuda forward (host)");
    ok(mxop_forward(client, relu, NULL, &x, 1, &y, 1), "relu_cuda forward (GPU)");
    float *got = malloc(nb);
    CU(cu.Memcpy(got, y.data, nb, D2H));
    double ef = rel_err_f(got, hy.data, N);
    mxop_array_t hin[3] = {hdy, hx, hy}, din[3] = {dy, x, y};
    ok(mxop_backward(client, relu, NULL, hin, 3, &hdx, 1), "relu_cuda backward (host)");
    ok(mxop_backward(client, relu, NULL, din, 3, &dx, 1), "relu_cuda backward (GPU)");
    CU(cu.Memcpy(got, dx.data, nb, D2H));
    double eb = rel_err_f(got, hdx.data, N);
    printf("relu_cuda  %d f32 elements: forward relative error %.3g, backward %.3g "
           "(GPU vs host path)\n",
           N, ef, eb);
    CHECK(ef == 0 && eb == 0, "relu_cuda differs from its host path");
    printf("IPC offsets: 4 tensors at +4 KiB, +8 MiB+4 B, +16 MiB, +24 MiB+256 B of one "
           "allocation: region %u, offsets checked\n",
           x.region);
    free(got);
    mxop_array_free(client, &hx);
    mxop_array_free(client, &hy);
    mxop_array_free(client, &hdy);
    mxop_array_free(client, &hdx);
}

/* ---- 2: cuBLAS gemm ------------------------------------------------------ */

static void check_matmul(uint8_t *blk, int32_t dtype)
{
    enum { M = 512, K = 384, NN = 256 };
    size_t es = dtype == MXOP_F32 ? 4 : 8;
    int64_t sa[] = {M, K}, sb[] = {K, NN}, sc[] = {M, NN};
    mxop_array_t ha, hb, hc;
    ok(mxop_array_alloc(client, dtype, 2, sa, &ha), "alloc");
    ok(mxop_array_alloc(client, dtype, 2, sb, &hb), "alloc");
    ok(mxop_array_alloc(client, dtype, 2, sc, &hc), "alloc");
    float *fa = malloc((size_t)M * K * 4), *fb = malloc((size_t)K * NN * 4);
    fill(fa, (size_t)M * K, 3);
    fill(fb, (size_t)K * NN, 4);
    for (size_t i = 0; i < (size_t)M * K; i++) {
        if (dtype == MXOP_F32)
            ((float *)ha.data)[i] = fa[i];
        else
            ((double *)ha.data)[i] = fa[i];
    }
    for (size_t i = 0; i < (size_t)K * NN; i++) {
        if (dtype == MXOP_F32)
            ((float *)hb.data)[i] = fb[i];
        else
            ((double *)hb.data)[i] = fb[i];
    }
    mxop_array_t da = dview(blk, 32u << 20, dtype, 2, sa, (size_t)M * K * es);
    mxop_array_t db = dview(blk, 40u << 20, dtype, 2, sb, (size_t)K * NN * es);
    mxop_array_t dc = dview(blk, 48u << 20, dtype, 2, sc, (size_t)M * NN * es);
    CU(cu.Memcpy(da.data, ha.data, (size_t)M * K * es, H2D));
    CU(cu.Memcpy(db.data, hb.data, (size_t)K * NN * es, H2D));
    CU(cu.DeviceSynchronize());
    const mxop_op_t *mm = op_named("matmul_cuda");
    mxop_array_t hin[2] = {ha, hb}, din[2] = {da, db};
    ok(mxop_forward(client, mm, NULL, hin, 2, &hc, 1), "matmul_cuda (host gemm)");
    ok(mxop_forward(client, mm, NULL, din, 2, &dc, 1), "matmul_cuda (cuBLAS)");
    void *got = malloc((size_t)M * NN * es);
    CU(cu.Memcpy(got, dc.data, (size_t)M * NN * es, D2H));
    double e = dtype == MXOP_F32 ? rel_err_f(got, hc.data, (size_t)M * NN)
                                 : rel_err_d(got, hc.data, (size_t)M * NN);
    printf("matmul_cuda %dx%d * %dx%d %s: cuBLAS vs OpenBLAS relative error %.3g\n", M, K, K, NN,
           dtype == MXOP_F32 ? "f32" : "f64", e);
    /* f32 on a GPU may use TF32 or another summation order: a looser bound. */
    CHECK(e < (dtype == MXOP_F32 ? 1e-3 : 1e-12), "gemm error %g too large", e);
    free(got);
    free(fa);
    free(fb);
    mxop_array_free(client, &ha);
    mxop_array_free(client, &hb);
    mxop_array_free(client, &hc);
}

/* ---- 4: a crash inside a CUDA op ----------------------------------------- */

static void check_crash(uint8_t *blk)
{
    int64_t shape[] = {1024};
    mxop_array_t x = dview(blk, 56u << 20, MXOP_F32, 1, shape, 4096);
    mxop_array_t y = dview(blk, (56u << 20) + 65536, MXOP_F32, 1, shape, 4096);
    float hx[1024], got[1024];
    fill(hx, 1024, 5);
    CU(cu.Memcpy(x.data, hx, sizeof(hx), H2D));
    mxop_stats_t s0, s1;
    ok(mxop_stats(client, &s0), "stats");
    int64_t t0 = mxb_now_ns();
    int rc = mxop_forward(client, op_named("cuda_illegal_address"), NULL, &x, 1, &y, 1);
    int64_t t1 = mxb_now_ns();
    printf("crash: cuda_illegal_address answered %s in %.1f ms: %s\n", mxop_err_name(rc),
           (t1 - t0) / 1e6, mxop_last_error(client));
    CHECK(rc == MXOP_ECUDA, "expected MXOP_ECUDA, got %s", mxop_err_name(rc));
    rc = mxop_forward(client, op_named("relu_cuda"), NULL, &x, 1, &y, 1);
    int64_t t2 = mxb_now_ns();
    CHECK(rc == 0, "relu_cuda after the crash: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    CU(cu.Memcpy(got, y.data, sizeof(got), D2H));
    int same = 1;
    for (int i = 0; i < 1024; i++)
        same &= got[i] == (hx[i] > 0 ? hx[i] : 0.0f);
    CHECK(same, "relu_cuda after the restart gave wrong results");
    ok(mxop_stats(client, &s1), "stats");
    CHECK(s1.worker_restarts == s0.worker_restarts + 1, "worker restarts %llu -> %llu",
          (unsigned long long)s0.worker_restarts, (unsigned long long)s1.worker_restarts);
    printf("crash: worker restarted (pid %u -> %u), device region re-opened, next call ok "
           "after %.1f ms\n",
           s0.worker_pid, s1.worker_pid, (t2 - t1) / 1e6);
}

/* ---- 5: overhead ---------------------------------------------------------- */

static void *inproc_stream;
static uint64_t inproc_seed;

static int ip_set_error(mxop_ctx_t *ctx, int code, const char *fmt, ...)
{
    return code;
}

static void *ip_stream(mxop_ctx_t *ctx)
{
    return inproc_stream;
}

static uint64_t ip_seed(mxop_ctx_t *ctx)
{
    return ++inproc_seed;
}

static mxop_op_def_t ip_relu;

static int ip_register(mxop_ctx_t *ctx, const mxop_op_def_t *def)
{
    if (strcmp(def->name, "relu_cuda") == 0)
        memcpy(&ip_relu, def,
               def->struct_size < sizeof(ip_relu) ? def->struct_size : sizeof(ip_relu));
    return 0;
}

static void overhead(const char *build, uint8_t *blk, int iters)
{
    enum { N = 1024 };
    int64_t shape[] = {N};
    mxop_array_t x = dview(blk, 60u << 20, MXOP_F32, 1, shape, N * 4);
    mxop_array_t y = dview(blk, (60u << 20) + 65536, MXOP_F32, 1, shape, N * 4);
    const mxop_op_t *relu = op_named("relu_cuda");
    mxb_samples_t sm, si;
    mxb_samples_init(&sm, (size_t)iters);
    mxb_samples_init(&si, (size_t)iters);
    for (int i = 0; i < iters / 10; i++)
        ok(mxop_forward(client, relu, NULL, &x, 1, &y, 1), "warm-up");
    for (int i = 0; i < iters; i++) {
        int64_t t0 = mxb_now_ns();
        CU(cu.StreamSynchronize(NULL)); /* the engine's part of the ordering */
        ok(mxop_forward(client, relu, NULL, &x, 1, &y, 1), "relu_cuda");
        mxb_samples_add(&sm, mxb_now_ns() - t0);
    }

    /* The same library in this process: launch on a stream, synchronise. */
    char path[600];
    snprintf(path, sizeof(path), "%s/plugins/relu_cuda.so", build);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        printf("gpu_check: %s: %s\n", path, dlerror());
        failures++;
        return;
    }
    mxop_plugin_init_fn init;
    void *f = dlsym(h, "mxop_plugin_init");
    memcpy(&init, &f, sizeof(f));
    mxop_host_t host;
    memset(&host, 0, sizeof(host));
    host.struct_size = sizeof(host);
    host.abi_version = MXOP_ABI_VERSION;
    host.register_op = ip_register;
    host.set_error = ip_set_error;
    host.cuda_stream = ip_stream;
    host.rng_seed = ip_seed;
    CU(cu.StreamCreateWithFlags(&inproc_stream, 1));
    if (init == NULL || init(NULL, &host) != 0 || ip_relu.forward_gpu == NULL) {
        printf("gpu_check: relu_cuda.so did not initialise in process\n");
        failures++;
        return;
    }
    mxop_tensor_t tx, ty;
    memset(&tx, 0, sizeof(tx));
    tx.data = x.data;
    tx.dtype = MXOP_F32;
    tx.ndim = 1;
    tx.shape[0] = N;
    tx.strides[0] = 1;
    tx.device = 0;
    tx.size = N;
    ty = tx;
    ty.data = y.data;
    for (int i = 0; i < iters / 10; i++)
        ip_relu.forward_gpu(NULL, 1, &tx, 1, &ty);
    CU(cu.StreamSynchronize(inproc_stream));
    for (int i = 0; i < iters; i++) {
        int64_t t0 = mxb_now_ns();
        ip_relu.forward_gpu(NULL, 1, &tx, 1, &ty);
        CU(cu.StreamSynchronize(inproc_stream));
        mxb_samples_add(&si, mxb_now_ns() - t0);
    }
    double mm = mxb_median(&sm) / 1e3, mp = mxb_p99(&sm) / 1e3;
    double im = mxb_median(&si) / 1e3, ip = mxb_p99(&si) / 1e3;
    printf("overhead: relu_cuda on %d f32, %d calls: through mxop median %.1f us (p99 %.1f), "
           "in process median %.1f us (p99 %.1f): mxop adds %.1f us\n",
           N, iters, mm, mp, im, ip, mm - im);
    printf("overhead-csv: mxop_median_us,%.2f,mxop_p99_us,%.2f,inproc_median_us,%.2f,"
           "inproc_p99_us,%.2f\n",
           mm, mp, im, ip);
    mxb_samples_free(&sm);
    mxb_samples_free(&si);
}

int main(int argc, char **argv)
{
    char build[512], why[400], err[400];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (load_cuda(why, sizeof(why)) != 0) {
        printf("gpu_check: no GPU: %s\n", why);
        return 77;
    }
    if (mxb_build_dir(argc, argv, build, sizeof(build)) != 0) {
        printf("gpu_check: cannot tell the build directory; pass it as the argument\n");
        return 1;
    }
    int rv = 0, dv = 0;
    cu.RuntimeGetVersion(&rv);
    cu.DriverGetVersion(&dv);
    char machine[256];
    mxb_machine_line(machine, sizeof(machine));
    printf("gpu_check: CUDA runtime %d, driver %d; %s\n", rv, dv, machine);

    mxb_daemon_t d;
    if (mxb_daemon_start(&d, build, err, sizeof(err)) != 0) {
        printf("gpu_check: cannot start mxop-serverd: %s\n", err);
        return 1;
    }
    /* The CUDA fixtures, next to what the daemon was given. */
    char src[700], dst[700];
    snprintf(src, sizeof(src), "%s/tests/plugins/crash_cuda.so", build);
    snprintf(dst, sizeof(dst), "%s/crash_cuda.so", d.plugins);
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    char buf[65536];
    ssize_t n;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            break;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);

    mxop_connect_opts_t opts;
    memset(&opts, 0, sizeof(opts));
    opts.struct_size = sizeof(opts);
    opts.client_name = "gpu_check";
    if (mxop_connect(d.sock, &opts, &client) != 0) {
        printf("gpu_check: connect: %s\n", mxop_connect_error());
        mxb_daemon_stop(&d);
        return 1;
    }
    ok(mxop_load_library(client, "relu_cuda.so"), "load relu_cuda.so");
    ok(mxop_load_library(client, "crash_cuda.so"), "load crash_cuda.so");

    uint8_t *blk = NULL;
    CU(cu.Malloc((void **)&blk, 64u << 20));
    int64_t t0 = mxb_now_ns();
    check_relu(blk);
    check_matmul(blk, MXOP_F32);
    check_matmul(blk, MXOP_F64);
    check_crash(blk);
    const char *it = getenv("MXOP_GPU_CHECK_ITERS");
    overhead(build, blk, it != NULL ? atoi(it) : 2000);
    printf("gpu_check: %d failure%s in %.1f s\n", failures, failures == 1 ? "" : "s",
           (mxb_now_ns() - t0) / 1e9);

    /* The worker holds the block open: release before freeing. */
    uint32_t region;
    uint64_t off;
    if (mxop_region_register_cuda(client, blk, 1, &region, &off) == 0)
        mxop_region_release(client, region);
    mxop_close(client);
    cu.Free(blk);
    mxb_daemon_stop(&d);
    return failures ? 1 : 0;
}
