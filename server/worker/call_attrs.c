/*
 * server/worker/call_attrs.c - a call's attributes, from the decoded
 * message to the C strings its op reads.
 *
 * Attribute keys and values are `bytes` on the wire (proto/common.proto),
 * so the one decode of the call gives each with its true length.  A NUL
 * inside one cannot pass on to the op, whose readers take C strings
 * ("alpha\0junk" would read as "alpha", the rest silently lost): the call
 * is refused with MXOP_EATTR naming the op, the attribute and the byte.
 * Otherwise each key and value is copied, NUL-terminated, into storage
 * that lasts until the next call; memccpy finds a NUL and copies in the
 * same pass over the bytes.
 */
#include <string.h>

#include "common/util.h"
#include "server/worker/worker.h"
#include "wire/frame.h"

/*
 * The keys and values of the current call, each NUL-terminated.  Every
 * byte of them came in one frame, where each attribute also took at least
 * two bytes of framing (its field key and length), as many as the two
 * terminators: a call that fits a frame fits here, and the hot path
 * allocates nothing.
 */
static char text[MXOP__FRAME_MAX];

/* The attributes of a call's body (Invoke, Infer, StateCreate), with its op. */
static size_t body_attrs(const Mxop__Call *call, Mxop__Attr ***attrs, uint32_t *op)
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
 * Copies b into *at, NUL-terminated, and moves *at past it; or, when b
 * holds a NUL, returns false with its offset in *nul.  `keep` false only
 * looks for the NUL (an attribute past MXOP__W_MAX_ATTRS, which the call
 * set-up refuses by count).
 */
static bool take(const ProtobufCBinaryData *b, bool keep, char **at, size_t *nul)
{
    const uint8_t *found = NULL;
    if (!keep) {
        found = b->len > 0 ? memchr(b->data, '\0', b->len) : NULL;
    } else if (b->len > 0) {
        char *end = memccpy(*at, b->data, '\0', b->len);
        found = end != NULL ? b->data + (end - 1 - *at) : NULL;
    }
    if (found != NULL) {
        *nul = (size_t)(found - b->data);
        return false;
    }
    if (keep) {
        (*at)[b->len] = '\0';
        *at += b->len + 1;
    }
    return true;
}

static const char *op_name(uint32_t index)
{
    const mxop__worker_op_t *op = index < mxop__op_count() ? mxop__op_get(index) : NULL;
    return op != NULL ? op->name : "?";
}

/* The MXOP_EATTR message for a NUL at byte `nul` of attribute i's key or value. */
static int refuse_nul(uint32_t op, const Mxop__Attr *a, size_t i, bool in_key, size_t nul,
                      char *msg, size_t msglen)
{
    /* The key as far as a C string would show it: up to its NUL, if that is where it is. */
    size_t klen = a->key.len;
    const uint8_t *knul = klen > 0 ? memchr(a->key.data, '\0', klen) : NULL;
    if (knul != NULL)
        klen = (size_t)(knul - a->key.data);
    mxop__fmt(msg, msglen,
              "op '%s': attribute '%.*s' (attribute %zu of the call) holds a NUL byte in its %s, "
              "at byte %zu of %zu; attribute keys and values may not contain NUL",
              op_name(op), (int)(klen < 100 ? klen : 100),
              klen > 0 ? (const char *)a->key.data : "", i, in_key ? "key" : "value", nul,
              in_key ? a->key.len : a->value.len);
    return MXOP_EATTR;
}

int mxop__call_attrs_read(const Mxop__Call *call, mxop__call_attrs_t *out, char *msg, size_t msglen)
{
    Mxop__Attr **attrs = NULL;
    uint32_t op = 0;
    size_t n = body_attrs(call, &attrs, &op);
    char *at = text;
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        const Mxop__Attr *a = attrs[i];
        bool keep = i < MXOP__W_MAX_ATTRS;
        size_t nul = 0;
        /* Only a call unpacked past the frame limit can be longer (a direct caller's). */
        if (keep && a->key.len + a->value.len + 2 > (size_t)(text + sizeof(text) - at)) {
            mxop__fmt(msg, msglen, "op '%s': the call's attributes hold more than %zu bytes",
                      op_name(op), sizeof(text));
            return MXOP_EATTR;
        }
        if (keep)
            out->keys[i] = at;
        if (!take(&a->key, keep, &at, &nul))
            return refuse_nul(op, a, i, true, nul, msg, msglen);
        if (keep)
            out->vals[i] = at;
        if (!take(&a->value, keep, &at, &nul))
            return refuse_nul(op, a, i, false, nul, msg, msglen);
    }
    return 0;
}
