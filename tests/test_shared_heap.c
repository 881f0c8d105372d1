/*
 * tests/test_shared_heap.c - the shared heap (client/shared_heap.c): memory
 * for a framework's allocator in mxop shared memory, passed to calls by
 * reference, and what a worker can reach through it (docs/security.md,
 * "The shared heap").
 *
 * Each Criterion test runs in a process of its own, so each starts with an
 * empty heap.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

/* relu trusted: the zero-copy path, so that a copy would show in staged_bytes. */
static void setup_trusted(void)
{
    const char *args[] = {"--trusted-library", "relu.so", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(shheap, .timeout = 30);
TestSuite(shheap_call, .init = setup_trusted, .fini = teardown, .timeout = 60);

static mxop_shared_stats_t heap_stats(void)
{
    mxop_shared_stats_t st;
    memset(&st, 0xff, sizeof st);
    mxop_shared_stats(&st);
    return st;
}

static mxop_stats_t client_stats(mxop_client_t *c)
{
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0, "%s", mxop_last_error(c));
    return st;
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

static void relu_ok(mxop_client_t *c, void *x, void *y, int64_t n)
{
    mxop_array_t in = heap_f32(x, n), out = heap_f32(y, n);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &in, 1, &out, 1);
    cr_assert_eq(rc, 0, "relu: %s: %s", mxop_err_name(rc), mxop_last_error(c));
}

/* ------------------------------------------------------------------------ */
/* The allocator itself */

Test(shheap, alloc_free_reuse_contains)
{
    size_t n = 100000;
    uint8_t *p = mxop_shared_alloc(n);
    cr_assert_not_null(p, "mxop_shared_alloc: %s", strerror(errno));
    cr_assert_eq((uintptr_t)p % 4096, 0, "a block starts on a page");
    memset(p, 0xab, n);
    cr_assert_eq(mxop_shared_contains(p, n), 1);
    cr_assert_eq(mxop_shared_contains(p + 10, n - 10), 1);
    cr_assert_eq(mxop_shared_contains(p, 1u << 30), 0, "past the block's end");
    int local;
    cr_assert_eq(mxop_shared_contains(&local, sizeof local), 0);
    mxop_shared_stats_t st = heap_stats();
    cr_assert_eq(st.blocks_live, 1);
    cr_assert_geq(st.bytes_live, n);
    cr_assert_eq(st.blocks_cached, 0);

    cr_assert_eq(mxop_shared_free(p), 0);
    cr_assert_eq(mxop_shared_contains(p, 1), 0, "a freed block is no live block");
    st = heap_stats();
    cr_assert_eq(st.blocks_live, 0);
    cr_assert_eq(st.blocks_cached, 1, "a block never passed to a session is cached clean");

    /* The same size class takes the cached block. */
    uint8_t *q = mxop_shared_alloc(n - 1000);
    cr_assert_eq(q, p, "the clean block is reused");
    st = heap_stats();
    cr_assert_eq(st.blocks_live, 1);
    cr_assert_eq(st.blocks_cached, 0);
    cr_assert_eq(mxop_shared_free(q), 0);
    cr_assert_eq(mxop_shared_free(NULL), 0);
}

Test(shheap, min_bytes_default)
{
    cr_assert_eq(mxop_shared_min_bytes(), (size_t)64 << 10);
}

Test(shheap, zero_bytes_is_einval)
{
    errno = 0;
    cr_assert_null(mxop_shared_alloc(0));
    cr_assert_eq(errno, EINVAL);
}

Test(shheap, bad_pointer_free_is_einval)
{
    uint8_t *p = mxop_shared_alloc(200000);
    cr_assert_not_null(p);
    int local;
    cr_assert_eq(mxop_shared_free(&local), MXOP_EINVAL, "not a block");
    cr_assert_eq(mxop_shared_free(p + 64), MXOP_EINVAL, "inside a block, not its start");
    cr_assert_eq(heap_stats().blocks_live, 1, "nothing was freed");
    cr_assert_eq(mxop_shared_free(p), 0);
    cr_assert_eq(mxop_shared_free(p), MXOP_EINVAL, "a block freed already");
}

Test(shheap, cache_is_capped)
{
    /* 1 MiB of cache: the fourth freed 512 KiB block pushes the oldest out. */
    setenv("MXOP_ALLOCATOR_CACHE_MB", "1", 1);
    void *p[4];
    for (int i = 0; i < 4; i++)
        cr_assert_not_null(p[i] = mxop_shared_alloc(512 << 10));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(mxop_shared_free(p[i]), 0);
    mxop_shared_stats_t st = heap_stats();
    cr_assert_leq(st.bytes_cached, (uint64_t)1 << 20);
    cr_assert_eq(st.blocks_cached, 2);
}

/* ------------------------------------------------------------------------ */
/* Calls */

Test(shheap_call, relu_by_reference_matches_staged_with_one_registration)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 16; /* 256 KiB of f32 */
    float *x = mxop_shared_alloc(n * sizeof(float));
    float *y = mxop_shared_alloc(n * sizeof(float));
    float *hx = malloc(n * sizeof(float)), *hy = malloc(n * sizeof(float));
    cr_assert(x != NULL && y != NULL && hx != NULL && hy != NULL);

    mxop_stats_t before = client_stats(c);
    uint64_t regions_after_first = 0;
    for (int k = 0; k < 20; k++) {
        fill(x, n, (unsigned)k);
        memcpy(hx, x, n * sizeof(float));
        memset(y, 0x55, n * sizeof(float));
        relu_ok(c, x, y, (int64_t)n);
        uint64_t staged = client_stats(c).staged_bytes;
        relu_ok(c, hx, hy, (int64_t)n); /* ordinary heap memory: staged */
        cr_assert_gt(client_stats(c).staged_bytes, staged, "a malloc'd array is staged");
        cr_assert_eq(memcmp(x, hx, n * sizeof(float)), 0, "the input is unchanged");
        cr_assert_eq(memcmp(y, hy, n * sizeof(float)), 0,
                     "call %d: the output by reference differs from the staged one", k);
        if (k == 0)
            regions_after_first = client_stats(c).regions;
    }
    mxop_stats_t after = client_stats(c);
    /* Only the 20 staged calls copied: each in and out once. */
    cr_assert_eq(after.staged_bytes - before.staged_bytes, 20 * 2 * n * sizeof(float),
                 "the shared-heap calls copied nothing");
    cr_assert_eq(heap_stats().registrations, 2, "one registration per block for 20 calls");
    cr_assert_eq(after.regions, regions_after_first, "no region was added after the first call");

    mxop_close(c);
    cr_assert_eq(mxop_shared_free(x), 0);
    cr_assert_eq(mxop_shared_free(y), 0);
    free(hx);
    free(hy);
}
