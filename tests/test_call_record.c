/*
 * tests/test_call_record.c - the mailbox's call records (shm/call_record.h)
 * as a hostile or broken client could write them, against a real worker.
 *
 * Each test writes a record straight into a real session's request slot,
 * as the client's own call path does, and reads the worker's answer from
 * the reply slot: a record that does not decode is answered with an error
 * naming what was wrong, a record that decodes is refused exactly as the
 * same call packed by protobuf-c is (one validator), and the worker lives
 * on to serve the next ordinary call.  (Garbage result records, a worker
 * lying to its client, are in tests/test_hostile_worker.c.)
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"
#include "harness.h"
#include "shm/call_record.h"
#include "shm/mailbox.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(call_record, .init = setup, .fini = teardown, .timeout = 60);

/* A session on the mailbox path with noop.so and relu.so, served once. */
static mxop_client_t *session(void)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {
        .struct_size = sizeof(opts), .timeout_ms = 20000, .data_path = MXOP_DATA_PATH_SHM};
    int rc = mxop_connect(daemon_.sock, &opts, &c);
    cr_assert_eq(rc, 0, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    const char *libs[] = {"noop.so", "relu.so", NULL};
    for (int i = 0; libs[i] != NULL; i++)
        cr_assert_eq(mxop_load_library(c, libs[i]), 0, "%s", mxop_last_error(c));
    cr_assert_eq(mxop_forward(c, mxt_op(c, "noop"), NULL, NULL, 0, NULL, 0), 0, "%s",
                 mxop_last_error(c));
    cr_assert_eq(c->sess.chan, MXOP__CHAN_MBOX, "the session is not on the mailbox");
    return c;
}

/* The worker's answer to a raw frame: its status, id and message. */
typedef struct answer {
    int32_t status;
    uint64_t id;
    char message[MXOP__MBOX_SLOT_BYTES];
} answer_t;

/*
 * Publishes payload[len] as a frame of `kind` in the request slot, as the
 * client's call path does, and waits (2 s at most) for the answer in the
 * reply slot, a result record or a protobuf CallResult.
 */
static void raw_call(mxop_client_t *c, uint16_t kind, const void *payload, size_t len, answer_t *a)
{
    memcpy(mxop__mbox_put_begin(&c->mbox), payload, len);
    mxop__mbox_put_end(&c->mbox, kind, len, mxop__now_ns());
    int64_t end = mxop__now_ns() + 2000 * (int64_t)1000000;
    static uint8_t buf[MXOP__MBOX_SLOT_BYTES];
    uint16_t k = 0;
    uint32_t n = 0;
    int rc = 0;
    while ((rc = mxop__mbox_take(&c->mbox, buf, sizeof buf, &k, &n)) == 0 && mxop__now_ns() < end)
        mxt_sleep_ms(1);
    cr_assert_eq(rc, 1, "no answer from the worker (%d)", rc);
    if (k == MXOP__KIND_RESULT_REC) {
        Mxop__CallResult r;
        char why[160];
        cr_assert_eq(mxop__result_rec_decode(buf + MXOP__FRAME_HDR, n, &r, a->message,
                                             sizeof a->message, why, sizeof why),
                     0, "%s", why);
        a->status = r.status;
        a->id = r.id;
        return;
    }
    cr_assert_eq(k, MXOP__KIND_CALL_RESULT, "an answer of kind %u", k);
    Mxop__CallResult *r = mxop__call_result__unpack(NULL, n, buf + MXOP__FRAME_HDR);
    cr_assert_not_null(r, "the answer does not decode");
    a->status = r->status;
    a->id = r->id;
    mxop__fmt(a->message, sizeof a->message, "%s", r->message != NULL ? r->message : "");
    mxop__call_result__free_unpacked(r, NULL);
}

/* The session's worker still serves, and is the one it was. */
static void still_serves(mxop_client_t *c, uint32_t pid)
{
    int rc = mxop_forward(c, mxt_op(c, "noop"), NULL, NULL, 0, NULL, 0);
    cr_assert_eq(rc, 0, "the next call: %s", mxop_last_error(c));
    cr_assert_eq(c->worker_pid, pid, "the worker was replaced");
    cr_assert(mxt_daemon_alive(&daemon_));
}

/* A record head for a forward of op `op` with n_in and n_out tensors, under the next call id. */
static mxop__call_rec_t head(mxop_client_t *c, uint32_t op, int n_in, int n_out)
{
    mxop__call_rec_t h = {.version = MXOP__CALL_REC_VERSION,
                          .op = op,
                          .id = c->next_call_id++,
                          .deadline_ms = 5000,
                          .n_in = (uint8_t)n_in,
                          .n_out = (uint8_t)n_out};
    return h;
}

/* Sends head h followed by `nt` tensors t; asserts the answer names the call, with `code`. */
static void expect_refused(mxop_client_t *c, const mxop__call_rec_t *h, const mxop__rec_tensor_t *t,
                           int nt, size_t len, int code, const char *needle)
{
    static uint8_t rec[sizeof(mxop__call_rec_t) + 4 * sizeof(mxop__rec_tensor_t)];
    memcpy(rec, h, sizeof *h);
    if (nt > 0)
        memcpy(rec + sizeof *h, t, (size_t)nt * sizeof *t);
    static answer_t a;
    raw_call(c, MXOP__KIND_CALL_REC, rec, len, &a);
    cr_assert_eq(a.status, code, "status %d (%s), expected %s", (int)a.status, a.message,
                 mxop_err_name(code));
    cr_assert_eq(a.id, h->id, "the answer names call %llu, not %llu", (unsigned long long)a.id,
                 (unsigned long long)h->id);
    cr_assert(strstr(a.message, needle) != NULL, "message '%s' lacks '%s'", a.message, needle);
}

Test(call_record, a_record_shorter_than_its_fixed_part_is_refused)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    uint8_t rec[10] = {1};
    static answer_t a;
    raw_call(c, MXOP__KIND_CALL_REC, rec, sizeof rec, &a);
    cr_assert_eq(a.status, MXOP_EPROTOCOL, "status %d (%s)", (int)a.status, a.message);
    cr_assert(strstr(a.message, "call record of 10 bytes") != NULL, "%s", a.message);
    still_serves(c, pid);
    mxop_close(c);
}

Test(call_record, a_record_of_another_version_is_refused)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    mxop__call_rec_t h = head(c, mxt_op(c, "noop")->index, 0, 0);
    h.version = 9;
    expect_refused(c, &h, NULL, 0, sizeof h, MXOP_EVERSION, "call record version 9");
    still_serves(c, pid);
    mxop_close(c);
}

Test(call_record, flag_bits_no_record_has_are_refused)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    mxop__call_rec_t h = head(c, mxt_op(c, "noop")->index, 0, 0);
    h.flags = 0x4;
    expect_refused(c, &h, NULL, 0, sizeof h, MXOP_EPROTOCOL, "flags 0x4");
    h = head(c, mxt_op(c, "noop")->index, 0, 0);
    h.pad = 0xff;
    expect_refused(c, &h, NULL, 0, sizeof h, MXOP_EPROTOCOL, "pad 255");
    still_serves(c, pid);
    mxop_close(c);
}

Test(call_record, more_tensors_than_a_record_holds_are_refused)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    mxop__call_rec_t h = head(c, mxt_op(c, "noop")->index, 200, 0);
    expect_refused(c, &h, NULL, 0, sizeof h, MXOP_EPROTOCOL, "a record holds at most 64");
    still_serves(c, pid);
    mxop_close(c);
}

Test(call_record, a_length_unlike_its_counts_is_refused)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    mxop__call_rec_t h = head(c, mxt_op(c, "relu")->index, 1, 1);
    mxop__rec_tensor_t t[2];
    memset(t, 0, sizeof t);
    /* One tensor's bytes for two tensors, then two and a half. */
    expect_refused(c, &h, t, 1, sizeof h + sizeof t[0], MXOP_EPROTOCOL, "make 200");
    h = head(c, mxt_op(c, "relu")->index, 1, 1);
    expect_refused(c, &h, t, 2, sizeof h + sizeof t - 1, MXOP_EPROTOCOL, "make 200");
    still_serves(c, pid);
    mxop_close(c);
}

Test(call_record, more_dimensions_than_a_record_holds_are_refused)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    mxop__call_rec_t h = head(c, mxt_op(c, "relu")->index, 1, 1);
    mxop__rec_tensor_t t[2];
    memset(t, 0, sizeof t);
    t[1].ndim = 9;
    expect_refused(c, &h, t, 2, sizeof h + sizeof t, MXOP_EPROTOCOL, "output 0 has 9 dimensions");
    still_serves(c, pid);
    mxop_close(c);
}

/*
 * A record that decodes goes to the validator of protobuf calls: each bad
 * field gets the answer the same call gets packed by protobuf-c, code and
 * message alike.
 */
Test(call_record, a_decoded_record_is_refused_as_the_same_protobuf_call)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    int64_t shape[] = {16};
    mxop_array_t x;
    mxt_array(c, MXOP_F32, 1, shape, 1, &x);
    uint32_t region = mxop__region_wire(c, x.region);
    uint32_t relu = mxt_op(c, "relu")->index;
    mxop__rec_tensor_t good = {
        .offset = x.offset, .region = region, .dtype = MXOP_F32, .req = 0, .ndim = 1};
    good.shape[0] = 16;
    enum { N_CASES = 8 };
    for (int k = 0; k < N_CASES; k++) {
        mxop__rec_tensor_t t[2] = {good, good};
        t[1].req = MXOP_REQ_WRITE;
        uint32_t op = relu;
        int n_in = 1;
        switch (k) {
        case 0: op = 9999; break;                       /* no such op */
        case 1: t[0].region = 4242; break;              /* no such region */
        case 2: t[0].dtype = 77; break;                 /* no such dtype */
        case 3: t[1].offset = (uint64_t)1 << 60; break; /* outside the region */
        case 4: t[0].shape[0] = -3; break;              /* a negative dimension */
        case 5: t[1].req = 99; break;                   /* no such req */
        case 6: n_in = 0; break;                        /* relu takes one input */
        }
        uint64_t state = k == 7 ? 12345 : 0; /* no such state: it travels after the head */
        mxop__call_rec_t h = head(c, op, n_in, 1);
        static uint8_t rec[sizeof h + 2 * sizeof(uint64_t) + sizeof t];
        size_t len = sizeof h;
        if (state != 0) {
            h.flags |= MXOP__CALL_REC_STATE;
            uint64_t state_seed[2] = {state, 0};
            memcpy(rec + len, state_seed, sizeof state_seed);
            len += sizeof state_seed;
        }
        memcpy(rec, &h, sizeof h);
        memcpy(rec + len, n_in ? t : t + 1, (size_t)(n_in + 1) * sizeof t[0]);
        len += (size_t)(n_in + 1) * sizeof t[0];
        static answer_t as_rec, as_pb;
        raw_call(c, MXOP__KIND_CALL_REC, rec, len, &as_rec);
        cr_assert_neq(as_rec.status, 0, "case %d: the record was not refused", k);
        cr_assert_eq(as_rec.id, h.id, "case %d", k);

        /* The same call as protobuf, under the next id. */
        Mxop__TensorDesc d[2];
        Mxop__TensorDesc *dp[2] = {&d[0], &d[1]};
        int64_t shapes[2][MXOP_MAX_DIMS];
        for (int i = 0; i < 2; i++) {
            mxop__tensor_desc__init(&d[i]);
            d[i].region = t[i].region;
            d[i].offset = t[i].offset;
            d[i].dtype = t[i].dtype;
            d[i].req = t[i].req;
            d[i].n_shape = t[i].ndim;
            memcpy(shapes[i], t[i].shape, sizeof shapes[i]);
            d[i].shape = shapes[i];
        }
        Mxop__Invoke iv = MXOP__INVOKE__INIT;
        iv.op = op;
        iv.state = state;
        iv.n_inputs = (size_t)n_in;
        iv.inputs = n_in ? dp : NULL;
        iv.n_outputs = 1;
        iv.outputs = dp + 1;
        iv.deadline_ms = 5000;
        Mxop__Call call = MXOP__CALL__INIT;
        call.id = c->next_call_id++;
        call.body_case = MXOP__CALL__BODY_INVOKE;
        call.invoke = &iv;
        static uint8_t pb[4096];
        size_t n = mxop__call__pack(&call, pb);
        raw_call(c, MXOP__KIND_CALL, pb, n, &as_pb);
        cr_assert_eq(as_pb.id, call.id, "case %d", k);
        cr_assert_eq(as_rec.status, as_pb.status, "case %d: record %d (%s), protobuf %d (%s)", k,
                     (int)as_rec.status, as_rec.message, (int)as_pb.status, as_pb.message);
        /* The messages differ only in the call ids they may name. */
        char want[512];
        mxop__fmt(want, sizeof want, "%s", as_pb.message);
        char idtxt[32], idrec[32];
        mxop__fmt(idtxt, sizeof idtxt, "%llu", (unsigned long long)call.id);
        mxop__fmt(idrec, sizeof idrec, "%llu", (unsigned long long)h.id);
        char *at = strstr(want, idtxt);
        if (at != NULL && strlen(idtxt) == strlen(idrec))
            memcpy(at, idrec, strlen(idrec));
        cr_assert_str_eq(as_rec.message, want, "case %d", k);
    }
    mxop_array_free(c, &x);
    still_serves(c, pid);
    mxop_close(c);
}

/*
 * A record left half written (its writer stopped with seq odd) is not
 * read; once published it is served.  Torn reads are the mailbox's
 * seqlock's business, the same for every kind of frame.
 */
Test(call_record, a_half_written_record_waits_for_its_publication)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    mxop__call_rec_t h = head(c, mxt_op(c, "noop")->index, 0, 0);
    uint8_t *at = mxop__mbox_put_begin(&c->mbox);
    memcpy(at, &h, sizeof h / 2);
    mxt_sleep_ms(200);
    cr_assert_eq(mxop__mbox_ready(&c->mbox), 0, "the worker answered a frame being written");
    memcpy(at, &h, sizeof h);
    mxop__mbox_put_end(&c->mbox, MXOP__KIND_CALL_REC, sizeof h, mxop__now_ns());
    int64_t end = mxop__now_ns() + 2000 * (int64_t)1000000;
    while (!mxop__mbox_ready(&c->mbox) && mxop__now_ns() < end)
        mxt_sleep_ms(1);
    static uint8_t buf[MXOP__MBOX_SLOT_BYTES];
    uint16_t k;
    uint32_t n;
    cr_assert_eq(mxop__mbox_take(&c->mbox, buf, sizeof buf, &k, &n), 1);
    cr_assert_eq(k, MXOP__KIND_RESULT_REC);
    static char text[MXOP__MBOX_SLOT_BYTES];
    Mxop__CallResult r;
    char why[160];
    cr_assert_eq(
        mxop__result_rec_decode(buf + MXOP__FRAME_HDR, n, &r, text, sizeof text, why, sizeof why),
        0, "%s", why);
    cr_assert_eq(r.id, h.id);
    cr_assert_eq(r.status, 0, "%d: %s", (int)r.status, text);
    still_serves(c, pid);
    mxop_close(c);
}

/* Records of random bytes and random fields: each is answered, none ends the worker. */
Test(call_record, random_records_are_each_answered)
{
    mxop_client_t *c = session();
    uint32_t pid = c->worker_pid;
    unsigned seed = 12345;
    static uint8_t rec[sizeof(mxop__call_rec_t) + 4 * sizeof(mxop__rec_tensor_t)];
    for (int k = 0; k < 400; k++) {
        for (size_t i = 0; i < sizeof rec; i++)
            rec[i] = (uint8_t)rand_r(&seed);
        size_t len = (size_t)rand_r(&seed) % (sizeof rec + 1);
        mxop__call_rec_t h;
        memcpy(&h, rec, sizeof h);
        /* Half of them well framed, so that their fields reach the validator. */
        if (k % 2 == 0) {
            int nt = rand_r(&seed) % 5;
            h.version = MXOP__CALL_REC_VERSION;
            h.flags = (uint8_t)(rand_r(&seed) & 1);
            h.pad = 0;
            h.op %= 4;
            h.n_in = (uint8_t)(nt / 2);
            h.n_out = (uint8_t)(nt - nt / 2);
            for (int i = 0; i < nt; i++) {
                mxop__rec_tensor_t t;
                memcpy(&t, rec + sizeof h + (size_t)i * sizeof t, sizeof t);
                t.ndim %= MXOP_MAX_DIMS + 1;
                t.region %= 4;
                memcpy(rec + sizeof h + (size_t)i * sizeof t, &t, sizeof t);
            }
            len = sizeof h + (size_t)nt * sizeof(mxop__rec_tensor_t);
        }
        h.id = c->next_call_id++;
        memcpy(rec, &h, sizeof h);
        static answer_t a;
        raw_call(c, MXOP__KIND_CALL_REC, rec, len, &a);
        cr_assert(a.id == h.id || (a.id == 0 && len < sizeof h), "record %d: answer for %llu", k,
                  (unsigned long long)a.id);
    }
    still_serves(c, pid);
    mxop_close(c);
}
