/*
 * tests/test_mxnet.c - MXNet extension libraries (lib_api version 11) load
 * through mxop_load_library and run as mxop ops; everything MXNet would
 * abort on ends only the worker; what mxop does not support is refused by
 * name.  The libraries are tests/plugins/mx_*.cc (no MXNet code).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"mx_basic.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(mxnet, .init = setup, .fini = teardown, .timeout = 60);

#define OK(expr)                                                                                   \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        cr_assert_eq(rc_, 0, "%s: %s: %s", #expr, mxop_err_name(rc_), mxop_last_error(client));    \
    } while (0)

static void expect_msg(int rc, int code, const char *n1, const char *n2)
{
    const char *msg = mxop_last_error(client);
    cr_assert_eq(rc, code, "got %s (%s), expected %s", mxop_err_name(rc), msg, mxop_err_name(code));
    if (n1 != NULL)
        cr_assert(strstr(msg, n1) != NULL, "message '%s' lacks '%s'", msg, n1);
    if (n2 != NULL)
        cr_assert(strstr(msg, n2) != NULL, "message '%s' lacks '%s'", msg, n2);
}

/* C = alpha A.B, reference in double. */
static void ref_gemm(const mxop_array_t *a, const mxop_array_t *b, double alpha, int n, int k,
                     int m, double *c)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += mxt_get(a, (size_t)(i * k + p)) * mxt_get(b, (size_t)(p * m + j));
            c[i * m + j] = alpha * s;
        }
}

/* my_gemm (from mx_basic.so) runs and matches the reference: the session still serves. */
static void gemm_still_works(void)
{
    int64_t sa[] = {3, 4}, sb[] = {4, 5}, sc[] = {3, 5};
    mxop_array_t a, b, c;
    mxt_array(client, MXOP_F32, 2, sa, 1, &a);
    mxt_array(client, MXOP_F32, 2, sb, 2, &b);
    mxt_array(client, MXOP_F32, 2, sc, 3, &c);
    mxop_array_t in[] = {a, b};
    OK(mxop_forward(client, mxt_op(client, "my_gemm"), NULL, in, 2, &c, 1));
    double want[15];
    ref_gemm(&a, &b, 1.0, 3, 4, 5, want);
    mxt_assert_close(&c, want, 15, 1e-5, 1e-5);
    mxop_array_free(client, &a);
    mxop_array_free(client, &b);
    mxop_array_free(client, &c);
}

Test(mxnet, ops_are_listed_with_their_signature)
{
    mxop_op_info_t info;
    OK(mxop_op_info(mxt_op(client, "my_gemm"), &info));
    cr_assert_eq(info.num_inputs, 2);
    cr_assert_eq(info.num_outputs, 1);
    cr_assert(info.has_backward);
    cr_assert(!info.stateful);
    OK(mxop_op_info(mxt_op(client, "my_counter"), &info));
    cr_assert(info.stateful);
    OK(mxop_op_info(mxt_op(client, "my_mutate"), &info));
    cr_assert_eq(info.mutated_inputs, 2u, "MutateInputs named input 1");
}

Test(mxnet, stateless_forward_with_attribute_matches_reference)
{
    int64_t sa[] = {6, 7}, sb[] = {7, 3}, sc[] = {6, 3};
    mxop_array_t a, b, c;
    mxt_array(client, MXOP_F32, 2, sa, 11, &a);
    mxt_array(client, MXOP_F32, 2, sb, 12, &b);
    mxt_array(client, MXOP_F32, 2, sc, 13, &c);
    mxop_array_t in[] = {a, b};
    const char *attrs[] = {"alpha", "2.5", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    OK(mxop_forward(client, mxt_op(client, "my_gemm"), &call, in, 2, &c, 1));
    double want[18];
    ref_gemm(&a, &b, 2.5, 6, 7, 3, want);
    mxt_assert_close(&c, want, 18, 1e-5, 1e-5);
}

Test(mxnet, backward_layout_and_req)
{
    /* Backward inputs: dC, A, B, C; outputs dA (req write), dB (req add). */
    int n = 3, k = 4, m = 2;
    int64_t sa[] = {3, 4}, sb[] = {4, 2}, sc[] = {3, 2};
    mxop_array_t a, b, c, dc, da, db;
    mxt_array(client, MXOP_F32, 2, sa, 21, &a);
    mxt_array(client, MXOP_F32, 2, sb, 22, &b);
    mxt_array(client, MXOP_F32, 2, sc, 23, &c);
    mxt_array(client, MXOP_F32, 2, sc, 24, &dc);
    mxt_array(client, MXOP_F32, 2, sa, 25, &da);
    mxt_array(client, MXOP_F32, 2, sb, 26, &db);
    double db_before[8];
    for (int i = 0; i < 8; i++)
        db_before[i] = mxt_get(&db, (size_t)i);
    db.req = MXOP_REQ_ADD;
    const char *attrs[] = {"alpha", "0.5", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    mxop_array_t in[] = {dc, a, b, c};
    mxop_array_t out[] = {da, db};
    OK(mxop_backward(client, mxt_op(client, "my_gemm"), &call, in, 4, out, 2));

    double want_da[12], want_db[8];
    for (int i = 0; i < n; i++)
        for (int p = 0; p < k; p++) {
            double s = 0;
            for (int j = 0; j < m; j++)
                s += mxt_get(&dc, (size_t)(i * m + j)) * mxt_get(&b, (size_t)(p * m + j));
            want_da[i * k + p] = 0.5 * s;
        }
    for (int p = 0; p < k; p++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int i = 0; i < n; i++)
                s += mxt_get(&a, (size_t)(i * k + p)) * mxt_get(&dc, (size_t)(i * m + j));
            want_db[p * m + j] = db_before[p * m + j] + 0.5 * s;
        }
    mxt_assert_close(&out[0], want_da, 12, 1e-5, 1e-5);
    mxt_assert_close(&out[1], want_db, 8, 1e-5, 1e-5);
}

Test(mxnet, req_null_leaves_output_untouched)
{
    int64_t sa[] = {2, 2};
    mxop_array_t a, b, dc, c, da, db;
    mxt_array(client, MXOP_F32, 2, sa, 31, &a);
    mxt_array(client, MXOP_F32, 2, sa, 32, &b);
    mxt_array(client, MXOP_F32, 2, sa, 33, &c);
    mxt_array(client, MXOP_F32, 2, sa, 34, &dc);
    mxt_array(client, MXOP_F32, 2, sa, 35, &da);
    mxt_array(client, MXOP_F32, 2, sa, 36, &db);
    float saved[4];
    memcpy(saved, da.data, sizeof(saved));
    da.req = MXOP_REQ_NULL;
    mxop_array_t in[] = {dc, a, b, c};
    mxop_array_t out[] = {da, db};
    OK(mxop_backward(client, mxt_op(client, "my_gemm"), NULL, in, 4, out, 2));
    cr_assert_eq(memcmp(saved, da.data, sizeof(saved)), 0, "req null wrote the output");
}

Test(mxnet, inference_failure_carries_library_message)
{
    int32_t dt[] = {MXOP_F32, MXOP_F32}, odt[1];
    mxop_shape_t sh[] = {{.ndim = 2, .dims = {3, 4}}, {.ndim = 2, .dims = {5, 2}}}, osh[1];
    int rc = mxop_infer(client, mxt_op(client, "my_gemm"), NULL, 2, dt, sh, 1, odt, osh);
    expect_msg(rc, MXOP_ESHAPE, "my_gemm", "inner dimensions differ: A is [3,4], B is [5,2]");

    int32_t bad[] = {MXOP_F64, MXOP_F32};
    sh[1].dims[0] = 4;
    rc = mxop_infer(client, mxt_op(client, "my_gemm"), NULL, 2, bad, sh, 1, odt, osh);
    expect_msg(rc, MXOP_EDTYPE, "input 0 must be float32", NULL);

    /* The good case answers the library's inference. */
    OK(mxop_infer(client, mxt_op(client, "my_gemm"), NULL, 2, dt, sh, 1, odt, osh));
    cr_assert_eq(odt[0], MXOP_F32);
    cr_assert_eq(osh[0].ndim, 2);
    cr_assert_eq(osh[0].dims[0], 3);
    cr_assert_eq(osh[0].dims[1], 2);
    gemm_still_works();
}

Test(mxnet, bad_attribute_and_wrong_arity_are_named)
{
    int64_t sa[] = {2, 2};
    mxop_array_t a, b, c;
    mxt_array(client, MXOP_F32, 2, sa, 41, &a);
    mxt_array(client, MXOP_F32, 2, sa, 42, &b);
    mxt_array(client, MXOP_F32, 2, sa, 43, &c);
    mxop_array_t in[] = {a, b};
    const char *attrs[] = {"alpha", "lots", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(client, mxt_op(client, "my_gemm"), &call, in, 2, &c, 1);
    expect_msg(rc, MXOP_EATTR, "alpha='lots' is not a number", NULL);
    /* One input where MXNet's op would throw std::out_of_range: refused before it runs. */
    rc = mxop_forward(client, mxt_op(client, "my_gemm"), NULL, in, 1, &c, 1);
    expect_msg(rc, MXOP_EARITY, "my_gemm", NULL);
    gemm_still_works();
}

static void read_states(int32_t *created, int32_t *destroyed)
{
    int64_t s[] = {2};
    mxop_array_t o;
    OK(mxop_array_alloc(client, MXOP_I32, 1, s, &o));
    OK(mxop_forward(client, mxt_op(client, "my_states"), NULL, NULL, 0, &o, 1));
    *created = ((int32_t *)o.data)[0];
    *destroyed = ((int32_t *)o.data)[1];
    mxop_array_free(client, &o);
}

Test(mxnet, stateful_op_keeps_state_and_runs_destructor)
{
    const mxop_op_t *op = mxt_op(client, "my_counter");
    int32_t dt[] = {MXOP_F32};
    mxop_shape_t sh[] = {{.ndim = 1, .dims = {8}}};
    uint64_t st = 0;

    /* The required attribute "start" is given (without it the library throws: tested below). */
    const char *attrs[] = {"start", "10", NULL};
    OK(mxop_state_create(client, op, attrs, 1, dt, sh, &st));
    int32_t c0, d0;
    read_states(&c0, &d0);
    cr_assert_eq(c0, 1);
    cr_assert_eq(d0, 0);

    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 51, &x);
    mxt_array(client, MXOP_F32, 1, s, 52, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .state = st};
    for (int n = 0; n < 3; n++) {
        OK(mxop_forward(client, op, &call, &x, 1, &y, 1));
        double want[8];
        for (int i = 0; i < 8; i++)
            want[i] = mxt_get(&x, (size_t)i) + 10 + n;
        mxt_assert_close(&y, want, 8, 1e-6, 1e-6);
    }
    /* Backward through the state: the gradient passes through. */
    mxop_array_t g, dx;
    mxt_array(client, MXOP_F32, 1, s, 53, &g);
    mxt_array(client, MXOP_F32, 1, s, 54, &dx);
    mxop_array_t bin[] = {g, x, y};
    OK(mxop_backward(client, op, &call, bin, 3, &dx, 1));
    double wg[8];
    for (int i = 0; i < 8; i++)
        wg[i] = mxt_get(&g, (size_t)i);
    mxt_assert_close(&dx, wg, 8, 0, 0);

    OK(mxop_state_destroy(client, st));
    read_states(&c0, &d0);
    cr_assert_eq(c0, 1);
    cr_assert_eq(d0, 1, "the library's destructor did not run");
    int rc = mxop_forward(client, op, &call, &x, 1, &y, 1);
    cr_assert_neq(rc, 0, "a destroyed state still ran");
}

Test(mxnet, mutated_input_is_written_in_place)
{
    int64_t s[] = {5};
    mxop_array_t x, counter, y;
    mxt_array(client, MXOP_F32, 1, s, 61, &x);
    mxt_array(client, MXOP_F32, 1, s, 62, &y);
    OK(mxop_array_alloc(client, MXOP_F32, 1, s, &counter));
    for (int i = 0; i < 5; i++)
        mxt_set(&counter, (size_t)i, i);
    mxop_array_t in[] = {x, counter};
    for (int n = 0; n < 2; n++)
        OK(mxop_forward(client, mxt_op(client, "my_mutate"), NULL, in, 2, &y, 1));
    double wy[5], wc[5];
    for (int i = 0; i < 5; i++) {
        wy[i] = 2 * mxt_get(&x, (size_t)i);
        wc[i] = i + 2;
    }
    mxt_assert_close(&y, wy, 5, 1e-6, 1e-6);
    mxt_assert_close(&counter, wc, 5, 0, 0);
}

/* The reference generator: MT19937 and splitmix64, as the worker seeds MXNet's states. */
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t mt_first(uint32_t seed)
{
    uint32_t mt[624];
    mt[0] = seed;
    for (int i = 1; i < 624; i++)
        mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    /* The first output needs words 0, 1 and 397 of the first twist. */
    uint32_t y = (mt[0] & 0x80000000u) | (mt[1] & 0x7fffffffu);
    uint32_t v = mt[397] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    v ^= v >> 11;
    v ^= (v << 7) & 0x9d2c5680u;
    v ^= (v << 15) & 0xefc60000u;
    v ^= v >> 18;
    return v;
}

Test(mxnet, cpu_random_states_are_mt19937_seeded_from_the_call)
{
    int64_t s[] = {2048};
    mxop_array_t x, y, y2;
    OK(mxop_array_alloc(client, MXOP_F64, 1, s, &x));
    mxt_array(client, MXOP_F64, 1, s, 71, &y);
    mxt_array(client, MXOP_F64, 1, s, 72, &y2);
    mxop_call_t call = {.struct_size = sizeof(call), .seed = 12345};
    OK(mxop_forward(client, mxt_op(client, "my_rand"), &call, &x, 1, &y, 1));
    for (int i = 0; i < 1024; i++) {
        double want = mt_first((uint32_t)splitmix64(12345u + (uint64_t)i)) / 4294967296.0;
        cr_assert_float_eq(mxt_get(&y, (size_t)i), want, 1e-12, "element %d", i);
    }
    /* Elements 1024.. take each state's second draw: in [0, 1), not the first again. */
    for (int i = 1024; i < 2048; i++) {
        double v = mxt_get(&y, (size_t)i);
        cr_assert(v >= 0 && v < 1);
    }
    OK(mxop_forward(client, mxt_op(client, "my_rand"), &call, &x, 1, &y2, 1));
    cr_assert_eq(memcmp(y.data, y2.data, 2048 * sizeof(double)), 0, "same seed, other numbers");
    call.seed = 54321;
    OK(mxop_forward(client, mxt_op(client, "my_rand"), &call, &x, 1, &y2, 1));
    cr_assert_neq(memcmp(y.data, y2.data, 2048 * sizeof(double)), 0, "another seed, same numbers");
}

static void expect_crash(const char *op, const char *signal)
{
    mxop_stats_t before, after;
    OK(mxop_stats(client, &before));
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 81, &x);
    mxt_array(client, MXOP_F32, 1, s, 82, &y);
    int rc = mxop_forward(client, mxt_op(client, op), NULL, &x, 1, &y, 1);
    expect_msg(rc, MXOP_EWORKER_CRASHED, op, signal);
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    OK(mxop_stats(client, &after));
    cr_assert_eq(after.worker_restarts, before.worker_restarts + 1);
    gemm_still_works();
}

Test(mxnet, cxx_exception_ends_only_the_worker)
{
    OK(mxop_load_library(client, "mx_throw.so"));
    expect_crash("throw_forward", "SIGABRT");
    expect_crash("throw_arity", "SIGABRT");
}

Test(mxnet, null_dereference_ends_only_the_worker)
{
    OK(mxop_load_library(client, "mx_throw.so"));
    expect_crash("null_write", "SIGSEGV");
}

Test(mxnet, stateful_create_without_required_attribute_ends_only_the_worker)
{
    /* MXNet's op calls attrs.at("start"): std::out_of_range escapes, as in MXNet. */
    int32_t dt[] = {MXOP_F32};
    mxop_shape_t sh[] = {{.ndim = 1, .dims = {4}}};
    uint64_t st = 0;
    int rc = mxop_state_create(client, mxt_op(client, "my_counter"), NULL, 1, dt, sh, &st);
    expect_msg(rc, MXOP_EWORKER_CRASHED, "my_counter", NULL);
    gemm_still_works();
}

Test(mxnet, other_lib_api_version_is_refused)
{
    int rc = mxop_load_library(client, "mx_v10.so");
    expect_msg(rc, MXOP_EABI, "lib_api version 10", "version 11 only");
    cr_assert_eq(mxop_op_find(client, "old_identity", &(const mxop_op_t *){NULL}),
                 MXOP_EUNKNOWN_OP);
    gemm_still_works();
}

Test(mxnet, partitioners_and_passes_are_refused)
{
    int rc = mxop_load_library(client, "mx_part.so");
    expect_msg(rc, MXOP_ENOT_SUPPORTED, "partitioner", "pass");
    gemm_still_works();
}

Test(mxnet, sparse_op_is_refused_dense_op_runs)
{
    OK(mxop_load_library(client, "mx_sparse.so"));
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 91, &x);
    mxt_array(client, MXOP_F32, 1, s, 92, &y);
    int rc = mxop_forward(client, mxt_op(client, "sparse_transpose"), NULL, &x, 1, &y, 1);
    expect_msg(rc, MXOP_ENOT_SUPPORTED, "CSR", "sparse storage is not supported");
    OK(mxop_forward(client, mxt_op(client, "dense_negate"), NULL, &x, 1, &y, 1));
    double want[4];
    for (int i = 0; i < 4; i++)
        want[i] = -mxt_get(&x, (size_t)i);
    mxt_assert_close(&y, want, 4, 0, 0);
}

/* ---- GPU ops (tests/plugins/mx_gpu.cu, built where the CUDA toolkit is) ---- */

static int plugin_built(const char *lib)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/tests/plugins/%s", mxt_build_dir(), lib);
    return stat(path, &st) == 0;
}

Test(mxnet, gpu_op_loads_and_refuses_host_tensors)
{
    if (!plugin_built("mx_gpu.so"))
        cr_skip_test("mx_gpu.so is not built (the build found no CUDA toolkit)");
    OK(mxop_load_library(client, "mx_gpu.so"));
    mxop_op_info_t info;
    OK(mxop_op_info(mxt_op(client, "gpu_scale"), &info));
    cr_assert(info.has_backward);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 101, &x);
    mxt_array(client, MXOP_F32, 1, s, 102, &y);
    int rc = mxop_forward(client, mxt_op(client, "gpu_scale"), NULL, &x, 1, &y, 1);
    expect_msg(rc, MXOP_ENOT_SUPPORTED, "gpu_scale", NULL);
    gemm_still_works();
}

/* This process's CUDA runtime, for the device test (dlopen: the file builds without CUDA). */
static struct {
    int (*GetDeviceCount)(int *);
    int (*Malloc)(void **, size_t);
    int (*Free)(void *);
    int (*Memcpy)(void *, const void *, size_t, int);
} cu;

static const char *no_gpu(void)
{
    static char why[256];
    const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *h = NULL;
    for (size_t i = 0; h == NULL && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return "the CUDA runtime cannot be loaded";
    const char *syms[] = {"cudaGetDeviceCount", "cudaMalloc", "cudaFree", "cudaMemcpy"};
    void **slots[] = {(void **)&cu.GetDeviceCount, (void **)&cu.Malloc, (void **)&cu.Free,
                      (void **)&cu.Memcpy};
    for (size_t i = 0; i < 4; i++) {
        void *f = dlsym(h, syms[i]);
        if (f == NULL)
            return "the CUDA runtime lacks an entry point";
        memcpy(slots[i], &f, sizeof(f));
    }
    int n = 0;
    int err = cu.GetDeviceCount(&n);
    if (err != 0 || n <= 0) {
        snprintf(why, sizeof(why), "cudaGetDeviceCount returned %d, %d devices", err, n);
        return why;
    }
    return NULL;
}

/* A device region of `bytes` at dev, viewed as an f32 vector of n. */
static mxop_array_t dev_array(void *dev, size_t n)
{
    uint32_t region = 0;
    uint64_t offset = 0;
    OK(mxop_region_register_cuda(client, dev, n * sizeof(float), &region, &offset));
    mxop_array_t a;
    int64_t s[] = {(int64_t)n};
    OK(mxop_array_view(client, region, offset, MXOP_F32, 1, s, &a));
    return a;
}

Test(mxnet, gpu_op_on_device_uses_allocator_and_stream)
{
    if (!plugin_built("mx_gpu.so"))
        cr_skip_test("mx_gpu.so is not built (the build found no CUDA toolkit)");
    const char *why = no_gpu();
    if (why != NULL) {
        /* Where there is no device, a device region is refused by name and the session goes on. */
        static float host[16];
        uint32_t region = 0;
        uint64_t offset = 0;
        int rc = mxop_region_register_cuda(client, host, sizeof(host), &region, &offset);
        cr_assert(rc == MXOP_ENO_DEVICE || rc == MXOP_EINVAL, "%s: %s", mxop_err_name(rc),
                  mxop_last_error(client));
        gemm_still_works();
        cr_skip_test("no CUDA device (%s): the device half of this test did not run", why);
    }
    OK(mxop_load_library(client, "mx_gpu.so"));
    enum { N = 4099 };
    float hx[N], got[N];
    for (int i = 0; i < N; i++)
        hx[i] = (float)(i % 97) - 48.0f;
    void *dx = NULL, *dy = NULL;
    cr_assert_eq(cu.Malloc(&dx, N * sizeof(float)), 0);
    cr_assert_eq(cu.Malloc(&dy, N * sizeof(float)), 0);
    cr_assert_eq(cu.Memcpy(dx, hx, sizeof(hx), 1), 0);
    mxop_array_t x = dev_array(dx, N), y = dev_array(dy, N);
    OK(mxop_forward(client, mxt_op(client, "gpu_scale"), NULL, &x, 1, &y, 1));
    cr_assert_eq(cu.Memcpy(got, dy, sizeof(got), 2), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(got[i], 2.0f * hx[i], "y[%d]", i);
    OK(mxop_region_release(client, x.region));
    OK(mxop_region_release(client, y.region));
    cu.Free(dx);
    cu.Free(dy);
    gemm_still_works();
}

Test(mxnet, initialize_refusal_carries_library_message)
{
    /* It refuses every version announced: each refusal is in the message. */
    int rc = mxop_load_library(client, "mx_nohost.so");
    expect_msg(rc, MXOP_ELIB_INIT, "runs on no MXNet, not even 10901",
               "runs on no MXNet, not even 20000");
    gemm_still_works();
}

/* The version mx_newhost's initialize() accepted, read through its op on client c. */
static int32_t newhost_version(mxop_client_t *c)
{
    int64_t s[] = {1};
    mxop_array_t o;
    int rc = mxop_array_alloc(c, MXOP_I32, 1, s, &o);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    rc = mxop_forward(c, mxt_op(c, "newhost_version"), NULL, NULL, 0, &o, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    int32_t v = ((int32_t *)o.data)[0];
    mxop_array_free(c, &o);
    return v;
}

Test(mxnet, library_wanting_mxnet_2_loads_as_on_master)
{
    /* Like master's example libraries: 1.9.1 is refused, 2.0 (same lib_api 11) accepted. */
    OK(mxop_load_library(client, "mx_newhost.so"));
    cr_assert_eq(newhost_version(client), 20000);
    gemm_still_works();
}

Test(mxnet, announced_version_is_configurable)
{
    /* The daemon's environment reaches its workers: a second daemon started with it. */
    mxt_daemon_t d2;
    setenv("MXOP_MXNET_VERSION", "20100", 1);
    mxt_daemon_start(&d2, NULL);
    mxop_client_t *c2 = mxt_connect(&d2);
    int rc = mxop_load_library(c2, "mx_newhost.so");
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c2));
    cr_assert_eq(newhost_version(c2), 20100);
    mxop_close(c2);
    mxt_daemon_stop(&d2);

    /* Pinned to 1.9.1, the library that wants 2.0 is refused, naming the setting. */
    setenv("MXOP_MXNET_VERSION", "10901", 1);
    mxt_daemon_start(&d2, NULL);
    c2 = mxt_connect(&d2);
    rc = mxop_load_library(c2, "mx_newhost.so");
    const char *msg = mxop_last_error(c2);
    cr_assert_eq(rc, MXOP_ELIB_INIT, "%s: %s", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "MXOP_MXNET_VERSION") != NULL, "%s", msg);
    cr_assert(strstr(msg, "20000") == NULL, "2.0 was announced anyway: %s", msg);
    mxop_close(c2);
    mxt_daemon_stop(&d2);
    unsetenv("MXOP_MXNET_VERSION");
}

Test(mxnet, library_without_ops_loads)
{
    /* MXNet's init_lib registers nothing and MXNet loads it. */
    OK(mxop_load_library(client, "mx_noops.so"));
    gemm_still_works();
}

Test(mxnet, sparse_refusal_keeps_library_message_and_mxop_explanation)
{
    OK(mxop_load_library(client, "mx_sparse.so"));
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 93, &x);
    mxt_array(client, MXOP_F32, 1, s, 94, &y);
    int rc = mxop_forward(client, mxt_op(client, "csr_only"), NULL, &x, 1, &y, 1);
    expect_msg(rc, MXOP_ENOT_SUPPORTED, "Expected storage type is kCSRStorage",
               "sparse storage (row_sparse or CSR), which mxop does not support");
    gemm_still_works();
}

Test(mxnet, subgraph_op_is_refused_by_name)
{
    int rc = mxop_load_library(client, "mx_subgraph.so");
    /* Refused inside registration: the loader reports it as an init failure. */
    expect_msg(rc, MXOP_ELIB_INIT, "_custom_subgraph_op", "subgraph ops are not supported");
    cr_assert_eq(mxop_op_find(client, "_custom_subgraph_op", &(const mxop_op_t *){NULL}),
                 MXOP_EUNKNOWN_OP);
    gemm_still_works();
}
