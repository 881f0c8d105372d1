/*
 * server/daemon/session/reload_wait.c - the Reload requests waiting for
 * their sessions' new workers, and their answers.
 *
 * Apart from reload.c, which begins a reload through the session's state
 * machine (session_fsm.c): this half sits below it, since the state
 * machine tells it each time a session leaves RETIRING
 * (mxop__reload_settled), and a Reload is answered once none of its
 * sessions has a reload pending.
 */
#include <stdlib.h>

#include "common/util.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

void mxop__reload_wait_free(struct mxop__reload_wait *w)
{
    free(w->sessions);
    free(w->name);
    free(w->path);
    free(w);
}

static mxop__client_t *client_by_id(mxop__daemon_t *d, uint64_t id)
{
    for (mxop__list_t *n = d->clients.next; n != &d->clients; n = n->next) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(n, mxop__client_t, link);
        if (cl->id == id)
            return cl->conn.closing ? NULL : cl;
    }
    return NULL;
}

static bool session_retiring(mxop__daemon_t *d, uint64_t sid)
{
    for (mxop__list_t *n = d->clients.next; n != &d->clients; n = n->next) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(n, mxop__client_t, link);
        if (cl->session != NULL && cl->session->id == sid)
            return mxop__session_reload_pending(cl->session);
    }
    return false;
}

static void reply_reload(mxop__daemon_t *d, const struct mxop__reload_wait *w)
{
    mxop__client_t *cl = client_by_id(d, w->client_id);
    if (cl == NULL)
        return;
    Mxop__LibraryVersion lv;
    mxop__libver_pb(w->name, w->path, &w->ver, &lv);
    Mxop__ReloadReply rr = MXOP__RELOAD_REPLY__INIT;
    rr.version = &lv;
    rr.sessions = (uint32_t)w->n_sessions;
    rr.n_session_ids = w->n_sessions;
    rr.session_ids = w->sessions;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = w->req_id;
    r.body_case = MXOP__REPLY__BODY_RELOAD;
    r.reload = &rr;
    mxop__reply_send(cl, &r, -1);
}

void mxop__reload_settled(mxop__daemon_t *d)
{
    struct mxop__reload_wait **pp = &d->reload_waits;
    while (*pp != NULL) {
        struct mxop__reload_wait *w = *pp;
        bool waiting = false;
        for (size_t i = 0; i < w->n_sessions && !waiting; i++)
            waiting = session_retiring(d, w->sessions[i]);
        if (waiting) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        MXOP__LOGI(0, NULL, "reload of library '%s' done: %zu sessions run the new file", w->name,
                   w->n_sessions);
        reply_reload(d, w);
        mxop__reload_wait_free(w);
    }
}

void mxop__reload_wait_add(mxop__daemon_t *d, struct mxop__reload_wait *w)
{
    /* Answered when none of its sessions retires any more (now, if none did). */
    w->next = d->reload_waits;
    d->reload_waits = w;
    mxop__reload_settled(d);
}

void mxop__reload_free(mxop__daemon_t *d)
{
    while (d->reload_waits != NULL) {
        struct mxop__reload_wait *w = d->reload_waits;
        d->reload_waits = w->next;
        mxop__reload_wait_free(w);
    }
}
