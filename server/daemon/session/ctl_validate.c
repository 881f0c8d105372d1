/*
 * server/daemon/session/ctl_validate.c - the checks of a control request that need
 * neither a socket nor a session.
 *
 * They run in two steps.  Before decoding, the wire form is walked once
 * with the message descriptors (wire/pbwalk.c): the number of fields (known or not) and
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
#include "wire/pbwalk.h"

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

/* What the walk of a request's wire form counts and reports. */
typedef struct walk {
    const mxop__limits_t *lim;
    bool check_strings;
    uint32_t fields;
    char *msg;
    size_t msglen;
} walk_t;

static int count_field(void *ctx, const mxop__pbwalk_at_t *at)
{
    (void)at;
    walk_t *w = ctx;
    if (++w->fields <= w->lim->max_fields)
        return 0;
    mxop__fmt(w->msg, w->msglen,
              "the request has more than %u fields (known or not), the limit for one request",
              (unsigned)w->lim->max_fields);
    return MXOP_ELIMIT;
}

static int refuse_nul(void *ctx, const mxop__pbwalk_at_t *at, const uint8_t *s, size_t len)
{
    walk_t *w = ctx;
    const uint8_t *nul = w->check_strings ? memchr(s, '\0', len) : NULL;
    if (nul == NULL)
        return 0;
    mxop__fmt(w->msg, w->msglen,
              "string field %s.%s holds a NUL byte (at byte %zu of %zu); strings may not contain "
              "NUL",
              at->path, at->field->name, (size_t)(nul - s), len);
    return MXOP_EINVAL;
}

/* The request's wire form within the limits, its strings free of NUL. */
static int walk_request(walk_t *w, const uint8_t *payload, size_t len)
{
    mxop__pbwalk_t pw = {
        .max_depth = w->lim->max_depth, .on_field = count_field, .on_string = refuse_nul, .ctx = w};
    int rc = mxop__pbwalk(&pw, &mxop__request__descriptor, "Request", payload, len);
    switch (rc) {
    case MXOP__PBWALK_OK: return 0;
    case MXOP__PBWALK_TOO_DEEP:
        mxop__fmt(w->msg, w->msglen,
                  "the request nests messages %u deep at %s, more than the limit of %u",
                  (unsigned)pw.where_depth, pw.where, (unsigned)w->lim->max_depth);
        return MXOP_ELIMIT;
    case MXOP__PBWALK_BAD_KEY:
        mxop__fmt(w->msg, w->msglen, "the request is malformed inside %s (bad field key)",
                  pw.where);
        return MXOP_EPROTOCOL;
    case MXOP__PBWALK_BAD_FIELD:
        mxop__fmt(w->msg, w->msglen, "the request is malformed inside %s (field %u)", pw.where,
                  (unsigned)pw.where_number);
        return MXOP_EPROTOCOL;
    default: return rc; /* a callback's code, its message written */
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
    int rc = walk_request(&w, payload, len);
    if (rc != 0 || req == NULL)
        return rc;
    if (req->id == 0) {
        mxop__fmt(msg, msglen, "request id 0 is reserved for events; ids must be non-zero");
        return MXOP_EPROTOCOL;
    }
    return check_body(req, msg, msglen);
}
