/*
 * server/daemon/core/drain.c - the drain before shutdown, and the shutdown.
 *
 * SIGTERM, SIGINT or a Shutdown request stop the listener at once (the
 * socket file goes, so new clients are refused), then the daemon waits
 * until no call is in flight in any session, or --drain-timeout-ms has
 * passed, before the final shutdown (mxop__daemon_stop) kills the workers.
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
#include "server/daemon/core/introspect.h"
#include "server/daemon/core/log.h"
#include "server/daemon/session/session.h"
#include "server/daemon/core/notify.h"
#include "shm/call_page.h"

/* How long shutdown waits for killed workers to be reaped before giving up. */
#define SHUTDOWN_GRACE_MS 5000

static uv_timer_t shutdown_guard;

static void guard_cb(uv_timer_t *t)
{
    MXOP__LOGE(0, NULL, "workers were not reaped within %d ms of shutdown; exiting anyway",
               SHUTDOWN_GRACE_MS);
    uv_stop(t->loop);
}

void mxop__daemon_stop(mxop__daemon_t *d, const char *why)
{
    if (d->shutting_down)
        return;
    d->shutting_down = true;
    MXOP__LOGI(0, NULL, "shutting down: %s", why);
    mxop__notify("STOPPING=1");
    mxop__metrics_stop(d); /* a last write, with the sessions still there */

    mxop__listener_stop(d);
    for (mxop__list_t *n = d->clients.next; n != &d->clients; n = n->next)
        mxop__client_close(MXOP__CONTAINER_OF(n, mxop__client_t, link));
    for (mxop__list_t *n = d->workers.next; n != &d->workers; n = n->next)
        mxop__pending_free_list(
            mxop__worker_detach_kill(MXOP__CONTAINER_OF(n, mxop__worker_t, link)));
    mxop__watchdog_stop(d);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
    if (uv_is_active((uv_handle_t *)&d->sigusr1))
        uv_close((uv_handle_t *)&d->sigusr1, NULL);

    /* Unref'd: it fires only if something keeps the loop alive that long. */
    if (uv_timer_init(d->loop, &shutdown_guard) == 0) {
        uv_timer_start(&shutdown_guard, guard_cb, SHUTDOWN_GRACE_MS, 0);
        uv_unref((uv_handle_t *)&shutdown_guard);
    }
}

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

void mxop__drain_tick(mxop__daemon_t *d)
{
    if (!d->draining || d->shutting_down)
        return;
    int n = mxop__drain_in_flight(d);
    if (n == 0) {
        mxop__daemon_stop(d, d->drain_why);
        return;
    }
    if (mxop__now_ns() >= d->drain_deadline_ns) {
        MXOP__LOGW(0, NULL,
                   "%d %s%s still %s after %llu ms of draining (--drain-timeout-ms); "
                   "stopping anyway",
                   n, mxop__handover_done() ? "client" : "call", n == 1 ? "" : "s",
                   mxop__handover_done() ? "connected" : "in flight",
                   (unsigned long long)d->cfg.drain_timeout_ms);
        mxop__daemon_stop(d, d->drain_why);
    }
}

void mxop__drain_begin(mxop__daemon_t *d, const char *why)
{
    if (d->draining || d->shutting_down)
        return;
    d->draining = true;
    mxop__fmt(d->drain_why, sizeof(d->drain_why), "%s", why);
    d->drain_deadline_ns = mxop__now_ns() + (int64_t)d->cfg.drain_timeout_ms * 1000000LL;
    mxop__listener_stop(d);
    int n = mxop__drain_in_flight(d);
    if (n > 0)
        MXOP__LOGI(0, NULL,
                   "%s: no longer accepting connections; waiting up to %llu ms for %d %s%s %s", why,
                   (unsigned long long)d->cfg.drain_timeout_ms, n,
                   mxop__handover_done() ? "client" : "call", n == 1 ? "" : "s",
                   mxop__handover_done() ? "to leave" : "in flight");
    mxop__drain_tick(d);
}
