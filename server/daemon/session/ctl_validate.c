/*
 * server/daemon/session/ctl_validate.c - the checks of a control request that need
 * neither a socket nor a session.
 *
 * They run in two steps.  Before decoding, the wire form is walked once
 * with the message descriptors: the number of fields (known or not) and
 * the nesting are bounded, so that one frame cannot make the decoder
 * build hundreds of thousands of unknown-field records while other
 * clients wait.  After decoding, what the decoded strings hide is looked
 * for in the wire form: protobuf-c hands strings over NUL-terminated, so
 * "alpha\0junk" would silently become "alpha"; such a string is refused
 * with the field named.  Then each body's form is checked.
 *
 * Kept free of the daemon's state so that a fuzzer can call it directly.
 */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/session/session.h"

const char *mxop__ctl_body_name(int body_case)
{
    switch (body_case) {
    case MXOP__REQUEST__BODY_HELLO: return "Hello";
    case MXOP__REQUEST__BODY_OPEN_SESSION: return "OpenSession";
    case MXOP__REQUEST__BODY_LOAD_LIBRARY: return "LoadLibrary";
    case MXOP__REQUEST__BODY_LIST_OPS: return "ListOps";
    case MXOP__REQUEST__BODY_REGISTER_REGION: return "RegisterRegion";
    case MXOP__REQUEST__BODY_RELEASE_REGION: return "ReleaseRegion";
    case MXOP__REQUEST__BODY_STATS: return "Stats";
    case MXOP__REQUEST__BODY_SHUTDOWN: return "Shutdown";
    case MXOP__REQUEST__BODY_REPLACE_WORKER: return "ReplaceWorker";
    case MXOP__REQUEST__BODY_RELOAD: return "Reload";
    case MXOP__REQUEST__BODY_SESSION_LIBRARIES: return "SessionLibraries";
    case MXOP__REQUEST__BODY_DAEMON_STATUS: return "DaemonStatus";
    case MXOP__REQUEST__BODY_DAEMON_STATS: return "DaemonStats";
    default: return "an empty request";
    }
}

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* What the walk found; `code` stays 0 while everything is acceptable. */
typedef struct walk {
    const mxop__limits_t *lim;
    bool check_strings;
    uint32_t fields;
    int code;
    char *msg;
    size_t msglen;
} walk_t;

/*
 * Walks one message of type `desc` (NULL: unknown, fields only counted).
 * `path` names it for messages ("Request.load_library").
 */
static void walk_msg(walk_t *w, const ProtobufCMessageDescriptor *desc, const uint8_t *buf,
                     size_t len, uint32_t depth, const char *path)
{
    if (depth > w->lim->max_depth) {
        w->code = MXOP_ELIMIT;
        mxop__fmt(w->msg, w->msglen,
                  "the request nests messages %u deep at %s, more than the limit of %u",
                  (unsigned)depth, path, (unsigned)w->lim->max_depth);
        return;
    }
    const uint8_t *p = buf;
    const uint8_t *end = buf + len;
    while (p < end && w->code == 0) {
        uint64_t key;
        uint64_t v;
        if (!read_varint(&p, end, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
            w->code = MXOP_EPROTOCOL;
            mxop__fmt(w->msg, w->msglen, "the request is malformed inside %s (bad field key)",
                      path);
            return;
        }
        if (++w->fields > w->lim->max_fields) {
            w->code = MXOP_ELIMIT;
            mxop__fmt(w->msg, w->msglen,
                      "the request has more than %u fields (known or not), the limit for one "
                      "request",
                      (unsigned)w->lim->max_fields);
            return;
        }
        uint32_t number = (uint32_t)(key >> 3);
        const ProtobufCFieldDescriptor *f =
            desc != NULL ? protobuf_c_message_descriptor_get_field(desc, number) : NULL;
        bool ok = true;
        switch (key & 7) {
        case 0: ok = read_varint(&p, end, &v); break;
        case 1:
            ok = end - p >= 8;
            p += ok ? 8 : 0;
            break;
        case 5:
            ok = end - p >= 4;
            p += ok ? 4 : 0;
            break;
        case 2:
            ok = read_varint(&p, end, &v) && v <= (uint64_t)(end - p);
            if (!ok)
                break;
            if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                char sub[128];
                mxop__fmt(sub, sizeof(sub), "%s.%s", path, f->name);
                walk_msg(w, f->descriptor, p, (size_t)v, depth + 1, sub);
            } else if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING && w->check_strings &&
                       memchr(p, '\0', (size_t)v) != NULL) {
                w->code = MXOP_EINVAL;
                mxop__fmt(w->msg, w->msglen,
                          "string field %s.%s holds a NUL byte (at byte %zu of %zu); strings "
                          "may not contain NUL",
                          path, f->name, (size_t)((const uint8_t *)memchr(p, '\0', v) - p),
                          (size_t)v);
            }
            p += v;
            break;
        default: ok = false; break;
        }
        if (!ok && w->code == 0) {
            w->code = MXOP_EPROTOCOL;
            mxop__fmt(w->msg, w->msglen, "the request is malformed inside %s (field %u)", path,
                      (unsigned)number);
        }
    }
}

/* The form of each body, beyond what decoding checked. */
static int check_body(const Mxop__Request *req, char *msg, size_t msglen)
{
    switch (req->body_case) {
    case MXOP__REQUEST__BODY_REGISTER_REGION: {
        const Mxop__RegisterRegion *rr = req->register_region;
        if (rr->size == 0) {
            mxop__fmt(msg, msglen, "RegisterRegion.size is 0");
            return MXOP_EINVAL;
        }
        if (rr->cuda_ipc_handle.len != 0 && rr->cuda_ipc_handle.len != MXOP__CUDA_IPC_BYTES) {
            mxop__fmt(msg, msglen,
                      "RegisterRegion.cuda_ipc_handle has %zu bytes, not %d (a CUDA IPC handle)",
                      rr->cuda_ipc_handle.len, MXOP__CUDA_IPC_BYTES);
            return MXOP_EINVAL;
        }
        if (rr->cuda_ipc_handle.len != 0 && rr->device < 0) {
            mxop__fmt(msg, msglen, "RegisterRegion.device is %d: not a CUDA device ordinal",
                      (int)rr->device);
            return MXOP_EINVAL;
        }
        if (rr->reserved_from > rr->size) {
            mxop__fmt(msg, msglen,
                      "RegisterRegion.reserved_from is %llu, past the region's %llu bytes",
                      (unsigned long long)rr->reserved_from, (unsigned long long)rr->size);
            return MXOP_EINVAL;
        }
        if (rr->reserved_from != 0 && rr->cuda_ipc_handle.len != 0) {
            mxop__fmt(msg, msglen,
                      "RegisterRegion.reserved_from is for a memfd; a device region has none");
            return MXOP_EINVAL;
        }
        return 0;
    }
    case MXOP__REQUEST__BODY_RELEASE_REGION:
        if (req->release_region->region == 0) {
            mxop__fmt(msg, msglen, "ReleaseRegion.region is 0, which names no region");
            return MXOP_EUNKNOWN_REGION;
        }
        return 0;
    case MXOP__REQUEST__BODY_LOAD_LIBRARY:
        if (req->load_library->path == NULL || req->load_library->path[0] == '\0') {
            mxop__fmt(msg, msglen, "LoadLibrary.path is empty");
            return MXOP_EINVAL;
        }
        return 0;
    case MXOP__REQUEST__BODY_RELOAD:
        if (req->reload->library == NULL || req->reload->library[0] == '\0') {
            mxop__fmt(msg, msglen, "Reload.library is empty");
            return MXOP_EINVAL;
        }
        return 0;
    default: return 0;
    }
}

int mxop__ctl_validate(const uint8_t *payload, size_t len, const mxop__limits_t *lim,
                       const Mxop__Request *req, char *msg, size_t msglen)
{
    static const mxop__limits_t defaults = MXOP__LIMITS_DEFAULT;
    walk_t w = {.lim = lim != NULL ? lim : &defaults,
                .check_strings = req != NULL,
                .msg = msg,
                .msglen = msglen};
    if (msglen > 0)
        msg[0] = '\0';
    walk_msg(&w, &mxop__request__descriptor, payload, len, 1, "Request");
    if (w.code != 0 || req == NULL)
        return w.code;
    if (req->id == 0) {
        mxop__fmt(msg, msglen, "request id 0 is reserved for events; ids must be non-zero");
        return MXOP_EPROTOCOL;
    }
    return check_body(req, msg, msglen);
}
