/*
 * tests/test_crash.c - an op that crashes, aborts, exits or hangs ends only
 * its worker: the caller gets a named error, its inputs are untouched, the
 * daemon lives, and the next call on the same client succeeds.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"relu.so", "crash.so", "running_mean.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(crash, .init = setup, .fini = teardown, .timeout = 60);

static void next_call_succeeds(mxop_client_t *c)
{
    int64_t s[] = {32};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 9, &x);
    mxt_array(c, MXOP_F32, 1, s, 10, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "call after the crash: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (int i = 0; i < 32; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0);
    rc = mxop_forward(c, mxt_op(c, "identity"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "crash.so after the crash: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
}

/* Calls `op` on a fresh input and checks the error, the message and the input. */
static void expect_failure(const char *op, const char *const *attrs, int32_t timeout_ms, int code,
                           const char *needle1, const char *needle2)
{
    mxop_stats_t before, after;
    cr_assert_eq(mxop_stats(client, &before), 0);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 1, &x);
    mxt_array(client, MXOP_F32, 1, s, 2, &y);
    float saved[1024];
    memcpy(saved, x.data, sizeof(saved));

    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = timeout_ms};
    int rc = mxop_forward(client, mxt_op(client, op), &call, &x, 1, &y, 1);
    const char *msg = mxop_last_error(client);
    cr_assert_eq(rc, code, "op %s: got %s (%s), expected %s", op, mxop_err_name(rc), msg,
                 mxop_err_name(code));
    if (needle1)
        cr_assert(strstr(msg, needle1) != NULL, "message '%s' lacks '%s'", msg, needle1);
    if (needle2)
        cr_assert(strstr(msg, needle2) != NULL, "message '%s' lacks '%s'", msg, needle2);
    cr_assert_eq(memcmp(saved, x.data, sizeof(saved)), 0, "the caller's input changed");
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");

    cr_assert_eq(mxop_stats(client, &after), 0);
    if (code != MXOP_EOP_FAILED) {
        cr_assert_eq(after.worker_restarts, before.worker_restarts + 1);
        cr_assert_neq(after.worker_pid, before.worker_pid, "the worker was not replaced");
    }
    next_call_succeeds(client);
}

Test(crash, segfault_names_op_and_signal)
{
    expect_failure("segv", NULL, 0, MXOP_EWORKER_CRASHED, "segv", "SIGSEGV");
}

Test(crash, abort_names_signal)
{
    expect_failure("abort", NULL, 0, MXOP_EWORKER_CRASHED, "abort", "SIGABRT");
}

Test(crash, exit_inside_op_names_status)
{
    expect_failure("exit3", NULL, 0, MXOP_EWORKER_CRASHED, "exit3", "status 3");
}

Test(crash, hang_is_killed_at_deadline)
{
    expect_failure("hang", NULL, 300, MXOP_ETIMEOUT, "hang", NULL);
}

Test(crash, write_into_input_is_caught)
{
    expect_failure("write_input", NULL, 0, MXOP_EINPUT_WRITTEN, "write_input", "input 0");
}

Test(crash, op_error_keeps_the_worker)
{
    expect_failure("fail", NULL, 0, MXOP_EOP_FAILED, "asked to fail", NULL);
}

Test(crash, repeated_crashes_each_recover)
{
    for (int i = 0; i < 5; i++)
        expect_failure("segv", NULL, 0, MXOP_EWORKER_CRASHED, "segv", "SIGSEGV");
}

Test(crash, other_session_is_unaffected)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *other = mxt_connect_with(&daemon_, libs);
    mxop_stats_t st0, st1;
    cr_assert_eq(mxop_stats(other, &st0), 0);
    expect_failure("segv", NULL, 0, MXOP_EWORKER_CRASHED, "segv", "SIGSEGV");
    cr_assert_eq(mxop_stats(other, &st1), 0);
    cr_assert_eq(st1.worker_pid, st0.worker_pid, "the other session's worker was replaced");
    cr_assert_eq(st1.worker_restarts, 0);
    next_call_succeeds(other);
    mxop_close(other);
}

Test(crash, state_is_reported_lost_after_a_crash)
{
    const mxop_op_t *op = mxt_op(client, "running_mean_norm");
    mxop_shape_t s = {2, {2, 2}};
    int32_t dt = MXOP_F64;
    uint64_t state;
    cr_assert_eq(mxop_state_create(client, op, NULL, 1, &dt, &s, &state), 0);
    expect_failure("segv", NULL, 0, MXOP_EWORKER_CRASHED, "segv", NULL);
    int64_t shape[] = {2, 2};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F64, 2, shape, 3, &x);
    mxt_array(client, MXOP_F64, 2, shape, 4, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .state = state};
    int rc = mxop_forward(client, op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ESTATE_LOST, "got %s", mxop_err_name(rc));
    /* A new instance works. */
    cr_assert_eq(mxop_state_create(client, op, NULL, 1, &dt, &s, &state), 0);
    call.state = state;
    cr_assert_eq(mxop_forward(client, op, &call, &x, 1, &y, 1), 0);
}

Test(crash, crash_on_nth_call)
{
    const char *attrs[] = {"n", "3", NULL};
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 1, &x);
    mxt_array(client, MXOP_F32, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    const mxop_op_t *op = mxt_op(client, "crash_nth");
    cr_assert_eq(mxop_forward(client, op, &call, &x, 1, &y, 1), 0);
    cr_assert_eq(mxop_forward(client, op, &call, &x, 1, &y, 1), 0);
    cr_assert_eq(mxop_forward(client, op, &call, &x, 1, &y, 1), MXOP_EWORKER_CRASHED);
    /* The new worker's counter starts again. */
    cr_assert_eq(mxop_forward(client, op, &call, &x, 1, &y, 1), 0);
}
