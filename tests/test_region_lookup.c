/*
 * tests/test_region_lookup.c - libmxop finds the region of a heap array's
 * pointer (client/region_lookup.c), names dtypes and errors for the
 * bindings (client/dtype.c, common/errors.c) and chooses where outputs are
 * allocated (client/outputs.c), so that bindings keep no tables of their own.
 *
 * A heap array (region MXOP_REGION_HEAP) is what a binding passes: a
 * pointer, a dtype and a shape.  When its bytes lie in memory the client
 * maps itself it goes by reference (staged_bytes stays where it was, the
 * output is written in place); anywhere else it is staged.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

/* relu trusted: the zero-copy path, so that any copy would show in staged_bytes. */
static void setup_trusted(void)
{
    const char *args[] = {"--trusted-library", "relu.so", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(lookup, .init = setup_trusted, .fini = teardown, .timeout = 60);
TestSuite(lookup_names, .timeout = 10);
TestSuite(lookup_outputs, .init = setup_trusted, .fini = teardown, .timeout = 60);
TestSuite(lookup_pool, .init = setup_trusted, .fini = teardown, .timeout = 60);

#define N 4096 /* f32 per array: 16 KiB */

static uint64_t staged(mxop_client_t *c)
{
    mxop_stats_v2_t st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    cr_assert_eq(mxop_stats_v2(c, &st), 0, "%s", mxop_last_error(c));
    return st.staged_bytes;
}

/* A heap array (region 0) of n f32 at p, as a binding passes a framework's tensor. */
static mxop_array_t heap_f32(void *p, int64_t n)
{
    mxop_array_t a;
    memset(&a, 0, sizeof a);
    a.data = p;
    a.dtype = MXOP_F32;
    a.ndim = 1;
    a.shape[0] = n;
    a.region = MXOP_REGION_HEAP;
    a.nbytes = (size_t)n * sizeof(float);
    return a;
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)((i * 2654435761u + seed) % 2001u) - 1000) / 7.0f;
}

/* relu (`relu`) of x into y (both heap arrays of N f32), checked at y. */
static void relu_op_checked(mxop_client_t *c, const mxop_op_t *relu, float *x, float *y,
                            unsigned seed)
{
    fill(x, N, seed);
    memset(y, 0x55, N * sizeof(float));
    mxop_array_t in = heap_f32(x, N), out = heap_f32(y, N);
    int rc = mxop_forward(c, relu, NULL, &in, 1, &out, 1);
    cr_assert_eq(rc, 0, "relu: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(y[i], x[i] > 0 ? x[i] : 0.0f, "y[%zu] is %g for x %g", i, (double)y[i],
                     (double)x[i]);
}

static void relu_checked(mxop_client_t *c, float *x, float *y, unsigned seed)
{
    relu_op_checked(c, mxt_op(c, "relu"), x, y, seed);
}

/* relu_checked, and whether the call copied nothing (1) or staged (0). */
static int relu_by_reference(mxop_client_t *c, float *x, float *y, unsigned seed)
{
    uint64_t before = staged(c);
    relu_checked(c, x, y, seed);
    return staged(c) == before;
}

/* A memfd of `bytes` mapped shared here at *base; returns the fd. */
static int memfd_mapped(size_t bytes, void **base)
{
    int fd = memfd_create("test-lookup", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)bytes), 0);
    *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(*base, MAP_FAILED);
    return fd;
}

/* ------------------------------------------------------------------------ */
/* Heap arrays in the client's own memory go by reference */

Test(lookup, heap_array_in_an_arena_block_goes_by_reference)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t shape[] = {N};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &x), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &y), 0, "%s", mxop_last_error(c));
    cr_assert(relu_by_reference(c, x.data, y.data, 1), "arena memory passed as region 0 is staged");
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
}

Test(lookup, heap_array_in_a_created_region_goes_by_reference)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 20, &region, &base), 0, "%s", mxop_last_error(c));
    float *x = (float *)((uint8_t *)base + 4096), *y = x + N + 16;
    cr_assert(relu_by_reference(c, x, y, 2), "a region's memory passed as region 0 is staged");
    mxop_close(c);
}

Test(lookup, heap_array_in_a_registered_fd_with_base_goes_by_reference)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    void *mine;
    int fd = memfd_mapped(1 << 20, &mine);
    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_register_fd(c, fd, 1 << 20, &region, &base), 0, "%s",
                 mxop_last_error(c));
    float *x = base, *y = x + N;
    cr_assert(relu_by_reference(c, x, y, 3), "the mapping register_fd made is staged");
    /* The caller's own mapping of the same fd is not one libmxop knows: staged. */
    cr_assert_not(relu_by_reference(c, mine, (float *)mine + N, 4));
    mxop_close(c);
    munmap(mine, 1 << 20);
    close(fd);
}

Test(lookup, heap_array_in_a_region_registered_at_its_base_goes_by_reference)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t bytes = 1 << 20;
    void *base;
    int fd = memfd_mapped(bytes, &base);
    uint32_t region;
    cr_assert_eq(mxop_region_register_fd_at(c, fd, bytes, base, &region), 0, "%s",
                 mxop_last_error(c));
    float *x = (float *)((uint8_t *)base + 256), *y = x + 2 * N;
    cr_assert(relu_by_reference(c, x, y, 5), "memory registered at its base is staged");
    cr_assert_eq(mxop_region_release(c, region), 0, "%s", mxop_last_error(c));
    /* libmxop did not unmap the caller's mapping. */
    memset(base, 1, bytes);
    mxop_close(c);
    munmap(base, bytes);
    close(fd);
}

Test(lookup, register_fd_at_refuses_bad_arguments_and_overlaps)
{
    mxop_client_t *c = mxt_connect(&daemon_);
    size_t bytes = 1 << 16;
    void *base;
    int fd = memfd_mapped(bytes, &base);
    uint32_t region = 7, r2;
    int rc = mxop_region_register_fd_at(c, fd, bytes, NULL, &region);
    cr_assert_eq(rc, MXOP_EINVAL, "%s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(c), "base") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_region_register_fd_at(c, fd, bytes, base, NULL), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_fd_at(c, fd, 2 * bytes, base, &region), MXOP_EINVAL,
                 "an fd smaller than bytes");
    cr_assert_eq(mxop_region_register_fd_at(NULL, fd, bytes, base, &region), MXOP_EINVAL);
    cr_assert_eq(mxop_region_register_fd_at(c, fd, bytes, base, &region), 0, "%s",
                 mxop_last_error(c));
    rc = mxop_region_register_fd_at(c, fd, bytes / 2, (uint8_t *)base + bytes / 2, &r2);
    cr_assert_eq(rc, MXOP_EINVAL, "an overlapping range: %s", mxop_err_name(rc));
    cr_assert(strstr(mxop_last_error(c), "overlaps") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_region_release(c, region), 0);
    /* Released, the range may be registered again. */
    cr_assert_eq(mxop_region_register_fd_at(c, fd, bytes, base, &region), 0, "%s",
                 mxop_last_error(c));
    mxop_close(c);
    munmap(base, bytes);
    close(fd);
}

Test(lookup, span_running_past_a_regions_end_is_staged)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    /* The fd is mapped twice as far as the region reaches, so that staging reads real memory. */
    size_t bytes = 1 << 16;
    void *base;
    int fd = memfd_mapped(2 * bytes, &base);
    uint32_t region;
    cr_assert_eq(mxop_region_register_fd_at(c, fd, bytes, base, &region), 0, "%s",
                 mxop_last_error(c));
    float *x = (float *)((uint8_t *)base + bytes - 1024);  /* 1 KiB in, 15 KiB past */
    float *y = (float *)((uint8_t *)base + bytes + 16384); /* past x's end */
    cr_assert_not(relu_by_reference(c, x, y, 6), "a span past the region's end went by reference");
    /* The output alone inside, the input across the end: the input staged, the output in place. */
    uint64_t before = staged(c);
    relu_checked(c, x, base, 7);
    cr_assert_eq(staged(c) - before, N * sizeof(float), "only the input was staged");
    mxop_close(c);
    munmap(base, 2 * bytes);
    close(fd);
}

Test(lookup, released_region_is_no_longer_resolved)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t bytes = 1 << 16;
    void *base;
    int fd = memfd_mapped(bytes, &base);
    uint32_t region, r;
    uint64_t off;
    cr_assert_eq(mxop_region_register_fd_at(c, fd, bytes, base, &region), 0, "%s",
                 mxop_last_error(c));
    float *x = base, *y = x + N;
    cr_assert(relu_by_reference(c, x, y, 8));
    cr_assert_eq(mxop_region_lookup(c, x, 16, &r, &off), 1);
    cr_assert_eq(mxop_region_release(c, region), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_region_lookup(c, x, 16, &r, &off), 0, "a released region is still found");
    cr_assert_not(relu_by_reference(c, x, y, 9), "memory of a released region is not staged");
    mxop_close(c);
    munmap(base, bytes);
    close(fd);
}

Test(lookup, read_only_region_reached_by_lookup_refuses_an_output)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 20, &region, &base), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_region_set_read_only(c, region, 1), 0);
    float *w = base;
    fill(w, N, 10);
    float *y = malloc(N * sizeof(float)), *keep = malloc(N * sizeof(float));
    cr_assert(y != NULL && keep != NULL);
    memcpy(keep, w, N * sizeof(float));
    const mxop_op_t *relu = mxt_op(c, "relu");
    mxop_array_t in = heap_f32(w, N), out = heap_f32(y, N);
    /* As an input, fine. */
    cr_assert_eq(mxop_forward(c, relu, NULL, &in, 1, &out, 1), 0, "%s", mxop_last_error(c));
    /* As an output, refused by name. */
    in = heap_f32(y, N);
    out = heap_f32(w, N);
    int rc = mxop_forward(c, relu, NULL, &in, 1, &out, 1);
    cr_assert_eq(rc, MXOP_EREAD_ONLY, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "out[0]") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(memcmp(w, keep, N * sizeof(float)), 0, "the read-only region changed");
    free(y);
    free(keep);
    mxop_close(c);
}

/* A heap array walked by strides is looked up by the bytes its strides reach. */
Test(lookup, strided_heap_array_in_a_region_goes_by_reference)
{
    const char *libs[] = {"opkit_strided.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 20, &region, &base), 0, "%s", mxop_last_error(c));
    /* Column 1 of a 64 x 4 f64 matrix, and y after it. */
    double *m = base, *y = m + 256;
    for (int i = 0; i < 256; i++)
        m[i] = i - 100.5;
    mxop_array_t in, out;
    memset(&in, 0, sizeof in);
    in.data = m + 1;
    in.dtype = MXOP_F64;
    in.ndim = 1;
    in.shape[0] = 64;
    out = in;
    out.data = y;
    int64_t st[] = {4};
    const int64_t *in_st[] = {st};
    mxop_call_t call;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call;
    call.in_strides = in_st;
    uint64_t before = staged(c);
    int rc = mxop_forward(c, mxt_op(c, "strided_scale"), &call, &in, 1, &out, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(staged(c), before, "a strided array in a region was gathered");
    for (int i = 0; i < 64; i++)
        cr_assert_eq(y[i], 2 * m[i * 4 + 1], "y[%d]", i);

    /* Walked backwards from its last row, to an op that takes contiguous arrays: gathered. */
    in.data = m + 63 * 4 + 1;
    st[0] = -4;
    rc = mxop_forward(c, mxt_op(c, "dense_scale"), &call, &in, 1, &out, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (int i = 0; i < 64; i++)
        cr_assert_eq(y[i], 2 * m[(63 - i) * 4 + 1], "y[%d]", i);
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* mxop_region_lookup */

Test(lookup, region_lookup_answers)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    uint32_t region, r = 0;
    uint64_t off = 0;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 16, &region, &base), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_region_lookup(c, (uint8_t *)base + 100, 200, &r, &off), 1);
    cr_assert_eq(r, region);
    cr_assert_eq(off, 100);
    cr_assert_eq(mxop_region_lookup(c, base, 1 << 16, NULL, NULL), 1, "the whole region");
    cr_assert_eq(mxop_region_lookup(c, (uint8_t *)base + 100, 1 << 16, &r, &off), 0,
                 "past the end");
    cr_assert_eq(mxop_region_lookup(c, (uint8_t *)base + (1 << 16), 0, &r, &off), 0,
                 "the byte after the end");
    int local;
    cr_assert_eq(mxop_region_lookup(c, &local, sizeof local, &r, &off), 0);
    cr_assert_eq(mxop_region_lookup(NULL, base, 1, &r, &off), MXOP_EINVAL);
    cr_assert_eq(mxop_region_lookup(c, NULL, 1, &r, &off), MXOP_EINVAL);
    cr_assert_eq(mxop_region_lookup(c, (void *)(UINTPTR_MAX - 4), 16, &r, &off), MXOP_EINVAL);

    /* An arena array. */
    int64_t shape[] = {16};
    mxop_array_t a;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &a), 0);
    cr_assert_eq(mxop_region_lookup(c, a.data, a.nbytes, &r, &off), 1);
    cr_assert_eq(r, a.region);
    cr_assert_eq(off, a.offset);

    /* A region registered without a mapping here has no address. */
    void *mine;
    int fd = memfd_mapped(1 << 16, &mine);
    cr_assert_eq(mxop_region_register_fd(c, fd, 1 << 16, &r, NULL), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_region_lookup(c, mine, 16, &r, &off), 0);

    /* A shared-heap block counts once a call registered it with c, and until it is freed. */
    size_t n = 1 << 16;
    float *x = mxop_shared_alloc(n * sizeof(float)), *y = mxop_shared_alloc(n * sizeof(float));
    cr_assert(x != NULL && y != NULL);
    cr_assert_eq(mxop_region_lookup(c, x, 16, &r, &off), 0, "a block no call passed");
    mxop_array_t in = heap_f32(x, (int64_t)n), out = heap_f32(y, (int64_t)n);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &in, 1, &out, 1), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(mxop_region_lookup(c, (uint8_t *)x + 64, 16, &r, &off), 1);
    cr_assert_eq(off, 64);
    cr_assert_eq(mxop_shared_free(x), 0);
    cr_assert_eq(mxop_region_lookup(c, x, 16, &r, &off), 0, "a freed block");
    mxop_close(c);
    cr_assert_eq(mxop_shared_free(y), 0);
    munmap(mine, 1 << 16);
    close(fd);
}

/* ------------------------------------------------------------------------ */
/* Names of dtypes and errors */

Test(lookup_names, dtype_names_and_sizes_for_every_code)
{
    static const struct {
        const char *s, *fw;
        size_t size;
    } want[MXOP_DTYPE_COUNT] = {
        {"f32", "float32", 4},   {"f64", "float64", 8}, {"f16", "float16", 2},
        {"bf16", "bfloat16", 2}, {"i32", "int32", 4},   {"i64", "int64", 8},
        {"u8", "uint8", 1},      {"i8", "int8", 1},     {"bool", "bool", 1},
    };
    for (int32_t code = 0; code < MXOP_DTYPE_COUNT; code++) {
        const char *s = NULL, *fw = NULL;
        size_t size = 0;
        cr_assert_eq(mxop_dtype_info(code, &s, &fw, &size), 0, "code %d", code);
        cr_assert_str_eq(s, want[code].s);
        cr_assert_str_eq(fw, want[code].fw);
        cr_assert_eq(size, want[code].size);
        cr_assert_eq(size, mxop_dtype_size(code));
        cr_assert_eq(mxop_dtype_from_name(s), code, "%s", s);
        cr_assert_eq(mxop_dtype_from_name(fw), code, "%s", fw);
        cr_assert_eq(mxop_dtype_info(code, NULL, NULL, NULL), 0, "NULL out-pointers");
    }
}

Test(lookup_names, junk_dtypes_are_refused)
{
    const char *s = "kept";
    size_t size = 99;
    cr_assert_eq(mxop_dtype_info(-1, &s, NULL, &size), MXOP_EINVAL);
    cr_assert_eq(mxop_dtype_info(MXOP_DTYPE_COUNT, &s, NULL, &size), MXOP_EINVAL);
    cr_assert_str_eq(s, "kept", "an unknown code writes nothing");
    cr_assert_eq(size, 99);
    const char *junk[] = {"", "float", "F32", "torch.float32", "float32 ", "complex64", "f32x"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        cr_assert_eq(mxop_dtype_from_name(junk[i]), MXOP_EINVAL, "'%s'", junk[i]);
    cr_assert_eq(mxop_dtype_from_name(NULL), MXOP_EINVAL);
}

Test(lookup_names, error_codes_by_name)
{
    cr_assert_eq(mxop_err_code("INVAL"), MXOP_EINVAL);
    cr_assert_eq(mxop_err_code("MXOP_EINVAL"), -1001);
    cr_assert_eq(mxop_err_code("MXOP_ENOT_SUPPORTED"), -1023);
    cr_assert_eq(mxop_err_code("READ_ONLY"), MXOP_EREAD_ONLY);
    cr_assert_eq(mxop_err_code("NOPE"), 0);
    cr_assert_eq(mxop_err_code("MXOP_E"), 0);
    cr_assert_eq(mxop_err_code(""), 0);
    cr_assert_eq(mxop_err_code(NULL), 0);
    /* Every code round-trips through its name. */
    for (int code = -1001; code >= -1040; code--)
        if (strcmp(mxop_err_name(code), "MXOP_E?") != 0)
            cr_assert_eq(mxop_err_code(mxop_err_name(code)), code, "%s", mxop_err_name(code));
}

/* ------------------------------------------------------------------------ */
/* mxop_shared_outputs */

static mxop_shared_stats_t heap_stats(void)
{
    mxop_shared_stats_t st;
    memset(&st, 0, sizeof st);
    mxop_shared_stats(&st);
    return st;
}

Test(lookup_outputs, outputs_come_from_the_shared_heap_while_on)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t big[] = {1 << 16}; /* 256 KiB: above the minimum */
    int64_t small[] = {16};
    mxop_shared_stats_v2_t st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    cr_assert_eq(mxop_shared_stats_v2(&st), 0);
    uint64_t made = st.outputs;
    cr_assert_eq(mxop_shared_outputs(1), 0, "off by default");
    mxop_array_t x, y, s;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, big, &x), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, big, &y), 0, "%s", mxop_last_error(c));
    cr_assert_eq(x.region, MXOP_REGION_HEAP, "a large array in the shared heap");
    cr_assert_eq(x.nbytes, (size_t)big[0] * 4);
    cr_assert_eq(x.ndim, 1);
    cr_assert_eq(x.shape[0], big[0]);
    cr_assert_eq(mxop_shared_contains(x.data, x.nbytes), 1);
    cr_assert_eq(heap_stats().blocks_live, 2);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, small, &s), 0);
    cr_assert_neq(s.region, MXOP_REGION_HEAP, "a small one in the arena");
    cr_assert_eq(mxop_shared_stats_v2(&st), 0);
    cr_assert_eq(st.outputs, made + 2, "two arrays from the heap counted");
    cr_assert_eq(st.blocks_live, 2);

    /* A call with them: by reference, written in place. */
    fill(x.data, (size_t)big[0], 12);
    uint64_t before = staged(c);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(staged(c), before, "shared-heap outputs were staged");
    const float *xv = x.data, *yv = y.data;
    for (int64_t i = 0; i < big[0]; i++)
        cr_assert_eq(yv[i], xv[i] > 0 ? xv[i] : 0.0f, "y[%lld]", (long long)i);

    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_array_free(c, &s);
    cr_assert_null(x.data, "freed arrays are zeroed");
    cr_assert_eq(heap_stats().blocks_live, 0, "both blocks freed");

    /* A freed output's warm block serves the next output of its session. */
    uint64_t warm = heap_stats().reused_warm;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, big, &y), 0);
    cr_assert_eq(y.region, MXOP_REGION_HEAP);
    cr_assert_gt(heap_stats().reused_warm, warm, "not a warm block");
    mxop_array_free(c, &y);

    /* Off again: the arena. */
    cr_assert_eq(mxop_shared_outputs(0), 1, "the previous setting");
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, big, &x), 0);
    cr_assert_neq(x.region, MXOP_REGION_HEAP, "outputs off: the arena");
    cr_assert_eq(mxop_shared_contains(x.data, 1), 0);
    mxop_array_free(c, &x);
    mxop_close(c);
}

Test(lookup_names, shared_stats_v2_writes_only_what_the_caller_has)
{
    mxop_shared_stats_v2_t st;
    memset(&st, 0xab, sizeof st);
    st.struct_size = offsetof(mxop_shared_stats_v2_t, blocks_live);
    cr_assert_eq(mxop_shared_stats_v2(&st), MXOP_EINVAL, "no member fits");
    st.struct_size = offsetof(mxop_shared_stats_v2_t, outputs);
    cr_assert_eq(mxop_shared_stats_v2(&st), 0);
    cr_assert_eq(st.blocks_live, 0);
    cr_assert_eq(st.reused_warm, 0);
    cr_assert_eq(st.outputs, 0xababababababababull, "a member past struct_size was written");
    cr_assert_eq(mxop_shared_stats_v2(NULL), MXOP_EINVAL);
}

Test(lookup_outputs, shared_heap_output_frees_after_its_client_closed)
{
    mxop_client_t *c = mxt_connect(&daemon_);
    int64_t big[] = {1 << 16};
    mxop_shared_outputs(1);
    mxop_array_t a;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, big, &a), 0, "%s", mxop_last_error(c));
    cr_assert_eq(a.region, MXOP_REGION_HEAP);
    mxop_close(c);
    cr_assert_eq(heap_stats().blocks_live, 1);
    mxop_array_free(NULL, &a);
    cr_assert_eq(heap_stats().blocks_live, 0, "the block was not freed without its client");
    cr_assert_null(a.data);
    mxop_shared_outputs(0);
}

/* ------------------------------------------------------------------------ */
/* A pool's sibling session takes a heap array by its region too */

/* A call of crash.so's 'sleep' on c, in a thread of its own, holding c while it runs. */
typedef struct slow {
    mxop_client_t *c;
    const mxop_op_t *op;
    mxop_array_t x, y;
    atomic_int started, done;
    int rc;
} slow_t;

static void *slow_main(void *p)
{
    slow_t *s = p;
    const char *attrs[] = {"ms", "3000", NULL};
    mxop_call_t call;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call;
    call.attrs = attrs;
    atomic_store(&s->started, 1);
    s->rc = mxop_forward(s->c, s->op, &call, &s->x, 1, &s->y, 1);
    atomic_store(&s->done, 1);
    return NULL;
}

/* Starts a 'sleep' call of 3 s on s->c in thread *t; returns once it holds the client. */
static void slow_start(slow_t *s, pthread_t *t)
{
    atomic_store(&s->started, 0);
    atomic_store(&s->done, 0);
    cr_assert_eq(pthread_create(t, NULL, slow_main, s), 0);
    while (!atomic_load(&s->started))
        mxt_sleep_ms(1);
    mxt_sleep_ms(300); /* well inside its call by now */
}

static void slow_finish(slow_t *s, pthread_t t)
{
    pthread_join(t, NULL);
    cr_assert_eq(s->rc, 0, "the sleeping call: %s: %s", mxop_err_name(s->rc),
                 mxop_last_error(s->c));
}

Test(lookup_pool, read_only_region_is_refused_as_an_output_while_a_sibling_could_run_the_call)
{
    mxop_connect_opts_t o = {.struct_size = sizeof o, .max_sessions = 2};
    mxop_client_t *c;
    cr_assert_eq(mxop_connect(daemon_.sock, &o, &c), 0, "%s", mxop_connect_error());
    cr_assert_eq(mxop_load_library(c, "crash.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    /* Found now: mxop_op_find waits for the client, busy below. */
    const mxop_op_t *relu = mxt_op(c, "relu");
    slow_t s;
    memset(&s, 0, sizeof s);
    s.c = c;
    s.op = mxt_op(c, "sleep");
    int64_t shape[] = {64}, n[] = {N};
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &s.x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, shape, &s.y), 0);

    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 20, &region, &base), 0, "%s", mxop_last_error(c));
    float *w = base;
    fill(w, N, 20);
    float *keep = malloc(N * sizeof(float));
    cr_assert_not_null(keep);
    memcpy(keep, w, N * sizeof(float));
    cr_assert_eq(mxop_region_set_read_only(c, region, 1), 0);
    mxop_array_t ax, ay, view;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, n, &ax), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 1, n, &ay), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_view(c, region, 0, MXOP_F32, 1, n, &view), 0);
    float *x = ax.data, *y = ay.data;
    mxop_array_t in = heap_f32(x, N), out = heap_f32(w, N);

    pthread_t t;
    slow_start(&s, &t);
    /* While the client is busy: heap arrays in its arena run (on a sibling), correct. */
    relu_op_checked(c, relu, x, y, 21);
    cr_assert_eq(atomic_load(&s.done), 0, "the sleeping call was over: no sibling ran relu");
    /* An output in the read-only region, as a heap array: refused, not written through a
     * sibling (the call waits for the client, which names it). */
    int rc = mxop_forward(c, relu, NULL, &in, 1, &out, 1);
    cr_assert_eq(rc, MXOP_EREAD_ONLY, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(memcmp(w, keep, N * sizeof(float)), 0, "the read-only region changed");
    slow_finish(&s, t);

    /* Named by its region, the same. */
    slow_start(&s, &t);
    rc = mxop_forward(c, relu, NULL, &in, 1, &view, 1);
    cr_assert_eq(rc, MXOP_EREAD_ONLY, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(memcmp(w, keep, N * sizeof(float)), 0, "the read-only region changed");
    slow_finish(&s, t);
    free(keep);
    mxop_close(c);
}
