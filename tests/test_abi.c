/*
 * tests/test_abi.c - the plugin ABI's compatibility rules (include/mxop/op.h):
 * a library built against the previous, smaller structs loads and runs
 * correctly; a library of a newer ABI that declared it runs in this one
 * loads and gets tensors at its own stride; one that needs a newer worker
 * is refused with a message naming both versions, before its code runs.
 * Every call runs on both data paths (shared memory and the socket).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "mxop/op.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(abi, .init = setup, .fini = teardown, .timeout = 90);

static const int PATHS[] = {MXOP_DATA_PATH_SHM, MXOP_DATA_PATH_SOCKET};

static mxop_client_t *connect_path(int path, const char *lib)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {
        .struct_size = sizeof(opts), .timeout_ms = 30000, .data_path = path};
    int rc = mxop_connect(daemon_.sock, &opts, &c);
    cr_assert_eq(rc, 0, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    cr_assert_eq(mxop_data_path(c), path, "the session did not take the path it asked for");
    rc = mxop_load_library(c, lib);
    cr_assert_eq(rc, 0, "load %s: %s: %s", lib, mxop_err_name(rc), mxop_last_error(c));
    return c;
}

static const char *path_name(int path)
{
    return path == MXOP_DATA_PATH_SHM ? "shm" : "socket";
}

/* The worker is alive and answers: relu in the same session. */
static void assert_serves(mxop_client_t *c, const char *why)
{
    int rc = mxop_load_library(c, "relu.so");
    cr_assert_eq(rc, 0, "%s: load relu.so: %s: %s", why, mxop_err_name(rc), mxop_last_error(c));
    int64_t shape[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, shape, 3, &x);
    mxt_array(c, MXOP_F32, 1, shape, 4, &y);
    rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: relu: %s: %s", why, mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < 16; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
}

Test(abi, a_library_of_the_previous_abi_loads_and_runs)
{
    for (size_t p = 0; p < sizeof(PATHS) / sizeof(PATHS[0]); p++) {
        mxop_client_t *c = connect_path(PATHS[p], "abi_prev.so");
        const mxop_op_t *op = mxt_op(c, "abi_prev.axpy");
        /* Its declared attributes came through the old mxop_op_def_t. */
        cr_assert_eq(mxop_op_attr_count(op), 2, "%s", path_name(PATHS[p]));
        int64_t shape[] = {3, 5};
        mxop_array_t in[2], out;
        mxt_array(c, MXOP_F32, 2, shape, 11, &in[0]);
        mxt_array(c, MXOP_F32, 2, shape, 12, &in[1]);
        mxt_array(c, MXOP_F32, 2, shape, 13, &out);
        const char *attrs[] = {"alpha", "-1.5", NULL};
        mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
        int rc = mxop_forward(c, op, &call, in, 2, &out, 1);
        cr_assert_eq(rc, 0, "%s: %s: %s", path_name(PATHS[p]), mxop_err_name(rc),
                     mxop_last_error(c));
        for (size_t i = 0; i < 15; i++)
            cr_assert_float_eq(mxt_get(&out, i), -1.5 * mxt_get(&in[0], i) + mxt_get(&in[1], i),
                               1e-5, "%s: element %zu", path_name(PATHS[p]), i);
        /* The declared default (alpha = 2) and the old check_attrs. */
        rc = mxop_forward(c, op, NULL, in, 2, &out, 1);
        cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
        cr_assert_float_eq(mxt_get(&out, 7), 2 * mxt_get(&in[0], 7) + mxt_get(&in[1], 7), 1e-5);
        const char *empty[] = {"tag", "", NULL};
        call.attrs = empty;
        rc = mxop_forward(c, op, &call, in, 2, &out, 1);
        cr_assert_eq(rc, MXOP_EATTR, "%s: an empty tag: %s", path_name(PATHS[p]),
                     mxop_err_name(rc));
        cr_assert(strstr(mxop_last_error(c), "tag is empty") != NULL, "%s", mxop_last_error(c));
        for (int i = 0; i < 2; i++)
            mxop_array_free(c, &in[i]);
        mxop_array_free(c, &out);
        mxop_close(c);
    }
}

Test(abi, a_newer_library_that_runs_in_this_abi_loads)
{
    for (size_t p = 0; p < sizeof(PATHS) / sizeof(PATHS[0]); p++) {
        mxop_client_t *c = connect_path(PATHS[p], "abi_next.so");
        int64_t shape[] = {4, 6};
        mxop_array_t in[2], out;
        mxt_array(c, MXOP_F32, 2, shape, 21, &in[0]);
        mxt_array(c, MXOP_F32, 2, shape, 22, &in[1]);
        mxt_array(c, MXOP_F32, 2, shape, 23, &out);
        int rc = mxop_forward(c, mxt_op(c, "abi_next.add"), NULL, in, 2, &out, 1);
        cr_assert_eq(rc, 0, "%s: %s: %s", path_name(PATHS[p]), mxop_err_name(rc),
                     mxop_last_error(c));
        for (size_t i = 0; i < 24; i++)
            cr_assert_float_eq(mxt_get(&out, i), mxt_get(&in[0], i) + mxt_get(&in[1], i), 1e-5,
                               "%s: element %zu", path_name(PATHS[p]), i);

        /* A dynamic output: alloc_output reaches the library's copy of it. */
        mxop_array_t outs[2];
        cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 0, NULL, &outs[0]), 0);
        cr_assert_eq(mxop_array_alloc(c, MXOP_F32, 2, shape, &outs[1]), 0);
        rc = mxop_forward(c, mxt_op(c, "abi_next.positive"), NULL, &in[0], 1, outs, 2);
        cr_assert_eq(rc, 0, "%s: %s: %s", path_name(PATHS[p]), mxop_err_name(rc),
                     mxop_last_error(c));
        size_t n = 0;
        for (size_t i = 0; i < 24; i++)
            if (mxt_get(&in[0], i) > 0)
                cr_assert_eq(mxt_get(&outs[1], n++), mxt_get(&in[0], i));
        cr_assert_eq(mxt_get(&outs[0], 0), (double)n);
        cr_assert_eq(outs[1].ndim, 1);
        cr_assert_eq(outs[1].shape[0], (int64_t)n);
        for (int i = 0; i < 2; i++) {
            mxop_array_free(c, &in[i]);
            mxop_array_free(c, &outs[i]);
        }
        mxop_array_free(c, &out);
        mxop_close(c);
    }
}

Test(abi, a_library_needing_a_newer_worker_is_refused_naming_both_versions)
{
    for (size_t p = 0; p < sizeof(PATHS) / sizeof(PATHS[0]); p++) {
        mxop_client_t *c = connect_path(PATHS[p], "relu.so");
        int rc = mxop_load_library(c, "abi_newer.so");
        cr_assert_eq(rc, MXOP_EABI, "%s: got %s: %s", path_name(PATHS[p]), mxop_err_name(rc),
                     mxop_last_error(c));
        char want[128];
        snprintf(want, sizeof(want), "needs a worker of ABI %d or newer; this worker speaks ABI %d",
                 MXOP_ABI_VERSION + 1, MXOP_ABI_VERSION);
        cr_assert(strstr(mxop_last_error(c), want) != NULL, "message '%s' lacks '%s'",
                  mxop_last_error(c), want);
        cr_assert(strstr(mxop_last_error(c), "abi_newer") != NULL, "%s", mxop_last_error(c));
        /* Its init (which aborts) never ran: the worker serves on. */
        cr_assert_eq(mxop_op_find(c, "abi_newer.x", &(const mxop_op_t *){NULL}), MXOP_EUNKNOWN_OP);
        assert_serves(c, "after the refusal");
        mxop_close(c);
    }
}

Test(abi, a_tensor_size_no_tensor_had_is_refused)
{
    mxop_client_t *c = connect_path(MXOP_DATA_PATH_SHM, "relu.so");
    int rc = mxop_load_library(c, "abi_badstride.so");
    cr_assert_eq(rc, MXOP_EABI, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "tensor_size 16") != NULL, "%s", mxop_last_error(c));
    assert_serves(c, "after the refusal");
    mxop_close(c);
}

/* The dtype table keeps the three columns op libraries were written against
 * (a fourth went to MXOP_DTYPE_NAMES): an X of three parameters compiles. */
Test(abi, the_dtype_table_keeps_three_columns)
{
    size_t total = 0;
    int rows = 0;
#define COUNT3(e, name, size)                                                                      \
    rows++;                                                                                        \
    total += size;                                                                                 \
    cr_expect_eq(mxop_dtype_size(e), size, "%s", name);
    MXOP_DTYPE_MAP(COUNT3)
#undef COUNT3
    cr_expect_eq(rows, MXOP_DTYPE_COUNT);
    int named = 0;
#define COUNT4(e, name, size, fw) named += fw[0] != '\0';
    MXOP_DTYPE_NAMES(COUNT4)
#undef COUNT4
    cr_expect_eq(named, MXOP_DTYPE_COUNT);
    cr_expect_gt(total, 0);
}
