/*
 * server/daemon/session/replay.c - giving a worker what the session has.
 *
 * The session remembers what it loaded and registered, so that a new
 * worker is given the same libraries (in the same order, so op indices
 * stay stable) and the same regions before it serves.  The warm spare is
 * given each of them as soon as the live worker has it (mirroring).  The
 * workers' answers (SupReply) complete the pending entries here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

static mxop__pending_t *load_entry(mxop__session_t *s, const mxop__lib_t *lib)
{
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_LOAD, 0, true);
    if (p != NULL &&
        ((p->path = strdup(lib->path)) == NULL || (p->name = strdup(lib->name)) == NULL)) {
        mxop__pending_free(p);
        p = NULL;
    }
    if (p != NULL) {
        /*
         * The version this worker gets: the file now at the path, opened
         * here and sent as a descriptor (libfd.c).  If it cannot be (gone,
         * or refused by the allowlist), the entry goes without one and the
         * worker's refusal makes the session unrestorable, with the reason
         * logged here.
         */
        char err[MXOP__MSG_MAX];
        if (mxop__libfd_open(s->d, p, err, sizeof(err)) != 0) {
            MXOP__LOGW(s->id, NULL, "library '%s' for a new worker: %s", lib->name, err);
            p->open_error = strdup(err); /* the reason the session is given (sup_load_done) */
        }
    }
    return p;
}

int mxop__mirror_load(mxop__session_t *s, const mxop__lib_t *lib, char *why, size_t whylen)
{
    if (s->spare == NULL)
        return 0;
    mxop__pending_t *p = load_entry(s, lib);
    if (p == NULL || mxop__pending_send(s, p, -1, MXOP__FIFO_SPARE) != 0) {
        mxop__pending_free(p);
        mxop__fmt(why, whylen, "cannot send it a library");
        return -1;
    }
    return 0;
}

/*
 * Device regions are not given to the spare: opening one makes a CUDA
 * context, which costs GPU memory a spare should not hold.  The spare
 * gets them when it takes over (replay_device_regions).
 */
int mxop__mirror_map(mxop__session_t *s, const mxop__region_t *r, char *why, size_t whylen)
{
    if (s->spare == NULL || r->cuda)
        return 0;
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_MAP, 0, true);
    if (p != NULL) {
        p->region = r->id;
        p->size = r->size;
        p->cuda = r->cuda;
        p->device = r->device;
        memcpy(p->ipc, r->ipc, sizeof(p->ipc));
        p->scratch = r->scratch;
        /* The client may still be reserving the head: the spare leaves it alone too. */
        p->reserved_from = r->reserved_from;
    }
    if (p == NULL || mxop__pending_send(s, p, r->fd, MXOP__FIFO_SPARE) != 0) {
        mxop__pending_free(p);
        mxop__fmt(why, whylen, "cannot send it a region");
        return -1;
    }
    return 0;
}

int mxop__mirror_unmap(mxop__session_t *s, uint32_t region, char *why, size_t whylen)
{
    if (s->spare == NULL)
        return 0;
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_UNMAP, 0, true);
    if (p != NULL)
        p->region = region;
    if (p == NULL || mxop__pending_send(s, p, -1, MXOP__FIFO_SPARE) != 0) {
        mxop__pending_free(p);
        mxop__fmt(why, whylen, "cannot tell it to release a region");
        return -1;
    }
    return 0;
}

/*
 * Gives a new worker (or the spare) every library, in order, and every
 * region of the session.  False if something could not be sent (the worker
 * is already gone, or memory is short): it is then incomplete.
 */
bool mxop__replay_to(mxop__session_t *s, enum mxop__pending_fifo q)
{
    for (size_t i = 0; i < s->n_libs; i++) {
        mxop__pending_t *p = load_entry(s, &s->libs[i]);
        if (p == NULL || mxop__pending_send(s, p, -1, q) != 0) {
            MXOP__LOGD(s->id, NULL, "cannot replay library '%s' into the new worker",
                       s->libs[i].name);
            mxop__pending_free(p);
            return false;
        }
    }
    for (size_t i = 0; i < s->n_regions; i++) {
        if (q == MXOP__FIFO_SPARE && s->regions[i].cuda)
            continue; /* see mirror_map */
        mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_MAP, 0, true);
        if (p == NULL)
            return false;
        p->region = s->regions[i].id;
        p->size = s->regions[i].size;
        p->cuda = s->regions[i].cuda;
        p->device = s->regions[i].device;
        memcpy(p->ipc, s->regions[i].ipc, sizeof(p->ipc));
        p->scratch = s->regions[i].scratch;
        /*
         * The daemon never learns when the client's reservation ended (the
         * spare starts within its first 100 ms), so a new worker leaves the
         * head alone too, until a call writes there (prefill.c).
         */
        p->reserved_from = s->regions[i].reserved_from;
        if (mxop__pending_send(s, p, s->regions[i].fd, q) != 0) {
            MXOP__LOGD(s->id, NULL, "cannot re-map region %u into the new worker",
                       (unsigned)p->region);
            mxop__pending_free(p);
            return false;
        }
    }
    return true;
}

/* The device regions a spare did not get, once it is the session's worker. */
bool mxop__replay_device_regions(mxop__session_t *s)
{
    for (size_t i = 0; i < s->n_regions; i++) {
        const mxop__region_t *r = &s->regions[i];
        if (!r->cuda)
            continue;
        mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_MAP, 0, true);
        if (p == NULL)
            return false;
        p->region = r->id;
        p->size = r->size;
        p->cuda = true;
        p->device = r->device;
        memcpy(p->ipc, r->ipc, sizeof(p->ipc));
        if (mxop__pending_send(s, p, -1, MXOP__FIFO_LIVE) != 0) {
            mxop__pending_free(p);
            return false;
        }
    }
    return true;
}

void mxop__replay_spare_reply(mxop__session_t *s, const Mxop__SupReply *r,
                              mxop__replay_verdict_t *v)
{
    mxop__pending_t *p = mxop__worker_queue_take(s->spare, r->id);
    if (p == NULL) {
        MXOP__LOGW(s->id, NULL, "spare answered supervisor request %llu, which is not pending",
                   (unsigned long long)r->id);
        return;
    }
    if (r->status != 0) {
        const char *what = p->kind == MXOP__PENDING_LOAD  ? "load library"
                           : p->kind == MXOP__PENDING_MAP ? "map region"
                                                          : "unmap region";
        mxop__fmt(v->spare_why, sizeof(v->spare_why), "it could not %s %s: %s", what,
                  p->kind == MXOP__PENDING_LOAD ? p->name : "",
                  r->message != NULL && r->message[0] ? r->message : mxop_strerror(r->status));
        mxop__pending_free(p);
        v->spare_failed = true;
        return;
    }
    mxop__lib_t *lib;
    if (p->kind == MXOP__PENDING_LOAD &&
        mxop__libver_same_ops(s, p->name, r, v->spare_why, sizeof(v->spare_why)) != 0) {
        mxop__pending_free(p);
        v->spare_failed = true;
        return;
    }
    if (p->kind == MXOP__PENDING_LOAD && (lib = mxop__libver_lib(s, p->path)) != NULL)
        lib->spare_ver = p->ver;
    mxop__pending_free(p);
}

static void sup_load_done(mxop__session_t *s, mxop__pending_t *p, const Mxop__SupReply *r,
                          mxop__replay_verdict_t *v)
{
    const char *msg = r->message != NULL && r->message[0] != '\0' ? r->message : NULL;
    /* A library the daemon could not open went without a descriptor: the daemon's reason. */
    if (r->status != 0 && p->open_error != NULL)
        msg = p->open_error;
    if (p->replay) {
        if (r->status != 0) {
            /*
             * Without it the ops after it would take other indices: a call
             * could run the wrong op.  The session cannot be restored.
             */
            mxop__fmt(v->why, sizeof(v->why),
                      "library '%s' no longer loads into a new worker (%s), so the session's "
                      "ops cannot be restored and its requests now fail",
                      p->name, msg ? msg : mxop_strerror(r->status));
            v->unrestorable = true;
            return;
        }
        char why[MXOP__MSG_MAX];
        if (mxop__libver_same_ops(s, p->name, r, why, sizeof(why)) != 0) {
            /* A rebuilt file with other ops: calls by index would reach the wrong op. */
            mxop__fmt(v->why, sizeof(v->why),
                      "%s (its file changed): the session's ops cannot be restored and its "
                      "requests now fail; open a new session to use the new version",
                      why);
            v->unrestorable = true;
            return;
        }
        mxop__lib_t *lib = mxop__libver_lib(s, p->path);
        if (lib != NULL)
            lib->ver = p->ver;
        return;
    }
    if (r->status != 0) {
        MXOP__LOGI(s->id, NULL, "library '%s' did not load: %s", p->name,
                   msg ? msg : mxop_strerror(r->status));
        if (msg != NULL)
            mxop__client_reply_error(s->client, p->req_id, r->status, msg);
        else
            mxop__reply_errorf(s->client, p->req_id, r->status, "library '%s' did not load: %s",
                               p->name, mxop_strerror(r->status));
        return;
    }
    if (mxop__session_find_lib(s, p->path) == NULL) {
        if (mxop__session_add_lib(s, p->path, p->name, r) != 0) {
            mxop__client_reply_error(s->client, p->req_id, MXOP_ENOMEM,
                                     "out of memory recording the library's ops");
            return;
        }
        s->libs[s->n_libs - 1].ver = p->ver;
        /* Only now that it loaded without crashing does the spare get it too. */
        if (mxop__mirror_load(s, &s->libs[s->n_libs - 1], v->spare_why, sizeof(v->spare_why)))
            v->spare_failed = true;
    }
    MXOP__LOGI(s->id, NULL, "loaded library '%s' (%zu ops)", p->name, r->n_ops);
    mxop__reply_ops(s, p->req_id);
}

static void sup_map_done(mxop__session_t *s, mxop__pending_t *p, const Mxop__SupReply *r,
                         mxop__replay_verdict_t *v)
{
    const char *msg = r->message != NULL && r->message[0] != '\0' ? r->message : NULL;
    if (p->replay) {
        if (r->status != 0)
            MXOP__LOGW(s->id, NULL, "re-mapping region %u into worker generation %u failed: %s",
                       (unsigned)p->region, (unsigned)s->generation,
                       msg ? msg : mxop_strerror(r->status));
        return;
    }
    s->n_pending_maps--;
    s->pending_map_bytes -= p->size;
    if (r->status != 0) {
        mxop__client_reply_error(s->client, p->req_id, r->status, msg);
        return;
    }
    mxop__region_t nr = {.id = p->region,
                         .fd = p->fd,
                         .size = p->size,
                         .cuda = p->cuda,
                         .device = p->device,
                         .scratch = p->scratch,
                         .reserved_from = p->reserved_from};
    if (p->cuda)
        memcpy(nr.ipc, p->ipc, sizeof(nr.ipc));
    if (mxop__session_add_region(s, &nr) != 0) {
        /* The worker has it mapped; unmapping is its business at the next restart. */
        mxop__client_reply_error(s->client, p->req_id, MXOP_ENOMEM, "out of memory for a region");
        return;
    }
    p->fd = -1;
    if (mxop__mirror_map(s, &s->regions[s->n_regions - 1], v->spare_why, sizeof(v->spare_why)))
        v->spare_failed = true;

    Mxop__RegisterRegionReply rr = MXOP__REGISTER_REGION_REPLY__INIT;
    rr.region = p->region;
    Mxop__Reply reply = MXOP__REPLY__INIT;
    reply.id = p->req_id;
    reply.body_case = MXOP__REPLY__BODY_REGISTER_REGION;
    reply.register_region = &rr;
    mxop__reply_send(s->client, &reply, -1);
    MXOP__LOGD(s->id, NULL, "registered %sregion %u (%llu bytes)", p->cuda ? "device " : "",
               (unsigned)p->region, (unsigned long long)p->size);
}

void mxop__replay_live_reply(mxop__session_t *s, const Mxop__SupReply *r, mxop__replay_verdict_t *v)
{
    mxop__pending_t *p = mxop__worker_queue_take(s->worker, r->id);
    if (p == NULL) {
        MXOP__LOGW(s->id, NULL, "worker answered supervisor request %llu, which is not pending",
                   (unsigned long long)r->id);
        return;
    }
    const mxop__pending_t *head = mxop__worker_queue(s->worker);
    if (head != NULL && head->sup_id < p->sup_id)
        MXOP__LOGW(s->id, NULL, "worker answered supervisor request %llu out of order",
                   (unsigned long long)r->id);
    switch (p->kind) {
    case MXOP__PENDING_LOAD: sup_load_done(s, p, r, v); break;
    case MXOP__PENDING_MAP: sup_map_done(s, p, r, v); break;
    case MXOP__PENDING_PING:
        /* The worker's loop runs: the next probe is due an interval from now. */
        s->probe_ok_ns = mxop__now_ns();
        s->probe_sup_id = 0;
        break;
    default:
        if (!p->replay) {
            if (r->status != 0)
                mxop__client_reply_error(s->client, p->req_id, r->status, r->message);
            else
                mxop__reply_ok(s->client, p->req_id);
        }
        break;
    }
    /* A reload's replacement reaches the client once its replays are all checked. */
    v->replayed = p->replay;
    mxop__pending_free(p);
}

/*
 * Answers every request that was waiting on the dead worker.  `load_note`
 * (may be "") is added to the answer of the load that was running.
 */
void mxop__replay_fail_pending(mxop__session_t *s, mxop__pending_t *queue, int code,
                               const char *message, const char *load_note)
{
    bool first = true;
    mxop__pending_t *p = queue;
    while (p != NULL) {
        mxop__pending_t *next = p->next;
        if (p->kind == MXOP__PENDING_PING) {
            /* A probe answers no one; the next worker gets its own. */
            s->probe_sup_id = 0;
        } else if (p->replay) {
            MXOP__LOGW(s->id, NULL, "replay of %s was lost with the worker",
                       p->kind == MXOP__PENDING_LOAD ? "a library" : "a region");
        } else if (p->kind == MXOP__PENDING_LOAD) {
            /* The head was running; the rest never reached the worker's loader. */
            if (first && code == MXOP_ETIMEOUT)
                mxop__reply_errorf(s->client, p->req_id, MXOP_ETIMEOUT, "%s", message);
            else if (first)
                mxop__reply_errorf(s->client, p->req_id, MXOP_EWORKER_CRASHED,
                                   "library '%s' crashed the worker while loading: %s%s", p->name,
                                   message, load_note);
            else
                mxop__reply_errorf(s->client, p->req_id, MXOP_EWORKER_CRASHED,
                                   "the worker died before library '%s' was loaded: %s", p->name,
                                   message);
        } else if (p->kind == MXOP__PENDING_MAP) {
            s->n_pending_maps--;
            s->pending_map_bytes -= p->size;
            mxop__reply_errorf(s->client, p->req_id, MXOP_EWORKER_CRASHED,
                               "the worker died before mapping the region: %s", message);
        } else {
            /* The region is released either way: the dead worker's mappings died with it. */
            mxop__reply_ok(s->client, p->req_id);
        }
        first = false;
        mxop__pending_free(p);
        p = next;
    }
}

/*
 * Requests a retired worker never read (it exits at its Retire, and these
 * came after), and requests that met a dying worker before its exit was
 * reaped (mxop__pending_send_client): sent, in order, to its replacement, which has by then
 * been given the session's libraries and regions.  A release needs no
 * worker: its region left the session when it was asked for.
 */
void mxop__replay_held(mxop__session_t *s, bool send, int code, const char *msg)
{
    mxop__pending_t *p = s->held;
    s->held = NULL;
    while (p != NULL) {
        mxop__pending_t *next = p->next;
        p->next = NULL;
        if (p->kind == MXOP__PENDING_UNMAP) {
            mxop__reply_ok(s->client, p->req_id);
            mxop__pending_free(p);
        } else if (send && (p->sup_id = s->next_sup_id++) != 0 &&
                   mxop__pending_send(s, p, p->cuda ? -1 : p->fd, MXOP__FIFO_LIVE) == 0) {
            /* Queued on the new worker: its answer completes the request. */
        } else {
            if (p->kind == MXOP__PENDING_MAP) {
                s->n_pending_maps--;
                s->pending_map_bytes -= p->size;
            }
            mxop__reply_errorf(s->client, p->req_id, code,
                               "the session's worker was being replaced (a reload or its death) "
                               "and its replacement could not take the request: %s",
                               msg);
            mxop__pending_free(p);
        }
        p = next;
    }
}
