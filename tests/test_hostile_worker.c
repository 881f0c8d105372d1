/*
 * tests/test_hostile_worker.c - nothing a worker writes can crash its
 * client.  Each test runs an op of tests/plugins/garbage_reply.c
 * that answers, while its call is in flight, with what no worker should
 * send: bytes that are no frame, a forged length, a result for a call
 * never made or for none, a status that is no code, a message full of
 * escapes, an inferred dtype that is none, on the data channel or in the
 * mailbox's reply slot, on the client's own session or on a pool's
 * sibling.  Each asserts the named error with the op named, that the
 * client process lives (a fault in libmxop would end the test's process),
 * that the next call on the same client succeeds, that the daemon lives
 * and that another session's results stay right.
 *
 * The data-channel ops send() on the worker's channel, which the strict
 * sandbox may refuse, so the daemon runs at --sandbox basic; the mailbox is
 * memory, which no level can guard, and its ops are also run at strict.
 * The data-channel ops run on the data path the runner chose
 * (MXOP_DATA_PATH: shm and socket); the mailbox ops choose the shm path,
 * the only one with a mailbox.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "mxop/errors.h"

static mxt_daemon_t daemon_;

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void setup_strict(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(hostile, .init = setup_basic, .fini = teardown, .timeout = 60);
TestSuite(hostile_strict, .init = setup_strict, .fini = teardown, .timeout = 60);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* relu on 64 values, each checked; returns the call's code. */
static int relu_ok(mxop_client_t *c)
{
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    for (int i = 0; rc == 0 && i < 64; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0, "wrong result");
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    return rc;
}

/* Whether s is UTF-8 without control characters but lines and tabs. */
static int clean_text(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p != '\0') {
        if (*p < 0x80) {
            if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
                return 0;
            p++;
            continue;
        }
        int n = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc2 ? 2 : 0;
        if (n == 0 || *p > 0xf4)
            return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

typedef struct hostile {
    mxop_client_t *c, *other;
    mxop_stats_t before;
    double t0;
} hostile_t;

/* Two sessions with the fixture, both served once; `shm`: the mailbox path for both. */
static void begin(hostile_t *h, int shm)
{
    if (shm)
        setenv("MXOP_DATA_PATH", "shm", 1);
    const char *libs[] = {"relu.so", "garbage_reply.so", NULL};
    h->other = mxt_connect_with(&daemon_, libs);
    h->c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(relu_ok(h->c), 0, "%s", mxop_last_error(h->c));
    cr_assert_eq(relu_ok(h->other), 0, "%s", mxop_last_error(h->other));
    cr_assert_eq(mxop_stats(h->c, &h->before), 0);
    h->t0 = now_s();
}

/*
 * After the hostile call: it took well under its deadline, the daemon
 * lives, the next call on the same client succeeds (on a new worker when
 * `replaced`), and the other session is served right.
 */
static void end(hostile_t *h, int replaced)
{
    cr_assert(now_s() - h->t0 < 3.0, "the hostile call took %.1f s", now_s() - h->t0);
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    cr_assert_eq(relu_ok(h->c), 0, "the next call: %s", mxop_last_error(h->c));
    mxop_stats_t after;
    cr_assert_eq(mxop_stats(h->c, &after), 0);
    if (replaced) {
        cr_assert_eq(after.worker_restarts, h->before.worker_restarts + 1);
        cr_assert_neq(after.worker_pid, h->before.worker_pid, "the worker was not replaced");
    }
    cr_assert_eq(relu_ok(h->other), 0, "the other session: %s", mxop_last_error(h->other));
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    mxop_close(h->c);
    mxop_close(h->other);
}

/* Calls `op` with a deadline of 5 s and checks the error and its message. */
static void call_fails(hostile_t *h, const char *op, int code, const char *needle)
{
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(h->c, MXOP_F32, 1, s, 1, &x);
    mxt_array(h->c, MXOP_F32, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .timeout_ms = 5000};
    int rc = mxop_forward(h->c, mxt_op(h->c, op), &call, &x, 1, &y, 1);
    const char *msg = mxop_last_error(h->c);
    cr_assert_eq(rc, code, "op %s: got %s (%s), expected %s", op, mxop_err_name(rc), msg,
                 mxop_err_name(code));
    char named[64];
    snprintf(named, sizeof(named), "op '%s' (garbage_reply.so)", op);
    cr_assert(strstr(msg, named) != NULL, "the message does not name the op: %s", msg);
    cr_assert(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
    cr_assert(clean_text(msg), "the message is not clean text: %s", msg);
    mxop_array_free(h->c, &x);
    mxop_array_free(h->c, &y);
}

/* Garbage that loses the channel's framing: the worker is replaced, the call fails naming it. */
static void garbage(const char *op, int shm, const char *needle)
{
    hostile_t h;
    begin(&h, shm);
    call_fails(&h, op, MXOP_EPROTOCOL, needle);
    cr_assert(strstr(mxop_last_error(h.c), "it was replaced") != NULL, "%s", mxop_last_error(h.c));
    end(&h, 1);
}

/* ---- on the data channel, either data path ---- */

Test(hostile, junk_on_the_channel_during_a_call)
{
    garbage("sock_junk", 0, "bytes that are not a frame: MXOP_EPROTOCOL");
}

Test(hostile, forged_frame_length_is_refused_at_the_header)
{
    garbage("sock_huge_len", 0, "bytes that are not a frame: MXOP_EFRAME_TOO_LARGE");
}

Test(hostile, result_for_a_call_never_made_on_the_channel)
{
    garbage("sock_future_id", 0, "a result for call 18446744073709551615");
}

Test(hostile, result_for_no_call_names_the_workers_reason)
{
    garbage("sock_no_call", 0,
            "a result for no call, with status -1004: bad frame in the mailbox (forged)");
}

/* ---- in the mailbox's reply slot (the shm path) ---- */

Test(hostile, junk_in_the_mailbox)
{
    garbage("mbox_junk", 1, "a bad frame in the mailbox: MXOP_EPROTOCOL");
}

Test(hostile, mailbox_slot_length_past_the_slot)
{
    garbage("mbox_slot_len", 1, "a bad frame in the mailbox: MXOP_EPROTOCOL");
}

Test(hostile, mailbox_header_length_unlike_the_slot)
{
    garbage("mbox_hdr_len", 1, "a bad frame in the mailbox: MXOP_EPROTOCOL");
}

Test(hostile, result_for_a_call_never_made_in_the_mailbox)
{
    garbage("mbox_future_id", 1, "a result for call 18446744073709551615");
}

/* A result for the call in flight, well framed, whose status and message are garbage. */
Test(hostile, status_that_is_no_code_and_a_message_of_escapes)
{
    hostile_t h;
    begin(&h, 1);
    call_fails(&h, "mbox_bad_status", MXOP_EPROTOCOL,
               "the worker answered with status -77777, which is no MXOP_E* code");
    const char *msg = mxop_last_error(h.c);
    cr_assert(strchr(msg, 0x1b) == NULL, "an escape reached the caller: %s", msg);
    cr_assert(strstr(msg, "\\x1b[2J") != NULL && strstr(msg, "\\xff\\xfe") != NULL, "%s", msg);
    cr_assert(strlen(msg) < 512 && strstr(msg, "...") != NULL, "%s", msg);
    /* Not garbage on the channel: the worker keeps serving. */
    end(&h, 0);
}

/* ---- result records in the reply slot (shm/call_record.h) ---- */

Test(hostile, result_record_shorter_than_its_fixed_part)
{
    garbage("mbox_rec_short", 1, "result record of 10 bytes; its fixed part alone has 24");
}

Test(hostile, result_record_of_another_version)
{
    garbage("mbox_rec_version", 1, "result record version 77");
}

Test(hostile, result_record_for_a_call_never_made)
{
    garbage("mbox_rec_future_id", 1, "a result for call 18446744073709551615");
}

/* A result record for the call in flight whose status and message are garbage: as protobuf. */
Test(hostile, result_record_with_a_status_that_is_no_code)
{
    hostile_t h;
    begin(&h, 1);
    call_fails(&h, "mbox_rec_bad_status", MXOP_EPROTOCOL,
               "the worker answered with status -77777, which is no MXOP_E* code");
    const char *msg = mxop_last_error(h.c);
    cr_assert(strchr(msg, 0x1b) == NULL, "an escape reached the caller: %s", msg);
    cr_assert(strstr(msg, "\\x1b[2J") != NULL && strstr(msg, "\\xff\\xfe") != NULL, "%s", msg);
    cr_assert(strlen(msg) < 512 && strstr(msg, "...") != NULL, "%s", msg);
    end(&h, 0);
}

Test(hostile, inferred_dtype_and_shape_that_are_none)
{
    hostile_t h;
    begin(&h, 1);
    int32_t in_dtypes[] = {MXOP_F32}, out_dtypes[1] = {0};
    mxop_shape_t in_shapes[1] = {{.ndim = 1, .dims = {64}}}, out_shapes[1];
    int rc = mxop_infer(h.c, mxt_op(h.c, "mbox_bad_infer"), NULL, 1, in_dtypes, in_shapes, 1,
                        out_dtypes, out_shapes);
    const char *msg = mxop_last_error(h.c);
    cr_assert_eq(rc, MXOP_EPROTOCOL, "got %s (%s), dtype %d", mxop_err_name(rc), msg,
                 (int)out_dtypes[0]);
    cr_assert(strstr(msg, "op 'mbox_bad_infer' (garbage_reply.so)") != NULL, "%s", msg);
    cr_assert(strstr(msg, "bad inferred shape of output 0") != NULL ||
                  strstr(msg, "dtype 999") != NULL,
              "%s", msg);
    end(&h, 0);
}

/* ---- a pool's sibling session ---- */

static void *busy_call(void *arg)
{
    mxop_client_t *c = arg;
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 3, &x);
    mxt_array(c, MXOP_F32, 1, s, 4, &y);
    const char *attrs[] = {"wait_ms", "5000", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    intptr_t rc = mxop_forward(c, mxt_op(c, "slow_copy"), &call, &x, 1, &y, 1);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    return (void *)rc;
}

/*
 * The client is busy with a call on another thread, so the garbage-writing
 * call goes to a sibling session (client/pool.c): it fails there by name,
 * the sibling's next call succeeds, and so do the client's own.
 */
Test(hostile, garbage_on_a_sibling_session_of_the_pool)
{
    setenv("MXOP_DATA_PATH", "shm", 1);
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .max_sessions = 2};
    mxop_client_t *c = NULL;
    int rc = mxop_connect(daemon_.sock, &opts, &c);
    cr_assert_eq(rc, 0, "%s", mxop_connect_error());
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_load_library(c, "garbage_reply.so"), 0, "%s", mxop_last_error(c));
    cr_assert_eq(relu_ok(c), 0, "%s", mxop_last_error(c));
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    /* Found now: looking an op up waits for the client's session. */
    const mxop_op_t *junk = mxt_op(c, "mbox_junk"), *relu = mxt_op(c, "relu");
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, busy_call, c), 0);
    mxt_sleep_ms(300); /* the busy call holds the client's session */
    double t0 = now_s();
    rc = mxop_forward(c, junk, NULL, &x, 1, &y, 1);
    const char *msg = mxop_last_error(c);
    cr_assert_eq(rc, MXOP_EPROTOCOL, "got %s (%s)", mxop_err_name(rc), msg);
    cr_assert(strstr(msg, "op 'mbox_junk' (garbage_reply.so)") != NULL &&
                  strstr(msg, "a bad frame in the mailbox") != NULL,
              "%s", msg);
    cr_assert(now_s() - t0 < 3.5, "took %.1f s", now_s() - t0);
    /* The sibling again (the client is still busy): its replacement serves. */
    rc = mxop_forward(c, relu, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "the sibling's next call: %s", mxop_last_error(c));
    for (int i = 0; i < 64; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_geq(st.daemon_sessions, 2, "no sibling session was opened");
    void *busy_rc;
    pthread_join(t, &busy_rc);
    cr_assert_eq((intptr_t)busy_rc, 0, "the busy call failed");
    cr_assert_eq(relu_ok(c), 0, "%s", mxop_last_error(c));
    cr_assert(mxt_daemon_alive(&daemon_));
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
}

/* ---- the mailbox at the strict level, where junk once crashed the client ---- */

Test(hostile_strict, junk_in_the_mailbox)
{
    garbage("mbox_junk", 1, "a bad frame in the mailbox: MXOP_EPROTOCOL");
}

Test(hostile_strict, result_for_a_call_never_made_in_the_mailbox)
{
    garbage("mbox_future_id", 1, "a result for call 18446744073709551615");
}
