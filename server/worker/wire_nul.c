/*
 * server/worker/wire_nul.c - finding a NUL byte inside a string field of a
 * call, in its wire form.
 *
 * protobuf-c hands strings over NUL-terminated, so "alpha\0junk" decodes
 * as "alpha" and the rest is silently lost; only the wire form shows it.
 * A call's strings are its attributes' keys and values: the walk runs only
 * for calls that carry attributes, over the few hundred bytes of the call
 * (the tensors' data never travels in it).  mxop__call_nul_refused turns
 * a find into the call's MXOP_EATTR result, for the data channel and the
 * call fuzz target alike.
 */
#include <string.h>

#include "common/util.h"
#include "server/worker/worker.h"

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Walks one message; true when a NUL was found (then *where is filled). */
static bool walk(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, int depth,
                 mxop__wire_nul_t *where)
{
    const uint8_t *p = buf;
    const uint8_t *end = buf + len;
    /* Occurrences of each repeated message field seen so far, for the index in messages. */
    uint32_t seen_num[8] = {0};
    size_t seen_cnt[8] = {0};
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key))
            return false; /* malformed: the decoder has already refused it */
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3));
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v))
                return false;
            break;
        case 1:
            if (end - p < 8)
                return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return false;
            p += 4;
            break;
        case 2: {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return false;
            if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 8) {
                size_t index = 0;
                for (int k = 0; k < 8; k++) {
                    if (seen_num[k] == f->id || seen_num[k] == 0) {
                        seen_num[k] = f->id;
                        index = seen_cnt[k]++;
                        break;
                    }
                }
                if (walk(f->descriptor, p, (size_t)v, depth + 1, where)) {
                    if (depth == 1) {
                        /* The body's field (Invoke.attrs): say which of them. */
                        where->parent = f->name;
                        where->index = index;
                    }
                    return true;
                }
            } else if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING) {
                const uint8_t *nul = memchr(p, '\0', (size_t)v);
                if (nul != NULL) {
                    where->field = f->name;
                    where->offset = (size_t)(nul - p);
                    where->length = (size_t)v;
                    return true;
                }
            }
            p += v;
            break;
        }
        default: return false;
        }
    }
    return false;
}

bool mxop__wire_find_nul(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                         mxop__wire_nul_t *where)
{
    memset(where, 0, sizeof(*where));
    where->parent = "";
    return walk(desc, buf, len, 0, where);
}

/* The attributes of a call's body (Invoke, Infer, StateCreate), with its op. */
static size_t call_attrs(const Mxop__Call *call, Mxop__Attr ***attrs, uint32_t *op)
{
    switch (call->body_case) {
    case MXOP__CALL__BODY_INVOKE:
        *attrs = call->invoke->attrs;
        *op = call->invoke->op;
        return call->invoke->n_attrs;
    case MXOP__CALL__BODY_INFER:
        *attrs = call->infer->attrs;
        *op = call->infer->op;
        return call->infer->n_attrs;
    case MXOP__CALL__BODY_STATE_CREATE:
        *attrs = call->state_create->attrs;
        *op = call->state_create->op;
        return call->state_create->n_attrs;
    default: return 0;
    }
}

/*
 * A NUL inside an attribute's key or value would be cut off silently by
 * the decoder ("alpha\0junk" read as "alpha"): such a call is refused with
 * MXOP_EATTR naming the op and the key, before any callback.
 */
bool mxop__call_nul_refused(const Mxop__Call *call, const uint8_t *payload, size_t len,
                            Mxop__CallResult *res)
{
    static char m[384];
    Mxop__Attr **attrs = NULL;
    uint32_t op_index = 0;
    size_t n = call_attrs(call, &attrs, &op_index);
    mxop__wire_nul_t w;
    if (n == 0 || !mxop__wire_find_nul(&mxop__call__descriptor, payload, len, &w))
        return false;
    const mxop__worker_op_t *op = op_index < mxop__op_count() ? mxop__op_get(op_index) : NULL;
    const char *key = strcmp(w.parent, "attrs") == 0 && w.index < n && attrs[w.index]->key != NULL
                          ? attrs[w.index]->key
                          : "?";
    mxop__fmt(m, sizeof(m),
              "op '%s': attribute '%s' (attribute %zu of the call) holds a NUL byte in its %s, at "
              "byte %zu of %zu; attribute keys and values may not contain NUL",
              op != NULL ? op->name : "?", key, w.index, w.field, w.offset, w.length);
    res->id = call->id;
    res->status = MXOP_EATTR;
    res->message = m;
    return true;
}
