/*
 * server/daemon/core/drain.c - the drain before shutdown.
 *
 * SIGTERM, SIGINT or a Shutdown request stop the listener at once (the
 * socket file goes, so new clients are refused), then the daemon waits
 * until no call is in flight in any session, or --drain-timeout-ms has
 * passed, before the final shutdown (shutdown.c) kills the workers.
 *
 * The drain decides and the caller acts: mxop__drain_begin and
 * mxop__drain_tick return true when the daemon is to stop now, and the
 * tick (watchdog.c) or the signal handler (main.c), above the sessions,
 * calls mxop__daemon_stop.  A Shutdown request, made from inside a
 * session, so ends at the next tick.  The end of a hand-over is the
 * drain's to decide too: it reads mxop__handover_done().
 *
 * Calls on the shared-memory path never pass through the daemon: what the
 * daemon knows of them is each session's call page (shm/call_page.h),
 * where the client publishes the call in flight before sending it and
 * clears it when it returns.  That, and the supervisor requests (library
 * loads, region maps) the daemon itself has in flight, are what "in
 * flight" means here.
 *
 * A daemon that handed its socket over to a successor (handover.c) has no
 * new clients to refuse: its drain waits for its clients to leave, not
 * only for their calls, so that an upgrade whose old daemon is then
 * stopped (a replaced pod) lets training finish its sessions within the
 * bound.
 */
#include <stdio.h>

#include "common/util.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/core/handover.h"
#include "server/daemon/session/session.h"
#include "shm/call_page.h"

int mxop__drain_in_flight(mxop__daemon_t *d)
{
    if (mxop__handover_done())
        return (int)d->n_clients;
    int n = 0;
    for (mxop__list_t *l = d->clients.next; l != &d->clients; l = l->next) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(l, mxop__client_t, link);
        mxop__session_t *s = cl->session;
        if (s == NULL)
            continue;
        if (mxop__worker_queue(s->worker) != NULL)
            n++;
        if (s->call_page == NULL)
            continue;
        mxop__call_page_t cp;
        /* A page the client is writing right now is a call about to be in flight. */
        if (!mxop__call_page_read(s->call_page, &cp) || cp.call_id != 0)
            n++;
    }
    return n;
}

bool mxop__drain_tick(mxop__daemon_t *d)
{
    if (d->shutting_down)
        return false;
    if (!d->draining) {
        /* A daemon that handed its socket over ends once its last client has gone. */
        if (mxop__handover_done() && d->n_clients == 0)
            return mxop__drain_begin(d, "handed over to a new daemon and its last client left");
        return false;
    }
    int n = mxop__drain_in_flight(d);
    if (n == 0)
        return true;
    if (mxop__now_ns() >= d->drain_deadline_ns) {
        MXOP__LOGW(0, NULL,
                   "%d %s%s still %s after %llu ms of draining (--drain-timeout-ms); "
                   "stopping anyway",
                   n, mxop__handover_done() ? "client" : "call", n == 1 ? "" : "s",
                   mxop__handover_done() ? "connected" : "in flight",
                   (unsigned long long)d->cfg.drain_timeout_ms);
        return true;
    }
    return false;
}

bool mxop__drain_begin(mxop__daemon_t *d, const char *why)
{
    if (d->draining || d->shutting_down)
        return false;
    d->draining = true;
    mxop__fmt(d->drain_why, sizeof(d->drain_why), "%s", why);
    d->drain_deadline_ns = mxop__now_ns() + (int64_t)d->cfg.drain_timeout_ms * 1000000LL;
    mxop__handover_stop(d);
    mxop__listener_stop(d);
    int n = mxop__drain_in_flight(d);
    if (n > 0)
        MXOP__LOGI(0, NULL,
                   "%s: no longer accepting connections; waiting up to %llu ms for %d %s%s %s", why,
                   (unsigned long long)d->cfg.drain_timeout_ms, n,
                   mxop__handover_done() ? "client" : "call", n == 1 ? "" : "s",
                   mxop__handover_done() ? "to leave" : "in flight");
    return mxop__drain_tick(d);
}
