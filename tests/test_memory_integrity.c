/*
 * tests/test_memory_integrity.c - the engine's memory is the engine's
 * (docs/security.md, "The engine's memory").
 *
 * Under --sandbox strict a session that loads a library the operator did
 * not mark trusted runs in scratch mode: its worker holds every engine
 * region read-only only (a read-only descriptor, memfds sealed against new
 * writable mappings), outputs are written into the client's scratch region
 * and copied into place after a successful call.  The hostile fixture
 * tests/plugins/hostile_alias.c tries every other route to the caller's
 * input: a writable alias mapping, a read-write reopen of a descriptor,
 * /proc/self/map_files, and running past the end of its output into the
 * next tensor; hostile_mem.c tries mprotect.  Each test asserts the
 * engine's bytes bit-identical (compared with a copy), the call's outcome
 * named, the daemon alive, another session correct, no process left and
 * the daemon's descriptors back to their baseline.  A library named by
 * --trusted-library keeps the zero-copy path, and the tests show that too.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

static void setup_strict(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void setup_trusted(void)
{
    const char *args[] = {"--trusted-library", "hostile_alias.so", "--trusted-library", "relu.so",
                          NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(memint, .init = setup_strict, .fini = teardown, .timeout = 60);
TestSuite(memint_trusted, .init = setup_trusted, .fini = teardown, .timeout = 60);

/* ------------------------------------------------------------------------ */
/* What must hold after every attack. */

static mxt_baseline_t take_baseline(void)
{
    /* A first session, closed, so that the daemon's lazily made state is there. */
    const char *libs[] = {"relu.so", NULL};
    mxop_close(mxt_connect_with(&daemon_, libs));
    return mxt_baseline_take(&daemon_);
}

static void expect_back_to(const mxt_baseline_t *b)
{
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    mxt_baseline_expect(b);
}

/* Another session, untouched by the attack (harness.c). */
static void other_session_correct(void)
{
    mxt_other_session_correct(&daemon_);
}

static uint32_t confined(mxop_client_t *c)
{
    mxop_stats_v2_t st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    cr_assert_eq(mxop_stats_v2(c, &st), 0);
    return st.confined;
}

/* ------------------------------------------------------------------------ */
/* Scratch mode (strict, untrusted library) */

/* The four routes of alias_write, as the fixture numbers them. */
static const char *const routes[] = {
    "a writable mapping of the same memory", "a read-write reopen of its descriptor",
    "/proc/self/map_files", "a read-write reopen of any descriptor"};

static void alias_routes_refused(mxop_client_t *c, mxop_array_t *x, mxop_array_t *y)
{
    size_t n = x->nbytes;
    unsigned char *saved = malloc(n);
    cr_assert(saved != NULL);
    memcpy(saved, x->data, n);
    for (size_t i = 0; i < 4; i++)
        mxt_set(y, i, 5.0);
    int rc = mxop_forward(c, mxt_op(c, "alias_write"), NULL, x, 1, y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    /* The op's own output came back (through scratch), and names no route that worked. */
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(mxt_get(y, i), 0.0, "the op changed its input through %s", routes[i]);
    cr_assert_eq(memcmp(saved, x->data, n), 0, "the caller's input changed");
    free(saved);
}

/*
 * The arena's memfds, as this process holds them: sealed against new
 * writable mappings, so that a descriptor reopened read-write (the route
 * of a worker that caught one) cannot map or write them.  Returns how
 * many were checked.
 */
static int arena_memfds_sealed(void)
{
    int n = 0;
    for (int fd = 3; fd < 1024; fd++) {
        char path[64], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (strstr(target, "memfd:mxop-arena") == NULL)
            continue;
        int seals = fcntl(fd, F_GET_SEALS);
        cr_assert(seals >= 0 && (seals & F_SEAL_FUTURE_WRITE) && (seals & F_SEAL_SHRINK),
                  "arena memfd %d: seals %#x", fd, seals);
        int rw = open(path, O_RDWR | O_CLOEXEC);
        cr_assert(rw >= 0, "%s", strerror(errno));
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
        cr_assert(p == MAP_FAILED, "a read-write reopen of the arena maps writable");
        cr_assert_eq(write(rw, "x", 1), -1, "a read-write reopen of the arena is writable");
        close(rw);
        n++;
    }
    return n;
}

Test(memint, input_changed_through_an_alias_refused)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(confined(c), 1, "an untrusted library under strict: scratch mode");
    int64_t s[] = {1024};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    alias_routes_refused(c, &x, &y);
    cr_assert(arena_memfds_sealed() >= 1, "no arena memfd found");
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(memint, region_registered_before_the_untrusted_load_is_made_read_only)
{
    mxt_baseline_t base = take_baseline();
    mxop_client_t *c = mxt_connect(&daemon_);
    cr_assert_eq(confined(c), 0, "no library yet: zero-copy");
    /* A user region and arena arrays, registered while the worker still maps them writable. */
    uint32_t region;
    void *basep;
    cr_assert_eq(mxop_region_create(c, 1 << 16, &region, &basep), 0, "%s", mxop_last_error(c));
    int64_t s[] = {1024};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_view(c, region, 0, MXOP_F32, 1, s, &x), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_view(c, region, 8192, MXOP_F32, 1, s, &y), 0, "%s", mxop_last_error(c));
    for (size_t i = 0; i < 1024; i++)
        mxt_set(&x, i, (double)i - 500.0);
    cr_assert_eq(mxop_load_library(c, "hostile_alias.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(confined(c), 1);
    alias_routes_refused(c, &x, &y);
    cr_assert_eq(mxop_region_release(c, region), 0);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(memint, replacement_worker_gets_the_regions_read_only)
{
    mxt_baseline_t base = take_baseline();
    mxop_client_t *c = mxt_connect(&daemon_);
    uint32_t region;
    void *basep;
    cr_assert_eq(mxop_region_create(c, 1 << 16, &region, &basep), 0, "%s", mxop_last_error(c));
    int64_t s[] = {1024};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_view(c, region, 0, MXOP_F32, 1, s, &x), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_view(c, region, 8192, MXOP_F32, 1, s, &y), 0, "%s", mxop_last_error(c));
    for (size_t i = 0; i < 1024; i++)
        mxt_set(&x, i, (double)i + 0.5);
    cr_assert_eq(mxop_load_library(c, "hostile_alias.so"), 0, "%s", mxop_last_error(c));
    mxt_sleep_ms(1500); /* the warm spare has started and been given the session */
    /* The worker dies; the spare (or a new worker) serves: it too holds the regions read-only. */
    pid_t w = mxt_worker_pid(c);
    cr_assert_eq(kill(w, SIGKILL), 0);
    double t0 = (double)time(NULL);
    while (mxt_worker_pid(c) == w && (double)time(NULL) - t0 < 10)
        mxt_sleep_ms(50);
    cr_assert_neq(mxt_worker_pid(c), w, "the killed worker was not replaced");
    alias_routes_refused(c, &x, &y);
    cr_assert_eq(mxop_region_release(c, region), 0);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(memint, mprotect_of_the_read_only_view_refused)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_mem.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    static unsigned char saved[1024 * 4];
    memcpy(saved, x.data, x.nbytes);
    int rc = mxop_forward(c, mxt_op(c, "mprotect_write"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EINPUT_WRITTEN, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(memcmp(saved, x.data, x.nbytes), 0, "the caller's input changed");
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

/*
 * The output and then the input, allocated one after the other in one
 * region: running past the output's end would reach the input.
 */
static void adjacent(mxop_client_t *c, mxop_array_t *y, mxop_array_t *x)
{
    int64_t s[] = {256};
    mxt_array(c, MXOP_F32, 1, s, 6, y);
    mxt_array(c, MXOP_F32, 1, s, 5, x);
    cr_assert_eq(x->region, y->region, "the arena put them in different regions");
    cr_assert(x->offset >= y->offset + y->nbytes && x->offset < y->offset + y->nbytes + 4096,
              "the input does not follow the output (offsets %llu, %llu)",
              (unsigned long long)y->offset, (unsigned long long)x->offset);
}

Test(memint, overrun_of_an_output_lands_in_scratch)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    mxop_array_t x, y;
    adjacent(c, &y, &x);
    /* Everything from the output's end to the input's end, as the engine has it. */
    uint8_t *from = (uint8_t *)y.data + y.nbytes;
    size_t span = (size_t)(x.offset + x.nbytes - (y.offset + y.nbytes));
    unsigned char *saved = malloc(span);
    cr_assert(saved != NULL);
    memcpy(saved, from, span);
    int rc = mxop_forward(c, mxt_op(c, "overrun"), NULL, &x, 1, &y, 1);
    /* The guarantee: the call succeeds, its output is what the op wrote, nothing else changed. */
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < 256; i++)
        cr_assert_eq(mxt_get(&y, i), 7.0, "output element %zu", i);
    cr_assert_eq(memcmp(saved, from, span), 0, "bytes past the output's end changed");
    free(saved);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(memint, outputs_go_through_scratch_and_keep_their_semantics)
{
    const char *libs[] = {"hostile_alias.so", "relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {300};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    /* The op sees its output in the client's scratch region. */
    cr_assert_eq(mxop_forward(c, mxt_op(c, "out_where"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(mxt_get(&y, 0), 1.0, "the output is not in the scratch region (%g)",
                 mxt_get(&y, 0));
    /* req add: scratch is filled with the destination's values first. */
    const mxop_op_t *relu = mxt_op(c, "relu");
    for (size_t i = 0; i < 300; i++)
        mxt_set(&y, i, 1.5);
    y.req = MXOP_REQ_ADD;
    cr_assert_eq(mxop_forward(c, relu, NULL, &x, 1, &y, 1), 0, "%s", mxop_last_error(c));
    for (size_t i = 0; i < 300; i++) {
        double v = mxt_get(&x, i);
        cr_assert_eq(mxt_get(&y, i), (float)(1.5 + (v > 0 ? v : 0)), "add: element %zu", i);
    }
    /* req null: the destination is left alone. */
    y.req = MXOP_REQ_NULL;
    for (size_t i = 0; i < 300; i++)
        mxt_set(&y, i, -2.0);
    cr_assert_eq(mxop_forward(c, relu, NULL, &x, 1, &y, 1), 0, "%s", mxop_last_error(c));
    for (size_t i = 0; i < 300; i++)
        cr_assert_eq(mxt_get(&y, i), -2.0, "null: element %zu", i);
    /* A zero-size output. */
    int64_t z[] = {0};
    mxop_array_t x0, y0;
    mxt_array(c, MXOP_F32, 1, z, 1, &x0);
    mxt_array(c, MXOP_F32, 1, z, 2, &y0);
    cr_assert_eq(mxop_forward(c, relu, NULL, &x0, 1, &y0, 1), 0, "%s", mxop_last_error(c));
    mxop_stats_v2_t st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    cr_assert_eq(mxop_stats_v2(c, &st), 0);
    cr_assert_eq(st.confined, 1);
    cr_assert(st.scratch_bytes >= 3 * 300 * sizeof(float), "scratch bytes %llu",
              (unsigned long long)st.scratch_bytes);
    mxop_close(c);
}

Test(memint, memfd_that_takes_no_seals_loses_its_write_bits)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    /* A memfd made without MFD_ALLOW_SEALING (as some engines share memory) cannot be sealed. */
    int fd = memfd_create("no-sealing", MFD_CLOEXEC);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, 1 << 16), 0);
    uint32_t region;
    void *basep = NULL;
    int rc = mxop_region_register_fd(c, fd, 1 << 16, &region, &basep);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_mode & 0222, 0, "the memfd is still writable by mode (%o)",
                 (unsigned)st.st_mode);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_view(c, region, 0, MXOP_F32, 1, s, &x), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_array_view(c, region, 8192, MXOP_F32, 1, s, &y), 0, "%s", mxop_last_error(c));
    for (size_t i = 0; i < 1024; i++)
        mxt_set(&x, i, (double)i * 0.25);
    alias_routes_refused(c, &x, &y);
    cr_assert_eq(mxop_region_release(c, region), 0);
    close(fd);
    mxop_close(c);
    other_session_correct();
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* Trusted libraries keep the zero-copy path */

Test(memint_trusted, trusted_library_writes_in_place)
{
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(confined(c), 0, "a trusted library: zero-copy");
    mxop_array_t x, y;
    adjacent(c, &y, &x);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "out_where"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(mxt_get(&y, 0), 2.0, "the op does not see its output in the engine's arena (%g)",
                 mxt_get(&y, 0));
    /* Zero-copy means no protection: the same overrun reaches the next tensor. */
    cr_assert_eq(mxop_forward(c, mxt_op(c, "overrun"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(mxt_get(&x, 0), 7.0, "a trusted op's overrun did not reach the engine's memory");
    /* And the worker holds a writable mapping of the engine's memory (what alias_write finds). */
    unsigned char before[16];
    memcpy(before, x.data, sizeof(before));
    cr_assert_eq(mxop_forward(c, mxt_op(c, "alias_write"), NULL, &x, 1, &y, 1), 0);
    cr_assert_eq(mxt_get(&y, 0), 1.0, "zero-copy, yet no writable mapping of the input found");
    cr_assert_neq(memcmp(before, x.data, sizeof(before)), 0);
    mxop_close(c);
}

Test(memint_trusted, untrusted_library_switches_the_session_for_good)
{
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    cr_assert_eq(confined(c), 0);
    /* hostile_mem.so is not trusted: from now on the worker holds the regions read-only. */
    cr_assert_eq(mxop_load_library(c, "hostile_mem.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(confined(c), 1);
    alias_routes_refused(c, &x, &y);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "out_where"), NULL, &x, 1, &y, 1), 0);
    cr_assert_eq(mxt_get(&y, 0), 1.0, "the output is not in the scratch region");
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* The transport's descriptors: fcntl and shutdown (strict) */

Test(memint, fcntl_and_shutdown_of_the_channels_refused)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_fcntl.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    int rc = mxop_forward(c, mxt_op(c, "fcntl_transport"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    static const char *const what[] = {"F_SETFL of fd 3",  "F_SETFD of fd 3",  "F_SETOWN of fd 3",
                                       "F_SETSIG of fd 3", "F_SETFL of fd 4",  "F_SETFD of fd 4",
                                       "F_SETOWN of fd 4", "F_SETSIG of fd 4", "shutdown of fd 3"};
    for (size_t i = 0; i < 9; i++)
        cr_assert_eq(mxt_get(&y, i), -(double)EPERM, "%s: %g, not EPERM", what[i], mxt_get(&y, i));
    /* The channels work as before: more calls, and a library load over the supervisor channel. */
    cr_assert_eq(mxop_forward(c, mxt_op(c, "fcntl_transport"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.worker_restarts, 0, "the worker was replaced");
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* The engine's own read-only mark (mxop_region_set_read_only) */

Test(memint, region_marked_read_only_is_refused_as_output_and_mutated_input)
{
    const char *libs[] = {"relu.so", "opkit_inplace.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    uint32_t region;
    void *basep;
    cr_assert_eq(mxop_region_create(c, 1 << 16, &region, &basep), 0, "%s", mxop_last_error(c));
    int64_t s[] = {64};
    mxop_array_t w, y;
    cr_assert_eq(mxop_array_view(c, region, 0, MXOP_F32, 1, s, &w), 0, "%s", mxop_last_error(c));
    mxt_array(c, MXOP_F32, 1, s, 3, &y);
    for (size_t i = 0; i < 64; i++)
        mxt_set(&w, i, (double)i - 30.0);
    cr_assert_eq(mxop_region_set_read_only(c, region, 1), 0);
    cr_assert_eq(mxop_region_set_read_only(c, 999999, 1), MXOP_EUNKNOWN_REGION);
    const mxop_op_t *relu = mxt_op(c, "relu");
    /* As an input it is fine; as an output it is refused, naming the argument. */
    cr_assert_eq(mxop_forward(c, relu, NULL, &w, 1, &y, 1), 0, "%s", mxop_last_error(c));
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(c, &before), 0);
    int rc = mxop_forward(c, relu, NULL, &y, 1, &w, 1);
    cr_assert_eq(rc, MXOP_EREAD_ONLY, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "out[0]") != NULL, "%s", mxop_last_error(c));
    /* As an input the op declares mutated: refused too. */
    mxop_array_t wd;
    cr_assert_eq(mxop_array_view(c, region, 4096, MXOP_F64, 1, s, &wd), 0, "%s",
                 mxop_last_error(c));
    mxop_array_t yd;
    mxt_array(c, MXOP_F64, 1, s, 4, &yd);
    rc = mxop_forward(c, mxt_op(c, "double_inplace"), NULL, &wd, 1, &yd, 1);
    cr_assert_eq(rc, MXOP_EREAD_ONLY, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "in[0]") != NULL, "%s", mxop_last_error(c));
    for (size_t i = 0; i < 64; i++)
        cr_assert_eq(mxt_get(&w, i), (double)i - 30.0, "the read-only region changed at %zu", i);
    cr_assert_eq(mxop_stats(c, &after), 0);
    cr_assert_eq(after.worker_restarts, before.worker_restarts);
    /* Cleared, it is an output like any other. */
    cr_assert_eq(mxop_region_set_read_only(c, region, 0), 0);
    cr_assert_eq(mxop_forward(c, relu, NULL, &y, 1, &w, 1), 0, "%s", mxop_last_error(c));
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* CPU burnt between calls: the next call is told why its worker was replaced */

static int pid_gone(void *arg)
{
    return kill(*(pid_t *)arg, 0) != 0;
}

Test(memint, idle_cpu_kill_reason_given_to_the_next_call)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_spin.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "spin_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    /* No request of this client in between: the call itself finds the worker gone. */
    cr_assert(mxt_wait_until(pid_gone, &w, 20000), "the spinning worker was not killed");
    mxt_sleep_ms(200);
    rc = mxop_forward(c, mxt_op(c, "spin_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "with no call in flight") != NULL, "%s",
              mxop_last_error(c));
    /* Told once: the next call runs on the new worker. */
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}
