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
#include <pthread.h>
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

/* Strict, relu and hostile_scan untrusted: the session runs in scratch mode. */
static void setup_strict(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    mxt_daemon_start(&daemon_, args);
}

TestSuite(shheap, .timeout = 30);
TestSuite(shheap_strict, .init = setup_strict, .fini = teardown, .timeout = 60);
TestSuite(shheap_basic, .init = setup_basic, .fini = teardown, .timeout = 60);
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

/* Allocations and frees from several threads at once: every block its own, every free taken. */
static void *alloc_free_loop(void *arg)
{
    uintptr_t who = (uintptr_t)arg;
    for (int round = 0; round < 200; round++) {
        uint8_t *p[8];
        for (int i = 0; i < 8; i++) {
            size_t n = (size_t)(i + 1) * 70000;
            p[i] = mxop_shared_alloc(n);
            if (p[i] == NULL)
                return (void *)"mxop_shared_alloc gave NULL";
            memset(p[i], (int)(who * 8 + (uintptr_t)i), n);
        }
        for (int i = 0; i < 8; i++) {
            size_t n = (size_t)(i + 1) * 70000;
            if (p[i][0] != (uint8_t)(who * 8 + (uintptr_t)i) ||
                p[i][n - 1] != (uint8_t)(who * 8 + (uintptr_t)i))
                return (void *)"a block was written by another thread";
            if (!mxop_shared_contains(p[i], n) || mxop_shared_free(p[i]) != 0)
                return (void *)"a live block was not found";
        }
    }
    return NULL;
}

Test(shheap, threads_alloc_and_free_at_once)
{
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, alloc_free_loop, (void *)i), 0);
    for (int i = 0; i < 4; i++) {
        void *why;
        pthread_join(th[i], &why);
        cr_assert_null(why, "thread %d: %s", i, (const char *)why);
    }
    mxop_shared_stats_t st = heap_stats();
    cr_assert_eq(st.blocks_live, 0);
    cr_assert_eq(st.bytes_live, 0);
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

Test(shheap_call, output_reuses_a_warm_block_of_its_session_only)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    mxop_client_t *b = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 16, bytes = n * sizeof(float);
    float *x = mxop_shared_alloc(bytes);
    float *y = mxop_shared_alloc_output(a, bytes);
    cr_assert(x != NULL && y != NULL);
    fill(x, n, 1);
    relu_ok(a, x, y, (int64_t)n);
    cr_assert_eq(heap_stats().registrations, 2);
    cr_assert_eq(mxop_shared_free(y), 0);

    /* Another session's output, or any other allocation, does not get it. */
    void *other = mxop_shared_alloc_output(b, bytes);
    void *plain = mxop_shared_alloc(bytes);
    cr_assert(other != NULL && plain != NULL);
    cr_assert_neq(other, y, "a block registered with session a went to session b");
    cr_assert_neq(plain, y, "a block registered with a session went to mxop_shared_alloc");
    cr_assert_eq(heap_stats().reused_warm, 0);

    float *y2 = mxop_shared_alloc_output(a, bytes);
    cr_assert_eq(y2, y, "session a's output takes its warm block");
    cr_assert_eq(heap_stats().reused_warm, 1);
    fill(x, n, 2);
    relu_ok(a, x, y2, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(y2[i], x[i] > 0 ? x[i] : 0.0f, "element %zu", i);
    cr_assert_eq(heap_stats().registrations, 2, "the warm block needed no registration");

    mxop_close(a);
    mxop_close(b);
    cr_assert_eq(mxop_shared_free(y2), 0);
    cr_assert_eq(mxop_shared_free(x), 0);
    cr_assert_eq(mxop_shared_free(other), 0);
    cr_assert_eq(mxop_shared_free(plain), 0);
    /* x and y2 were seen by a session: never cached clean; other and plain were not. */
    cr_assert_eq(heap_stats().blocks_cached, 2);
}

Test(shheap_call, exposed_block_is_revoked_at_each_sessions_next_call)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    mxop_client_t *b = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 15, bytes = n * sizeof(float);
    float *x = mxop_shared_alloc(bytes);
    float *ya = malloc(bytes), *yb = malloc(bytes);
    cr_assert(x != NULL && ya != NULL && yb != NULL);
    fill(x, n, 3);
    relu_ok(a, x, ya, (int64_t)n);
    relu_ok(b, x, yb, (int64_t)n);
    uint64_t regions_a = client_stats(a).regions, regions_b = client_stats(b).regions;
    cr_assert_eq(heap_stats().registrations, 2, "one block, two sessions");

    cr_assert_eq(mxop_shared_free(x), 0);
    void *fresh = mxop_shared_alloc(bytes);
    cr_assert_neq(fresh, x, "a block two sessions saw was handed out again");
    cr_assert_eq(heap_stats().revocations, 0, "nothing is released inside mxop_shared_free");

    /* Each session's next call releases its region of the block. */
    float *hx = malloc(bytes);
    fill(hx, n, 4);
    relu_ok(a, hx, ya, (int64_t)n);
    cr_assert_eq(heap_stats().revocations, 1);
    cr_assert_eq(client_stats(a).regions, regions_a - 1, "session a released the block");
    relu_ok(b, hx, yb, (int64_t)n);
    cr_assert_eq(heap_stats().revocations, 2);
    cr_assert_eq(client_stats(b).regions, regions_b - 1, "session b released the block");

    mxop_close(a);
    mxop_close(b);
    cr_assert_eq(mxop_shared_free(fresh), 0);
    free(hx);
    free(ya);
    free(yb);
}

Test(shheap_call, warm_blocks_beyond_the_cap_are_revoked)
{
    setenv("MXOP_ALLOCATOR_CACHE_MB", "1", 1);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t n = (512 << 10) / sizeof(float);
    float *x[3];
    float *h = malloc(n * sizeof(float));
    cr_assert_not_null(h);
    fill(h, n, 5);
    for (int i = 0; i < 3; i++) {
        cr_assert_not_null(x[i] = mxop_shared_alloc(n * sizeof(float)));
        fill(x[i], n, (unsigned)i);
        relu_ok(c, x[i], h, (int64_t)n);
    }
    uint64_t regions = client_stats(c).regions;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mxop_shared_free(x[i]), 0);
    mxop_shared_stats_t st = heap_stats();
    cr_assert_leq(st.bytes_cached, (uint64_t)1 << 20, "the cache keeps under its cap");
    cr_assert_eq(st.blocks_cached, 2);
    /* The block pushed out is released at the session's next output allocation. */
    void *o = mxop_shared_alloc_output(c, 4096);
    cr_assert_not_null(o);
    cr_assert_eq(heap_stats().revocations, 1);
    cr_assert_eq(client_stats(c).regions, regions - 1);
    cr_assert_eq(mxop_shared_free(o), 0);

    /* Closing the session forgets the rest: its warm blocks are unmapped. */
    mxop_close(c);
    cr_assert_eq(heap_stats().blocks_cached, 1, "only the clean block o stays cached");
    free(h);
}

/* ------------------------------------------------------------------------ */
/* What a worker can reach (docs/security.md, "The shared heap") */

#define SECRET_LEN 32
#define BLOCK (1u << 20)

/* hostile_scan's count of `secret` in everything its worker can read, given `in`. */
static float scan_count(mxop_client_t *c, void *in, const char *hex)
{
    float *out = mxop_shared_alloc_output(c, BLOCK);
    cr_assert_not_null(out);
    out[0] = -2.0f;
    const char *attrs[] = {"secret", hex, NULL};
    mxop_call_t call = {.struct_size = sizeof call, .attrs = attrs};
    mxop_array_t ia = heap_f32(in, BLOCK / sizeof(float)),
                 oa = heap_f32(out, BLOCK / sizeof(float));
    int rc = mxop_forward(c, mxt_op(c, "scan"), &call, &ia, 1, &oa, 1);
    cr_assert_eq(rc, 0, "scan: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    float n = out[0];
    cr_assert_geq(n, 0.0f, "the fixture could not list its mappings (%g)", (double)n);
    cr_assert_eq(mxop_shared_free(out), 0);
    return n;
}

/* Writes the secret at a few places of a block (page starts and an odd offset). */
static void plant(uint8_t *block, const uint8_t *secret)
{
    memcpy(block, secret, SECRET_LEN);
    memcpy(block + 3 * 4096 + 8, secret, SECRET_LEN);
    memcpy(block + BLOCK - 4096, secret, SECRET_LEN);
}

/*
 * A secret in a block never passed to the session, and in a block that
 * was reused after the session saw it, is out of the worker's reach; the
 * same scan finds a secret the session was given, and finds the reused one
 * where the rule broken would have put it.
 */
static void secrets_out_of_reach(void)
{
    const char *libs[] = {"relu.so", "hostile_scan.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    uint8_t secret[SECRET_LEN];
    char hex[2 * SECRET_LEN + 1];
    srand((unsigned)getpid());
    for (int i = 0; i < SECRET_LEN; i++) {
        secret[i] = (uint8_t)(rand() ^ (i * 37 + 11));
        snprintf(hex + 2 * i, 3, "%02x", secret[i]);
    }

    /* Never passed to the session. */
    uint8_t *hidden = mxop_shared_alloc(BLOCK);
    cr_assert_not_null(hidden);
    memset(hidden, 0, BLOCK);
    plant(hidden, secret);

    /* Passed to the session, freed, and the next allocation of its size holds the secret. */
    uint8_t *seen = mxop_shared_alloc(BLOCK);
    float *h = malloc(BLOCK);
    cr_assert(seen != NULL && h != NULL);
    memset(seen, 0, BLOCK);
    relu_ok(c, seen, h, BLOCK / sizeof(float));
    cr_assert_eq(mxop_shared_free(seen), 0);
    uint8_t *reused = mxop_shared_alloc(BLOCK);
    cr_assert_not_null(reused);
    memset(reused, 0, BLOCK);
    plant(reused, secret);

    /* The scan is given an unrelated tensor. */
    uint8_t *decoy = mxop_shared_alloc(BLOCK);
    cr_assert_not_null(decoy);
    memset(decoy, 0, BLOCK);
    cr_assert_eq(scan_count(c, decoy, hex), 0.0f,
                 "the worker found the secret in a block its session was never given");

    /* The scan does find what its worker can read: the freed block, had it been reused... */
    plant(seen, secret); /* still mapped: warm for the session's outputs */
    cr_assert_geq(scan_count(c, decoy, hex), 1.0f, "the scan misses a block its session saw");
    memset(seen, 0, SECRET_LEN); /* (a test's write into freed memory, to prove the point) */
    memset(seen + 3 * 4096 + 8, 0, SECRET_LEN);
    memset(seen + BLOCK - 4096, 0, SECRET_LEN);
    /* ...and a block it is given. */
    cr_assert_geq(scan_count(c, hidden, hex), 1.0f, "the scan misses its own input");

    mxop_close(c);
    cr_assert_eq(mxop_shared_free(hidden), 0);
    cr_assert_eq(mxop_shared_free(reused), 0);
    cr_assert_eq(mxop_shared_free(decoy), 0);
    free(h);
}

Test(shheap_strict, secrets_out_of_reach_strict)
{
    secrets_out_of_reach();
}

Test(shheap_basic, secrets_out_of_reach_basic)
{
    secrets_out_of_reach();
}

/* Scratch mode (an untrusted library under strict): by reference still, and correct. */
Test(shheap_strict, relu_in_scratch_mode_is_correct)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 16;
    float *x = mxop_shared_alloc(n * sizeof(float));
    float *y = mxop_shared_alloc_output(c, n * sizeof(float));
    cr_assert(x != NULL && y != NULL);
    for (int k = 0; k < 3; k++) {
        fill(x, n, (unsigned)k);
        memset(y, 0x55, n * sizeof(float));
        relu_ok(c, x, y, (int64_t)n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(y[i], x[i] > 0 ? x[i] : 0.0f, "call %d, element %zu", k, i);
    }
    cr_assert_eq(heap_stats().registrations, 2);
    mxop_close(c);
    cr_assert_eq(mxop_shared_free(x), 0);
    cr_assert_eq(mxop_shared_free(y), 0);
}

/* ------------------------------------------------------------------------ */
/* Fork and resource exhaustion */

/*
 * A child's stores into a block made before the fork stay in the child,
 * and its own allocations work.  The block was passed to a session in
 * scratch mode first, so its memfd is sealed against writable shared
 * mappings: the child's private copy is made all the same.
 */
Test(shheap_strict, fork_child_writes_stay_in_the_child)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 16, bytes = n * sizeof(float);
    float *x = mxop_shared_alloc(bytes);
    float *y = malloc(bytes);
    cr_assert(x != NULL && y != NULL);
    fill(x, n, 9);
    relu_ok(c, x, y, (int64_t)n);
    float *copy = malloc(bytes);
    memcpy(copy, x, bytes);

    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        memset(x, 0x22, bytes);
        if (((uint8_t *)x)[bytes - 1] != 0x22)
            _exit(2);
        uint8_t *q = mxop_shared_alloc(bytes);
        if (q == NULL)
            _exit(3);
        memset(q, 0x33, bytes);
        if (mxop_shared_contains(q, bytes) != 1 || mxop_shared_free(q) != 0)
            _exit(4);
        if (mxop_shared_free(x) != 0)
            _exit(5);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)",
              status);
    cr_assert_eq(memcmp(x, copy, bytes), 0, "the child's stores reached the parent's block");
    relu_ok(c, x, y, (int64_t)n); /* and the parent's block still goes by reference */
    cr_assert_eq(heap_stats().registrations, 1);
    mxop_close(c);
    cr_assert_eq(mxop_shared_free(x), 0);
    free(y);
    free(copy);
}

/* Out of descriptors: NULL with errno, never a crash, and the caller falls back to malloc. */
Test(shheap, fd_exhaustion_gives_null)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {.rlim_cur = 64, .rlim_max = 64};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        static void *blocks[128];
        int n = 0;
        for (; n < 128; n++) {
            errno = 0;
            blocks[n] = mxop_shared_alloc(128 << 10);
            if (blocks[n] == NULL)
                break;
        }
        if (n == 0 || n == 128)
            _exit(3); /* no block at all, or no limit reached */
        if (errno != EMFILE)
            _exit(4);
        void *fallback = malloc(128 << 10);
        if (fallback == NULL)
            _exit(5);
        free(fallback);
        for (int i = 0; i < n; i++)
            if (mxop_shared_free(blocks[i]) != 0)
                _exit(6);
        /* Freed blocks are cached (their descriptors kept): a new allocation takes one. */
        void *again = mxop_shared_alloc(128 << 10);
        if (again == NULL || mxop_shared_free(again) != 0)
            _exit(7);
        /* A size with no cached block: the cache is dropped to make room. */
        void *other = mxop_shared_alloc(1 << 20);
        if (other == NULL || mxop_shared_free(other) != 0)
            _exit(8);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)",
              status);
}

/* The daemon restarted: the blocks' regions are registered again with the new one. */
Test(shheap_call, blocks_survive_a_reconnection)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 14;
    float *x = mxop_shared_alloc(n * sizeof(float));
    float *y = mxop_shared_alloc_output(c, n * sizeof(float));
    cr_assert(x != NULL && y != NULL);
    fill(x, n, 7);
    relu_ok(c, x, y, (int64_t)n);

    mxt_daemon_kill(&daemon_, SIGKILL);
    const char *args[] = {"--trusted-library", "relu.so", NULL};
    mxt_daemon_restart(&daemon_, args);
    fill(x, n, 8);
    memset(y, 0x55, n * sizeof(float));
    relu_ok(c, x, y, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(y[i], x[i] > 0 ? x[i] : 0.0f, "element %zu", i);
    cr_assert_eq(heap_stats().registrations, 2, "the heap made no new registration");
    cr_assert_eq(client_stats(c).staged_bytes, 0, "nothing was staged");

    mxop_close(c);
    cr_assert_eq(mxop_shared_free(x), 0);
    cr_assert_eq(mxop_shared_free(y), 0);
}

static void setup_few_regions(void)
{
    /* Criterion runs the suite's .init before this one: its daemon goes first (else its
     * directory stays behind when the test process exits). */
    mxt_daemon_stop(&daemon_);
    const char *args[] = {"--trusted-library", "relu.so", "--session-max-regions", "6", NULL};
    mxt_daemon_start(&daemon_, args);
}

/* More blocks than the session may hold regions: the warm ones make room, then arrays are staged.
 */
Test(shheap_call, more_blocks_than_the_session_may_register_are_staged, .init = setup_few_regions)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    size_t n = 1 << 14, bytes = n * sizeof(float);
    float *x[12];
    for (int i = 0; i < 12; i++) {
        cr_assert_not_null(x[i] = mxop_shared_alloc(bytes));
        fill(x[i], n, (unsigned)i);
    }
    /* A warm block: freed, still registered. */
    float *w = mxop_shared_alloc_output(c, bytes);
    cr_assert_not_null(w);
    relu_ok(c, x[0], w, (int64_t)n);
    cr_assert_eq(mxop_shared_free(w), 0);
    uint64_t revoked = heap_stats().revocations;

    for (int i = 0; i < 12; i++) {
        float *y = malloc(bytes);
        cr_assert_not_null(y);
        relu_ok(c, x[i], y, (int64_t)n);
        for (size_t k = 0; k < n; k++)
            cr_assert_eq(y[k], x[i][k] > 0 ? x[i][k] : 0.0f, "block %d, element %zu", i, k);
        free(y);
    }
    cr_assert_gt(heap_stats().revocations, revoked, "the warm block was released to make room");
    cr_assert_lt(heap_stats().registrations, 13, "not every block became a region");
    mxop_close(c);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(mxop_shared_free(x[i]), 0);
}

/* A client with a pool: calls on a sibling session register the blocks with the sibling. */
typedef struct pool_caller {
    mxop_client_t *c;
    float *x, *y;
    size_t n;
    int calls;
    const char *why;
} pool_caller_t;

static void *pool_calls(void *arg)
{
    pool_caller_t *p = arg;
    const mxop_op_t *op;
    if (mxop_op_find(p->c, "relu", &op) != 0) {
        p->why = "relu not found";
        return NULL;
    }
    for (int k = 0; k < p->calls && p->why == NULL; k++) {
        mxop_array_t in = heap_f32(p->x, (int64_t)p->n), out = heap_f32(p->y, (int64_t)p->n);
        if (mxop_forward(p->c, op, NULL, &in, 1, &out, 1) != 0)
            p->why = mxop_last_error(p->c);
        for (size_t i = 0; i < p->n && p->why == NULL; i++)
            if (p->y[i] != (p->x[i] > 0 ? p->x[i] : 0.0f))
                p->why = "wrong result";
    }
    return NULL;
}

Test(shheap_call, pool_siblings_pass_blocks_by_reference)
{
    mxop_connect_opts_t o = {.struct_size = sizeof o, .max_sessions = 2};
    mxop_client_t *c;
    cr_assert_eq(mxop_connect(daemon_.sock, &o, &c), 0, "%s", mxop_connect_error());
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    pool_caller_t p[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        p[t] = (pool_caller_t){.c = c, .n = 1 << 15, .calls = 200};
        p[t].x = mxop_shared_alloc(p[t].n * sizeof(float));
        p[t].y = mxop_shared_alloc_output(c, p[t].n * sizeof(float));
        cr_assert(p[t].x != NULL && p[t].y != NULL);
        fill(p[t].x, p[t].n, (unsigned)t);
    }
    for (int t = 0; t < 2; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, pool_calls, &p[t]), 0);
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        cr_assert_null(p[t].why, "thread %d: %s", t, p[t].why);
    }
    cr_assert_leq(heap_stats().registrations, 8, "at most once per block and session");
    mxop_close(c);
    for (int t = 0; t < 2; t++) {
        cr_assert_eq(mxop_shared_free(p[t].x), 0);
        cr_assert_eq(mxop_shared_free(p[t].y), 0);
    }
    mxop_shared_stats_t st = heap_stats();
    cr_assert_eq(st.blocks_live, 0);
    cr_assert_eq(st.blocks_cached, 0, "blocks sessions saw are not cached once they are closed");
}

/*
 * A block a scratch-mode session saw is sealed against writable mappings
 * for good; a zero-copy session's worker cannot map it writable then, so
 * its calls read it in place and stage it as an output.
 */
Test(shheap_call, block_sealed_by_a_scratch_mode_session_is_staged_elsewhere)
{
    const char *libs_a[] = {"relu.so", "hostile_scan.so", NULL}; /* untrusted: scratch mode */
    const char *libs_b[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs_a);
    mxop_client_t *b = mxt_connect_with(&daemon_, libs_b);
    size_t n = 1 << 14, bytes = n * sizeof(float);
    float *x = mxop_shared_alloc(bytes);
    float *y = malloc(bytes);
    cr_assert(x != NULL && y != NULL);
    fill(x, n, 11);
    relu_ok(a, x, y, (int64_t)n);
    for (int k = 0; k < 3; k++) {
        memset(y, 0x55, bytes);
        relu_ok(b, x, y, (int64_t)n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(y[i], x[i] > 0 ? x[i] : 0.0f, "call %d, element %zu", k, i);
    }
    /* Written by a zero-copy session after a scratch-mode one had it: staged. */
    float *o = mxop_shared_alloc(bytes);
    cr_assert_not_null(o);
    relu_ok(a, y, o, (int64_t)n);
    uint64_t staged = client_stats(b).staged_bytes;
    memset(o, 0x55, bytes);
    relu_ok(b, y, o, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(o[i], y[i] > 0 ? y[i] : 0.0f, "element %zu", i);
    cr_assert_geq(client_stats(b).staged_bytes - staged, bytes, "the sealed output was staged");
    cr_assert_eq(mxop_shared_free(o), 0);
    mxop_close(a);
    mxop_close(b);
    cr_assert_eq(mxop_shared_free(x), 0);
    free(y);
}
