/*
 * shm/call_record.h - the fixed-layout call and result records of the
 * mailbox's common case (docs/protocol.md, "Call and result records").
 *
 * Most calls through the mailbox are an Invoke without attributes or
 * strides, answered by a status and perhaps a message.  Packing such a
 * call with protobuf-c and unpacking it on the other side, then the same
 * again for its result, cost more than everything else mxop does for a
 * null op.  So these calls travel as records of fixed layout, written
 * straight into the mailbox slot under frame kinds of their own
 * (MXOP__KIND_CALL_REC, MXOP__KIND_RESULT_REC), and everything else stays
 * protobuf.
 *
 * A record is only a different spelling of the same message: the decoders
 * here turn one into the very in-memory structs protobuf-c would have
 * built (an Mxop__Call, an Mxop__CallResult), and the reader then runs the
 * one validator it runs on a decoded protobuf frame (the worker's
 * mxop__run_call with its descriptor, arity and region checks; the
 * client's result checks in client/result.c).  The decoders themselves
 * refuse only what those structs cannot hold: a wrong version or length,
 * counts beyond the record's storage, a flag that is not 0 or 1.
 *
 * Fields are little-endian and unaligned in the slot (the payload follows
 * a 12-byte frame header); they are read and written with memcpy.  The
 * reader decodes its private copy of the frame (shm/mailbox.h), never the
 * shared slot.
 */
#ifndef MXOP_SHM_CALL_RECORD_H
#define MXOP_SHM_CALL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "data.pb-c.h"
#include "mxop/types.h"

#define MXOP__CALL_REC_VERSION 1u
#define MXOP__RESULT_REC_VERSION 1u

/* The most inputs, and outputs, a call record carries (more: protobuf). */
#define MXOP__REC_MAX_TENSORS MXOP_MAX_TENSORS

/* One tensor descriptor of a call record (TensorDesc without strides): 88 bytes. */
typedef struct mxop__rec_tensor {
    uint64_t offset; /* bytes from the region's start */
    uint32_t region; /* the daemon's region id */
    int32_t dtype;   /* enum mxop_dtype */
    int32_t req;     /* outputs: enum mxop_req */
    uint32_t ndim;   /* at most MXOP_MAX_DIMS */
    int64_t shape[MXOP_MAX_DIMS];
} mxop__rec_tensor_t;

/*
 * A call record's head: 24 bytes, so that a call without tensors, state or
 * seed (the null op) and its frame header fill exactly what a mailbox slot
 * leaves of its control words' cache line (shm/mailbox.h).  When flags has
 * MXOP__CALL_REC_STATE, a u64 state and a u64 seed follow the head; then
 * n_in input tensors, then n_out output tensors.
 */
typedef struct mxop__call_rec {
    uint8_t version; /* MXOP__CALL_REC_VERSION */
    uint8_t flags;   /* MXOP__CALL_REC_BACKWARD | MXOP__CALL_REC_STATE, no other bit */
    uint8_t n_in;
    uint8_t n_out;
    uint32_t op; /* Invoke.op */
    uint64_t id; /* Call.id */
    uint32_t deadline_ms;
    uint32_t pad; /* 0 */
} mxop__call_rec_t;

/* Invoke.backward. */
#define MXOP__CALL_REC_BACKWARD 0x1u
/* Invoke.state and Invoke.seed (u64 each) follow the head; without it both are 0. */
#define MXOP__CALL_REC_STATE 0x2u

/* A result record's fixed part, followed by the message's bytes (no NUL): 24 bytes. */
typedef struct mxop__result_rec {
    uint32_t version; /* MXOP__RESULT_REC_VERSION */
    int32_t status;   /* CallResult.status */
    uint64_t id;      /* CallResult.id */
    uint64_t state;   /* CallResult.state */
} mxop__result_rec_t;

/*
 * The storage a decoded call record points into: the worker keeps one and
 * reuses it for every call (the hot path allocates nothing).
 */
typedef struct mxop__call_rec_view {
    Mxop__Call call;
    Mxop__Invoke invoke;
    Mxop__TensorDesc desc[2 * MXOP__REC_MAX_TENSORS];
    Mxop__TensorDesc *in_ptr[MXOP__REC_MAX_TENSORS];
    Mxop__TensorDesc *out_ptr[MXOP__REC_MAX_TENSORS];
    int64_t shape[2 * MXOP__REC_MAX_TENSORS][MXOP_MAX_DIMS];
} mxop__call_rec_view_t;

/**
 * The payload bytes `call` takes as a call record, or 0 when it cannot
 * travel as one (not an Invoke, attributes, strides, more tensors or
 * dimensions than a record holds): then it travels as protobuf.
 */
size_t mxop__call_rec_size(const Mxop__Call *call);

/** Writes `call` as a record at dst (mxop__call_rec_size(call) bytes, which must not be 0). */
void mxop__call_rec_encode(uint8_t *dst, const Mxop__Call *call);

/**
 * Decodes the call record p[len] into v (v->call then points into v).
 * Returns 0, or MXOP_EVERSION / MXOP_EPROTOCOL with what was wrong in
 * msg[msglen]; v->call.id holds the record's id whenever len reaches it
 * (0 otherwise), so that the refusal can name the call.  Checks only what
 * the structs cannot hold: the caller validates the call as a decoded
 * protobuf one.
 */
int mxop__call_rec_decode(const uint8_t *p, size_t len, mxop__call_rec_view_t *v, char *msg,
                          size_t msglen);

/**
 * The payload bytes `r` takes as a result record, or 0 when it cannot
 * travel as one (it carries inferred dtypes or shapes): then protobuf.
 */
size_t mxop__result_rec_size(const Mxop__CallResult *r);

/** Writes `r` as a record of `size` bytes (mxop__result_rec_size's, not 0) at dst. */
void mxop__result_rec_encode(uint8_t *dst, const Mxop__CallResult *r, size_t size);

/**
 * Decodes the result record p[len] into *r, its message copied into
 * text[cap] (cap at least len - sizeof(mxop__result_rec_t) + 1) and
 * NUL-terminated.  A message holding a NUL ends there, as protobuf-c's
 * string would for the client's printing.  Returns 0, or MXOP_EVERSION /
 * MXOP_EPROTOCOL with the reason in msg[msglen].
 */
int mxop__result_rec_decode(const uint8_t *p, size_t len, Mxop__CallResult *r, char *text,
                            size_t cap, char *msg, size_t msglen);

#endif /* MXOP_SHM_CALL_RECORD_H */
