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
#include "wire/pbwalk.h"

/* The first string holding a NUL stops the walk (a code no walk returns of
 * itself: they are positive): where it is goes to ctx. */
enum { FOUND = -1 };

static int find_nul(void *ctx, const mxop__pbwalk_at_t *at, const uint8_t *s, size_t len)
{
    mxop__wire_nul_t *where = ctx;
    const uint8_t *nul = memchr(s, '\0', len);
    if (nul == NULL)
        return 0;
    where->field = at->field->name;
    where->offset = (size_t)(nul - s);
    where->length = len;
    /* The repeated field of the call's body that holds it (Invoke.attrs), and which of them. */
    for (const mxop__pbwalk_at_t *a = at->parent; a != NULL; a = a->parent) {
        if (a->depth == 2 && a->field != NULL) {
            where->parent = a->field->name;
            where->index = a->index;
        }
    }
    return FOUND;
}

bool mxop__wire_find_nul(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                         mxop__wire_nul_t *where)
{
    memset(where, 0, sizeof(*where));
    where->parent = "";
    /* A malformed call stops the walk too: the decoder has refused it already. */
    mxop__pbwalk_t w = {.max_depth = 8, .on_string = find_nul, .ctx = where};
    return mxop__pbwalk(&w, desc, "Call", buf, len) == FOUND;
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
