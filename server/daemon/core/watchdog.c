/*
 * server/daemon/core/watchdog.c - the daemon's periodic tick.
 *
 * One timer, every MXOP__WATCHDOG_MS, calls each part that keeps time, in
 * this order: the deadlines of calls and loads (deadline.c), the clients'
 * timeouts, the --watch reload check, the drain (and, when it says so,
 * the final shutdown: shutdown.c), the refusal log (accept.c), the
 * hand-over, the service manager's watchdog, then the workers' own checks
 * (worker_proc.c: not started in time, stopped, escaped descendants).
 * Once the daemon is shutting down the tick stops itself.  Deadlines come
 * from what the daemon trusts: the calls the client published and the
 * daemon's own clock; a worker's status page, which any op can write, is
 * never read here.
 */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/core/handover.h"
#include "server/daemon/core/notify.h"
#include "server/daemon/session/session.h"
#include "server/daemon/worker/worker.h"

static void watchdog_cb(uv_timer_t *t)
{
    mxop__daemon_t *d = MXOP__CONTAINER_OF(t, mxop__daemon_t, watchdog);
    if (d->shutting_down) {
        mxop__watchdog_stop(d);
        return;
    }
    mxop__deadlines_tick(d);
    mxop__clients_tick(d, mxop__now_ns());
    mxop__reload_tick(d, mxop__now_ns());
    if (mxop__drain_tick(d))
        mxop__daemon_stop(d, d->drain_why);
    mxop__accept_tick(d, mxop__now_ns());
    mxop__handover_tick(d);
    mxop__notify_tick(mxop__now_ns());
    mxop__workers_tick(d, mxop__now_ns());
    if (d->shutting_down)
        mxop__watchdog_stop(d);
}

int mxop__watchdog_start(mxop__daemon_t *d)
{
    /* Orphans of dead workers come to us instead of init, so they can be swept. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        MXOP__LOGW(0, NULL,
                   "cannot become a child subreaper (%s): processes that escape a "
                   "worker's group will not be swept",
                   strerror(errno));
    if (uv_timer_init(d->loop, &d->watchdog) != 0)
        return MXOP_EINTERNAL;
    uv_timer_start(&d->watchdog, watchdog_cb, MXOP__WATCHDOG_MS, MXOP__WATCHDOG_MS);
    return 0;
}

void mxop__watchdog_stop(mxop__daemon_t *d)
{
    if (uv_is_closing((uv_handle_t *)&d->watchdog))
        return;
    uv_timer_stop(&d->watchdog);
    uv_close((uv_handle_t *)&d->watchdog, NULL);
}
