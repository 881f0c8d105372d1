/*
 * server/daemon/core/shutdown.c - the final shutdown: the listener closed,
 * every client ended, every worker killed, the signal handlers closed.
 *
 * The drain (drain.c) says when; the tick (watchdog.c) and the signal
 * handler (main.c) call this, and each stops the tick itself, so that
 * this file, above the sessions it ends, is called only from above.
 */
#include "common/util.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/core/handover.h"
#include "server/daemon/core/introspect.h"
#include "server/daemon/core/notify.h"
#include "server/daemon/session/session.h"

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

    mxop__handover_stop(d);
    mxop__listener_stop(d);
    for (mxop__list_t *n = d->clients.next; n != &d->clients; n = n->next)
        mxop__client_close(MXOP__CONTAINER_OF(n, mxop__client_t, link));
    for (mxop__list_t *n = d->workers.next; n != &d->workers; n = n->next)
        mxop__pending_free_list(
            mxop__worker_detach_kill(MXOP__CONTAINER_OF(n, mxop__worker_t, link)));
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
