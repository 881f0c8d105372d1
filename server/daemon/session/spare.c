/*
 * server/daemon/session/spare.c - the session's warm spare slot, as one state machine.
 *
 * A spare is a worker started ahead of need and given every library and
 * region the session has (replay.c), so that after a crash the next call
 * does not wait for a new worker.  Its state (mxop__session_t.spare_state)
 * changes only in mxop__spare_event():
 *
 *   state      event     new state   action
 *   ---------  --------  ----------  ---------------------------------------------
 *   NONE       WANTED    SCHEDULED   arm spare_timer (delay + backoff of failures)
 *   SCHEDULED  TIMER     WARM        spawn it and replay the session onto it
 *   SCHEDULED  TIMER     SCHEDULED   the spawn failed: count it, re-arm with backoff
 *   SCHEDULED  TIMER     NONE        the live worker is not running (a respawn wants
 *                                    a spare again when it has one)
 *   WARM       FAILED    SCHEDULED   kill it, forget its requests, re-arm with backoff
 *   WARM       DIED      SCHEDULED   forget its requests, re-arm with backoff (a failed
 *                                    start too: its exec failed, or it was stopped or
 *                                    not exec'd in time and killed)
 *   WARM       PROMOTED  NONE        it is the live worker now; failures reset
 *   any        DROP      NONE        kill a spare that cannot serve, disarm
 *   any        STOP      OFF         kill it, disarm: the session failed or ended
 *   (off)      WANTED    OFF         --warm-spare off, or the daemon shuts down
 *
 * A spare that keeps failing is re-armed after its backoff for as long as
 * the session lives (capped at MXOP__BACKOFF_MAX_MS + MXOP__SPARE_DELAY_MS):
 * a cause that clears (a full fd table, a library briefly absent) does not
 * cost the session its spare for good.
 */
#include <stdio.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

static void spare_timer_cb(uv_timer_t *t)
{
    mxop__session_t *s = MXOP__CONTAINER_OF(t, mxop__stimer_t, timer)->s;
    if (s != NULL)
        mxop__spare_event(s, MXOP__SPARE_EV_TIMER, NULL);
}

/* Enters SCHEDULED: a spare after the start delay plus the backoff of the failures so far. */
static void arm(mxop__session_t *s)
{
    if (s->spare_timer == NULL || !s->d->cfg.warm_spare || s->d->shutting_down) {
        s->spare_state = MXOP__SPARE_OFF;
        return;
    }
    s->spare_state = MXOP__SPARE_SCHEDULED;
    uint64_t delay = mxop__backoff_ms(s->spare_deaths) + MXOP__SPARE_DELAY_MS;
    uv_timer_start(&s->spare_timer->timer, spare_timer_cb, delay, 0);
}

/* Ends the spare process (if any) and forgets what it was asked. */
static void forget(mxop__session_t *s)
{
    if (s->spare != NULL) {
        mxop__pending_free_list(mxop__worker_detach_kill(s->spare));
        s->spare = NULL;
    }
    if (s->spare_timer != NULL)
        uv_timer_stop(&s->spare_timer->timer);
}

/* SCHEDULED + TIMER. */
static void start(mxop__session_t *s)
{
    if (!mxop__session_serving(s) || s->client == NULL || s->worker == NULL) {
        s->spare_state = MXOP__SPARE_NONE;
        return;
    }
    char err[MXOP__MSG_MAX];
    mxop__worker_t *w = NULL;
    /*
     * The spare reports to the session as its live worker does, through the
     * callbacks the session gave that one; it keeps its client fd.
     */
    if (mxop__worker_spawn(s->d, s->id, s->generation + 1, s->worker->cbs, s, &w, err,
                           sizeof(err)) != 0) {
        s->spare_deaths++;
        if (s->spare_deaths == 1 || s->spare_deaths % 10 == 0)
            MXOP__LOGW(s->id, NULL, "cannot start a spare worker (%d failures in a row): %s",
                       s->spare_deaths, err);
        arm(s);
        return;
    }
    s->spare = w;
    s->spare_state = MXOP__SPARE_WARM;
    if (!mxop__replay_to(s, MXOP__FIFO_SPARE)) {
        mxop__spare_event(s, MXOP__SPARE_EV_FAILED,
                          "it could not be given the session's libraries and regions");
        return;
    }
    MXOP__LOGD(s->id, NULL, "spare worker %d started (generation %u)", (int)w->pid,
               (unsigned)w->generation);
}

void mxop__spare_event(mxop__session_t *s, mxop__spare_event_t ev, const char *why)
{
    if (s->spare_state == MXOP__SPARE_OFF)
        return;
    switch (ev) {
    case MXOP__SPARE_EV_WANTED:
        if (s->spare_state == MXOP__SPARE_NONE)
            arm(s);
        break;
    case MXOP__SPARE_EV_TIMER:
        if (s->spare_state == MXOP__SPARE_SCHEDULED)
            start(s);
        break;
    case MXOP__SPARE_EV_FAILED:
    case MXOP__SPARE_EV_DIED:
        if (s->spare_state != MXOP__SPARE_WARM)
            break;
        if (ev == MXOP__SPARE_EV_FAILED)
            MXOP__LOGW(s->id, NULL, "spare worker %d: %s; replacing it",
                       s->spare != NULL ? (int)s->spare->pid : 0, why != NULL ? why : "");
        else
            MXOP__LOGW(s->id, NULL, "%s; it was not in use yet", why != NULL ? why : "");
        forget(s);
        s->spare_deaths++;
        arm(s);
        break;
    case MXOP__SPARE_EV_PROMOTED:
        if (s->spare_state != MXOP__SPARE_WARM)
            break;
        s->spare = NULL;
        s->spare_deaths = 0;
        s->spare_state = MXOP__SPARE_NONE;
        break;
    case MXOP__SPARE_EV_DROP:
        forget(s);
        s->spare_state = MXOP__SPARE_NONE;
        break;
    case MXOP__SPARE_EV_STOP:
        forget(s);
        s->spare_state = MXOP__SPARE_OFF;
        break;
    }
}

mxop__worker_t *mxop__spare_take(mxop__session_t *s, int *client_fd)
{
    mxop__worker_t *w = s->spare;
    if (s->spare_state != MXOP__SPARE_WARM || !mxop__worker_reachable(w))
        return NULL;
    /* What it still has in flight stays on its queue, as the replays they are. */
    *client_fd = mxop__worker_take_client_fd(w);
    mxop__spare_event(s, MXOP__SPARE_EV_PROMOTED, NULL);
    return w;
}
