/*
 * tests/plugins/garbage_reply.c - a library whose ops answer their client
 * with what no worker should send, each through one path a worker's bytes
 * take to the client (tests/test_hostile_worker.c).  Each writes its
 * garbage while its call is in flight, rings the client awake, waits
 * `wait_ms` (attribute, default 300) for the client to read it, then
 * copies its 1 input to its 1 output and returns 0 (by then the client
 * should have dropped this worker).
 *
 * On the data channel (descriptor 4; send(), which the strict sandbox may
 * refuse: the tests run these at --sandbox basic):
 *
 *   sock_junk        bytes that are no frame
 *   sock_huge_len    a result header claiming a payload of 1 MiB, and no payload
 *   sock_future_id   a well-formed result for a call never made (id 2^64-1)
 *   sock_no_call     a result for no call (id 0), as a worker sends about a
 *                    frame it could not read as a call, with its reason
 *
 * In the shared-memory mailbox's reply slot (memory: no sandbox level can
 * refuse it), found as the worker's mapping of "mxop-mailbox" in
 * /proc/self/maps, published as the worker would (seqlock), the client
 * woken through every eventfd the worker holds (its bells):
 *
 *   mbox_junk        a slot frame that is no frame
 *   mbox_slot_len    a slot length of 2^32-1 bytes
 *   mbox_hdr_len     a frame header whose length disagrees with the slot's
 *   mbox_future_id   a well-formed result for a call never made
 *   mbox_bad_status  a result for the call in flight (its id read from the
 *                    request slot) with status -77777, no MXOP_E* code, and a
 *                    message of 60000 bytes with terminal escapes, invalid
 *                    UTF-8 and a NUL
 *   mbox_rec_short   a result record (frame kind 8, shm/call_record.h) of
 *                    10 bytes, shorter than its fixed part
 *   mbox_rec_version a result record of version 77
 *   mbox_rec_future_id a result record for a call never made
 *   mbox_rec_bad_status a result record for the call in flight with
 *                    status -77777 and the message of mbox_bad_status
 *   mbox_bad_infer   (infer_shape; forward copies) a result for the Infer in
 *                    flight with dtype 999 and a negative dimension
 *
 * And a well-behaved one, to keep a session busy:
 *
 *   slow_copy        waits `wait_ms`, then copies
 *
 * Ops take 1 f32 input and give 1 output.  Without a mailbox (the socket
 * data path), the mbox_ ops find none and just copy.
 */
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mxop/op.h"
#include "../../shm/mailbox.h" /* the layout any op of the worker can see */

MXOP_PLUGIN("garbage_reply", "1.0");

#define DATA_FD 4
#define KIND_CALL_RESULT 4
#define KIND_CALL_REC 7   /* a call record, shm/call_record.h */
#define KIND_RESULT_REC 8 /* a result record */

static const mxop_host_t *host;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int wait_ms(mxop_ctx_t *ctx)
{
    const char *v = host->attr_get(ctx, "wait_ms");
    return v != NULL ? atoi(v) : 300;
}

/* ---- protobuf by hand: the library links nothing ---- */

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static void put_hdr_kind(uint8_t *p, uint32_t len, uint8_t kind);

static void put_hdr(uint8_t *p, uint32_t len)
{
    put_hdr_kind(p, len, KIND_CALL_RESULT);
}

static void put_hdr_kind(uint8_t *p, uint32_t len, uint8_t kind)
{
    const uint32_t magic = 0x504F584Du; /* "MXOP", wire/frame.h */
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(magic >> (8 * i));
    p[4] = 1; /* frame version */
    p[5] = 0;
    p[6] = kind;
    p[7] = 0;
    for (int i = 0; i < 4; i++)
        p[8 + i] = (uint8_t)(len >> (8 * i));
}

/* A CallResult {id, status} (a status of 0 is left out, as protobuf does). */
static size_t result_payload(uint8_t *p, uint64_t id, int32_t status)
{
    size_t n = 0;
    p[n++] = 0x08; /* field 1, varint */
    n += put_varint(p + n, id);
    if (status != 0) {
        p[n++] = 0x10; /* field 2, varint; a negative int32 takes ten bytes */
        n += put_varint(p + n, (uint64_t)(int64_t)status);
    }
    return n;
}

/* ---- the data channel ---- */

static void sock_send(const void *p, size_t n)
{
    send(DATA_FD, p, n, MSG_NOSIGNAL);
}

static int copy(const mxop_tensor_t *in, mxop_tensor_t *out)
{
    if (out[0].req != MXOP_REQ_NULL && in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    return 0;
}

static int sock_junk(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                     mxop_tensor_t *out)
{
    (void)n_in, (void)n_out;
    static const char junk[] = "debug: op finished, 16 elements\n";
    sock_send(junk, sizeof(junk) - 1);
    sleep_ms(wait_ms(ctx));
    return copy(in, out);
}

static int sock_huge_len(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    (void)n_in, (void)n_out;
    uint8_t hdr[12];
    put_hdr(hdr, 1u << 20);
    sock_send(hdr, sizeof(hdr));
    sleep_ms(wait_ms(ctx));
    return copy(in, out);
}

static int sock_future_id(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    (void)n_in, (void)n_out;
    uint8_t f[64];
    size_t n = result_payload(f + 12, UINT64_MAX, 0);
    put_hdr(f, (uint32_t)n);
    sock_send(f, 12 + n);
    sleep_ms(wait_ms(ctx));
    return copy(in, out);
}

static int sock_no_call(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    (void)n_in, (void)n_out;
    uint8_t f[128];
    size_t n = result_payload(f + 12, 0, -1004);
    static const char why[] = "bad frame in the mailbox (forged)";
    f[12 + n++] = 0x1a; /* field 3, the message */
    f[12 + n++] = (uint8_t)(sizeof(why) - 1);
    memcpy(f + 12 + n, why, sizeof(why) - 1);
    n += sizeof(why) - 1;
    put_hdr(f, (uint32_t)n);
    sock_send(f, 12 + n);
    sleep_ms(wait_ms(ctx));
    return copy(in, out);
}

/* ---- the mailbox ---- */

static mxop__mbox_shared_t *find_mailbox(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return NULL;
    char line[512];
    unsigned long lo = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "mxop-mailbox") != NULL && strstr(line, "rw") != NULL) {
            sscanf(line, "%lx-", &lo);
            break;
        }
    }
    fclose(f);
    return (mxop__mbox_shared_t *)lo;
}

/* Writes 1 into every eventfd of the process: the mailbox's bells among them. */
static void ring_all(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strstr(target, "eventfd") != NULL) {
            uint64_t one = 1;
            if (write(atoi(e->d_name), &one, sizeof(one)) < 0) {
                /* a bell the sandbox keeps: the client finds the frame anyway at its next look */
            }
        }
    }
    closedir(d);
}

/*
 * The id of the call in the request slot: at byte 8 of a call record
 * (frame kind 7, shm/call_record.h), else its protobuf payload's field 1.
 */
static uint64_t call_in_flight(const mxop__mbox_shared_t *sh)
{
    const uint8_t *p = sh->req.data + 12;
    if (sh->req.data[6] == KIND_CALL_REC) {
        uint64_t id = 0;
        for (int i = 0; i < 8; i++)
            id |= (uint64_t)p[8 + i] << (8 * i);
        return id;
    }
    if (p[0] != 0x08)
        return 0;
    uint64_t v = 0;
    for (int i = 0, shift = 0; i < 10; i++, shift += 7) {
        v |= (uint64_t)(p[1 + i] & 0x7f) << shift;
        if (!(p[1 + i] & 0x80))
            break;
    }
    return v;
}

/* Publishes frame[len] (len as the slot says it) in the reply slot, as a worker would. */
static void publish(mxop__mbox_shared_t *sh, const uint8_t *frame, size_t n, uint32_t len)
{
    mxop__mbox_slot_t *s = &sh->rep;
    uint32_t seq = atomic_load(&s->seq) & ~1u;
    atomic_store(&s->seq, seq + 1);
    memcpy(s->data, frame, n);
    atomic_store(&s->len, len);
    atomic_store(&s->seq, seq + 2);
    ring_all();
}

enum mbox_kind {
    JUNK,
    SLOT_LEN,
    HDR_LEN,
    FUTURE_ID,
    BAD_STATUS,
    BAD_INFER,
    REC_SHORT,
    REC_VERSION,
    REC_FUTURE_ID,
    REC_BAD_STATUS
};

/* A result record's fixed part (shm/call_record.h): version, status, id, state, little-endian. */
static size_t result_record(uint8_t *p, uint32_t version, int32_t status, uint64_t id)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(version >> (8 * i));
        p[4 + i] = (uint8_t)((uint32_t)status >> (8 * i));
    }
    for (int i = 0; i < 8; i++) {
        p[8 + i] = (uint8_t)(id >> (8 * i));
        p[16 + i] = 0;
    }
    return 24;
}

static uint8_t frame[MXOP__MBOX_SLOT_BYTES];

static void mbox_garbage(mxop_ctx_t *ctx, enum mbox_kind k)
{
    mxop__mbox_shared_t *sh = find_mailbox();
    if (sh == NULL)
        return; /* the socket path: no mailbox */
    size_t n = 0;
    switch (k) {
    case JUNK:
        memcpy(frame, "not a frame at all, but long enough", 35);
        publish(sh, frame, 35, 35);
        break;
    case SLOT_LEN:
        n = result_payload(frame + 12, call_in_flight(sh), 0);
        put_hdr(frame, (uint32_t)n);
        publish(sh, frame, 12 + n, UINT32_MAX);
        break;
    case HDR_LEN:
        n = result_payload(frame + 12, call_in_flight(sh), 0);
        put_hdr(frame, 60000);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    case FUTURE_ID:
        n = result_payload(frame + 12, UINT64_MAX, 0);
        put_hdr(frame, (uint32_t)n);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    case BAD_STATUS: {
        uint8_t *p = frame + 12;
        n = result_payload(p, call_in_flight(sh), -77777);
        /* field 3, the message: escapes, bytes that are no UTF-8, a NUL, and length */
        static const char head[] = "\x1b[2J\x1b]0;owned\x07 evil \xff\xfe\xc3 end";
        size_t mlen = 60000;
        p[n++] = 0x1a;
        n += put_varint(p + n, mlen);
        memset(p + n, 'A', mlen);
        memcpy(p + n, head, sizeof(head) - 1);
        p[n + 59000] = '\0'; /* C sees the message end here */
        p[n + 59001] = '\x1b';
        n += mlen;
        put_hdr(frame, (uint32_t)n);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    }
    case REC_SHORT:
        n = result_record(frame + 12, 1, 0, call_in_flight(sh)) - 14;
        put_hdr_kind(frame, (uint32_t)n, KIND_RESULT_REC);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    case REC_VERSION:
        n = result_record(frame + 12, 77, 0, call_in_flight(sh));
        put_hdr_kind(frame, (uint32_t)n, KIND_RESULT_REC);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    case REC_FUTURE_ID:
        n = result_record(frame + 12, 1, 0, UINT64_MAX);
        put_hdr_kind(frame, (uint32_t)n, KIND_RESULT_REC);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    case REC_BAD_STATUS: {
        /* The message runs to the end of the frame: escapes, bytes that are no UTF-8, a NUL. */
        static const char head[] = "\x1b[2J\x1b]0;owned\x07 evil \xff\xfe\xc3 end";
        size_t mlen = 60000;
        uint8_t *p = frame + 12;
        n = result_record(p, 1, -77777, call_in_flight(sh));
        memset(p + n, 'A', mlen);
        memcpy(p + n, head, sizeof(head) - 1);
        p[n + 59000] = '\0';
        p[n + 59001] = '\x1b';
        n += mlen;
        put_hdr_kind(frame, (uint32_t)n, KIND_RESULT_REC);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    }
    case BAD_INFER: {
        uint8_t *p = frame + 12;
        n = result_payload(p, call_in_flight(sh), 0);
        p[n++] = 0x22; /* field 4, out_dtypes, packed */
        p[n++] = 2;
        n += put_varint(p + n, 999);
        p[n++] = 0x2a; /* field 5, out_shapes: one Shape {dims: [-1]} */
        uint8_t dims[16];
        size_t dn = put_varint(dims, (uint64_t)(int64_t)-1);
        p[n++] = (uint8_t)(2 + dn);
        p[n++] = 0x0a; /* Shape field 1, packed */
        p[n++] = (uint8_t)dn;
        memcpy(p + n, dims, dn);
        n += dn;
        put_hdr(frame, (uint32_t)n);
        publish(sh, frame, 12 + n, (uint32_t)(12 + n));
        break;
    }
    }
    sleep_ms(wait_ms(ctx));
}

#define MBOX_OP(fn, kind)                                                                          \
    static int fn(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,                   \
                  mxop_tensor_t *out)                                                              \
    {                                                                                              \
        (void)n_in, (void)n_out;                                                                   \
        mbox_garbage(ctx, kind);                                                                   \
        return copy(in, out);                                                                      \
    }

MBOX_OP(mbox_junk, JUNK)
MBOX_OP(mbox_slot_len, SLOT_LEN)
MBOX_OP(mbox_hdr_len, HDR_LEN)
MBOX_OP(mbox_future_id, FUTURE_ID)
MBOX_OP(mbox_bad_status, BAD_STATUS)
MBOX_OP(mbox_rec_short, REC_SHORT)
MBOX_OP(mbox_rec_version, REC_VERSION)
MBOX_OP(mbox_rec_future_id, REC_FUTURE_ID)
MBOX_OP(mbox_rec_bad_status, REC_BAD_STATUS)

static int slow_copy(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                     mxop_tensor_t *out)
{
    (void)n_in, (void)n_out;
    sleep_ms(wait_ms(ctx));
    return copy(in, out);
}

static int bad_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                           mxop_shape_t *out)
{
    (void)n_in, (void)n_out;
    mbox_garbage(ctx, BAD_INFER);
    out[0] = in[0];
    return 0;
}

static int bad_infer_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)n_out;
    return copy(in, out);
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        int (*forward)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {
        {"sock_junk", sock_junk},
        {"sock_huge_len", sock_huge_len},
        {"sock_future_id", sock_future_id},
        {"sock_no_call", sock_no_call},
        {"mbox_junk", mbox_junk},
        {"mbox_slot_len", mbox_slot_len},
        {"mbox_hdr_len", mbox_hdr_len},
        {"mbox_future_id", mbox_future_id},
        {"mbox_bad_status", mbox_bad_status},
        {"mbox_rec_short", mbox_rec_short},
        {"mbox_rec_version", mbox_rec_version},
        {"mbox_rec_future_id", mbox_rec_future_id},
        {"mbox_rec_bad_status", mbox_rec_bad_status},
        {"slow_copy", slow_copy},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = "answers with garbage (tests/plugins/garbage_reply.c)",
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].forward,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    mxop_op_def_t infer = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "mbox_bad_infer",
        .description = "infers with garbage (tests/plugins/garbage_reply.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .infer_shape = bad_infer_shape,
        .forward = bad_infer_forward,
    };
    return host->register_op(ctx, &infer);
}
