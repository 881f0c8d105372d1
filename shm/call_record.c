/*
 * shm/call_record.c - encoding and decoding the mailbox's fixed-layout
 * call and result records (see call_record.h).
 */
#include "shm/call_record.h"

#include <stddef.h>
#include <string.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "shm/mailbox.h"
#include "wire/frame.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "records are little-endian, written and read as the host's structs");
_Static_assert(sizeof(mxop__rec_tensor_t) == 88, "the record layout of docs/protocol.md");
_Static_assert(sizeof(mxop__call_rec_t) == 24, "the record layout of docs/protocol.md");
_Static_assert(sizeof(mxop__result_rec_t) == 24, "the record layout of docs/protocol.md");
_Static_assert(MXOP__REC_MAX_TENSORS <= UINT8_MAX, "counts are bytes");
/* Why the heads are as small as they are: see shm/mailbox.h, mxop__mbox_slot_t.data. */
_Static_assert(offsetof(mxop__mbox_slot_t, data) + MXOP__FRAME_HDR + sizeof(mxop__call_rec_t) == 64,
               "a call record's head ends the control words' cache line");
_Static_assert(offsetof(mxop__mbox_slot_t, data) + MXOP__FRAME_HDR + sizeof(mxop__result_rec_t) ==
                   64,
               "a result record's head ends the control words' cache line");

size_t mxop__call_rec_size(const Mxop__Call *call)
{
    if (call->body_case != MXOP__CALL__BODY_INVOKE || call->invoke == NULL)
        return 0;
    const Mxop__Invoke *iv = call->invoke;
    if (iv->n_attrs != 0 || iv->n_inputs > MXOP__REC_MAX_TENSORS ||
        iv->n_outputs > MXOP__REC_MAX_TENSORS)
        return 0;
    for (size_t i = 0; i < iv->n_inputs + iv->n_outputs; i++) {
        const Mxop__TensorDesc *d =
            i < iv->n_inputs ? iv->inputs[i] : iv->outputs[i - iv->n_inputs];
        if (d->n_strides != 0 || d->n_shape > MXOP_MAX_DIMS)
            return 0;
    }
    size_t extra = iv->state != 0 || iv->seed != 0 ? 2 * sizeof(uint64_t) : 0;
    return sizeof(mxop__call_rec_t) + extra +
           (iv->n_inputs + iv->n_outputs) * sizeof(mxop__rec_tensor_t);
}

static void put_tensor(uint8_t *dst, const Mxop__TensorDesc *d)
{
    mxop__rec_tensor_t t;
    memset(&t, 0, sizeof t);
    t.offset = d->offset;
    t.region = d->region;
    t.dtype = d->dtype;
    t.req = d->req;
    t.ndim = (uint32_t)d->n_shape;
    if (d->n_shape > 0)
        memcpy(t.shape, d->shape, d->n_shape * sizeof(int64_t));
    memcpy(dst, &t, sizeof t);
}

void mxop__call_rec_encode(uint8_t *dst, const Mxop__Call *call)
{
    const Mxop__Invoke *iv = call->invoke;
    int state = iv->state != 0 || iv->seed != 0;
    mxop__call_rec_t h = {
        .version = MXOP__CALL_REC_VERSION,
        .flags = (uint8_t)((iv->backward ? MXOP__CALL_REC_BACKWARD : 0u) |
                           (state ? MXOP__CALL_REC_STATE : 0u)),
        .n_in = (uint8_t)iv->n_inputs,
        .n_out = (uint8_t)iv->n_outputs,
        .op = iv->op,
        .id = call->id,
        .deadline_ms = iv->deadline_ms,
    };
    memcpy(dst, &h, sizeof h);
    uint8_t *at = dst + sizeof h;
    if (state) {
        memcpy(at, &iv->state, sizeof iv->state);
        memcpy(at + sizeof iv->state, &iv->seed, sizeof iv->seed);
        at += 2 * sizeof(uint64_t);
    }
    for (size_t i = 0; i < iv->n_inputs; i++, at += sizeof(mxop__rec_tensor_t))
        put_tensor(at, iv->inputs[i]);
    for (size_t j = 0; j < iv->n_outputs; j++, at += sizeof(mxop__rec_tensor_t))
        put_tensor(at, iv->outputs[j]);
}

/* Fills desc from the record's tensor at p; refuses a rank the descriptor's storage cannot hold. */
static int get_tensor(const uint8_t *p, Mxop__TensorDesc *d, int64_t *shape, const char *what,
                      size_t i, char *msg, size_t msglen)
{
    mxop__rec_tensor_t t;
    memcpy(&t, p, sizeof t);
    if (t.ndim > MXOP_MAX_DIMS) {
        mxop__fmt(msg, msglen, "call record: %s %zu has %u dimensions; a record holds at most %d",
                  what, i, t.ndim, MXOP_MAX_DIMS);
        return MXOP_EPROTOCOL;
    }
    mxop__tensor_desc__init(d);
    d->region = t.region;
    d->offset = t.offset;
    d->dtype = t.dtype;
    d->req = t.req;
    d->n_shape = t.ndim;
    memcpy(shape, t.shape, sizeof t.shape);
    d->shape = shape;
    return 0;
}

int mxop__call_rec_decode(const uint8_t *p, size_t len, mxop__call_rec_view_t *v, char *msg,
                          size_t msglen)
{
    mxop__call_rec_t h;
    mxop__call__init(&v->call);
    if (len >= offsetof(mxop__call_rec_t, id) + sizeof h.id)
        memcpy(&v->call.id, p + offsetof(mxop__call_rec_t, id), sizeof v->call.id);
    if (len < sizeof h) {
        mxop__fmt(msg, msglen, "call record of %zu bytes; its fixed part alone has %zu", len,
                  sizeof h);
        return MXOP_EPROTOCOL;
    }
    memcpy(&h, p, sizeof h);
    if (h.version != MXOP__CALL_REC_VERSION) {
        mxop__fmt(msg, msglen, "call record version %u; this worker reads version %u", h.version,
                  MXOP__CALL_REC_VERSION);
        return MXOP_EVERSION;
    }
    if ((h.flags & ~(MXOP__CALL_REC_BACKWARD | MXOP__CALL_REC_STATE)) != 0 || h.pad != 0) {
        mxop__fmt(msg, msglen, "call record: flags 0x%x and pad %u have bits no record has",
                  h.flags, h.pad);
        return MXOP_EPROTOCOL;
    }
    if (h.n_in > MXOP__REC_MAX_TENSORS || h.n_out > MXOP__REC_MAX_TENSORS) {
        mxop__fmt(msg, msglen,
                  "call record: %u inputs and %u outputs; a record holds at most %d each", h.n_in,
                  h.n_out, MXOP__REC_MAX_TENSORS);
        return MXOP_EPROTOCOL;
    }
    size_t extra = (h.flags & MXOP__CALL_REC_STATE) ? 2 * sizeof(uint64_t) : 0;
    size_t want = sizeof h + extra + ((size_t)h.n_in + h.n_out) * sizeof(mxop__rec_tensor_t);
    if (len != want) {
        mxop__fmt(msg, msglen,
                  "call record of %zu bytes; its flags and %u inputs and %u outputs make %zu", len,
                  h.n_in, h.n_out, want);
        return MXOP_EPROTOCOL;
    }
    mxop__invoke__init(&v->invoke);
    const uint8_t *at = p + sizeof h;
    if (extra != 0) {
        memcpy(&v->invoke.state, at, sizeof v->invoke.state);
        memcpy(&v->invoke.seed, at + sizeof v->invoke.state, sizeof v->invoke.seed);
        at += extra;
    }
    for (size_t i = 0; i < h.n_in; i++, at += sizeof(mxop__rec_tensor_t)) {
        int rc = get_tensor(at, &v->desc[i], v->shape[i], "input", i, msg, msglen);
        if (rc != 0)
            return rc;
        v->in_ptr[i] = &v->desc[i];
    }
    for (size_t j = 0; j < h.n_out; j++, at += sizeof(mxop__rec_tensor_t)) {
        size_t k = MXOP__REC_MAX_TENSORS + j;
        int rc = get_tensor(at, &v->desc[k], v->shape[k], "output", j, msg, msglen);
        if (rc != 0)
            return rc;
        v->out_ptr[j] = &v->desc[k];
    }
    v->invoke.op = h.op;
    v->invoke.backward = (h.flags & MXOP__CALL_REC_BACKWARD) != 0;
    v->invoke.deadline_ms = h.deadline_ms;
    v->invoke.n_inputs = h.n_in;
    v->invoke.inputs = h.n_in ? v->in_ptr : NULL;
    v->invoke.n_outputs = h.n_out;
    v->invoke.outputs = h.n_out ? v->out_ptr : NULL;
    v->call.body_case = MXOP__CALL__BODY_INVOKE;
    v->call.invoke = &v->invoke;
    return 0;
}

size_t mxop__result_rec_size(const Mxop__CallResult *r)
{
    if (r->n_out_dtypes != 0 || r->n_out_shapes != 0)
        return 0;
    return sizeof(mxop__result_rec_t) + (r->message != NULL ? strlen(r->message) : 0);
}

void mxop__result_rec_encode(uint8_t *dst, const Mxop__CallResult *r, size_t size)
{
    mxop__result_rec_t h = {
        .version = MXOP__RESULT_REC_VERSION, .status = r->status, .id = r->id, .state = r->state};
    memcpy(dst, &h, sizeof h);
    if (size > sizeof h)
        memcpy(dst + sizeof h, r->message, size - sizeof h);
}

int mxop__result_rec_decode(const uint8_t *p, size_t len, Mxop__CallResult *r, char *text,
                            size_t cap, char *msg, size_t msglen)
{
    mxop__result_rec_t h;
    if (len < sizeof h) {
        mxop__fmt(msg, msglen, "result record of %zu bytes; its fixed part alone has %zu", len,
                  sizeof h);
        return MXOP_EPROTOCOL;
    }
    memcpy(&h, p, sizeof h);
    if (h.version != MXOP__RESULT_REC_VERSION) {
        mxop__fmt(msg, msglen, "result record version %u; this client reads version %u", h.version,
                  MXOP__RESULT_REC_VERSION);
        return MXOP_EVERSION;
    }
    size_t n = len - sizeof h;
    if (cap < n + 1) {
        mxop__fmt(msg, msglen, "result record with a message of %zu bytes (room for %zu)", n,
                  cap > 0 ? cap - 1 : 0);
        return MXOP_EPROTOCOL;
    }
    memcpy(text, p + sizeof h, n);
    text[n] = '\0';
    mxop__call_result__init(r);
    r->id = h.id;
    r->status = h.status;
    r->state = h.state;
    r->message = text;
    return 0;
}
