/*
 * wire/pbwalk.h - walking a protobuf message in its wire form, guided by
 * its descriptors, without decoding it.
 *
 * Two things only the wire form shows.  How many fields (known or not) a
 * frame holds and how deep it nests, before the decoder builds a record
 * for each: the daemon bounds control requests with them.  And a NUL byte
 * inside a string: protobuf-c hands strings over NUL-terminated, so
 * "alpha\0junk" decodes as "alpha" and the rest is silently lost; the
 * daemon refuses such requests, naming the field.  (The data plane needs
 * no walk: its attributes are `bytes`, decoded with their length.)
 */
#ifndef MXOP_WIRE_PBWALK_H
#define MXOP_WIRE_PBWALK_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* A field met by the walk, valid only during the callback. */
typedef struct mxop__pbwalk_at {
    const ProtobufCFieldDescriptor *field; /* NULL: a field its message's descriptor lacks */
    uint32_t number;
    uint32_t depth;   /* of the message holding it: 1 for the top message's fields */
    const char *path; /* the holding message: "Request.load_library" */
} mxop__pbwalk_at_t;

/* What stopped a walk, besides a callback's own code (callbacks return negative codes). */
enum {
    MXOP__PBWALK_OK = 0,
    MXOP__PBWALK_BAD_KEY = 1,   /* a field key that is no varint, or field number 0 / too big */
    MXOP__PBWALK_BAD_FIELD = 2, /* a value cut short, or an unknown wire type */
    MXOP__PBWALK_TOO_DEEP = 3,  /* a message nested deeper than max_depth */
};

typedef struct mxop__pbwalk {
    uint32_t max_depth; /* the top message is depth 1 */
    /* Every field, before it is skipped or entered; nonzero stops the walk with it. */
    int (*on_field)(void *ctx, const mxop__pbwalk_at_t *at);
    /* A known string field's bytes; nonzero stops the walk with it. */
    int (*on_string)(void *ctx, const mxop__pbwalk_at_t *at, const uint8_t *s, size_t len);
    void *ctx;
    /* Where a MXOP__PBWALK_* stop happened: the message's path, the field's
     * number (BAD_FIELD) and the depth reached (TOO_DEEP). */
    char where[160];
    uint32_t where_number;
    uint32_t where_depth;
} mxop__pbwalk_t;

/*
 * Walks `buf` as a message of type `desc` named `root` in paths.  Returns
 * 0, a MXOP__PBWALK_* code, or the nonzero code a callback stopped it with.
 */
int mxop__pbwalk(mxop__pbwalk_t *w, const ProtobufCMessageDescriptor *desc, const char *root,
                 const uint8_t *buf, size_t len);

#endif /* MXOP_WIRE_PBWALK_H */
