/*
 * server/daemon/session/session_fsm.c - a session and its live worker slot, as one
 * state machine.
 *
 * The state (mxop__session_t.state) changes only in transition() below,
 * on these events:
 *
 *   state           event         new state            action
 *   --------------  ------------  -------------------  ---------------------------------
 *   RUNNING         DIED          RUNNING              promote the warm spare, or spawn a
 *                                                      new worker and replay; event
 *                                                      restarted=1
 *   RUNNING         DIED          WAITING              a death nobody asked for (backoff),
 *                                                      or the spawn failed (retry with
 *                                                      backoff; event restarted=0 naming
 *                                                      the cause); a failed start (exec
 *                                                      failed, stopped or not exec'd in
 *                                                      time) is a death, never a library's
 *   RUNNING         DIED          FAILED               a library of the session is
 *                                                      quarantined
 *   WAITING         TIMER         RUNNING or WAITING   as for DIED: promote or spawn, else
 *                                                      retry
 *   RUNNING         UNRESTORABLE  FAILED               a replayed library no longer loads:
 *                                                      kill the worker, fail what was
 *                                                      pending
 *   RUNNING         RELOAD        RETIRING             a library of the session changed:
 *                                                      ask the worker to retire (it exits
 *                                                      between calls), discard the warm
 *                                                      spare (it has the old file)
 *   WAITING         RELOAD        WAITING              discard the warm spare; the respawn
 *                                                      loads the new file anyway
 *   RETIRING        RELOAD        RETIRING             nothing: the replacement loads the
 *                                                      file then
 *   RETIRING        (watchdog)    RETIRING             not exited MXOP__RETIRE_TIMEOUT_MS
 *                                                      after the Retire or its last call:
 *                                                      killed (deadline.c)
 *   RETIRING        DIED          RELOAD_CHECKING      retired (a clean exit at the Retire,
 *                                 or RELOAD_WAITING    or a death the daemon caused with no
 *                                                      call running): no crash, no backoff,
 *                                                      no quarantine; a replacement spawned
 *                                                      cold, requests sent after the Retire
 *                                                      re-sent to it, the client's end of
 *                                                      its channel held (reload_fd); if the
 *                                                      spawn failed, RELOAD_WAITING
 *   RETIRING        DIED          as RUNNING DIED      a death in a call: a crash
 *   RELOAD_CHECKING REPLAYED      RUNNING              every replayed load answered and
 *                                                      checked: event restarted=1 with the
 *                                                      held channel
 *   RELOAD_WAITING  TIMER         RELOAD_CHECKING      spawn and replay as from RETIRING
 *                                 or RELOAD_WAITING    DIED, else retry
 *   RELOAD_*        (others)      RELOAD_* or FAILED   as their plain states (RELOAD_CHECKING
 *                                                      as RUNNING, RELOAD_WAITING as
 *                                                      WAITING, RELOAD_RETIRING as
 *                                                      RETIRING), keeping the channel held
 *                                                      until a replacement is checked
 *   any             END           ENDED                kill the worker, stop the spare,
 *                                                      timers
 *
 * After every transition the Reload requests whose sessions all left
 * RETIRING and the RELOAD_* states are answered (reload.c).
 *
 * Hot reload replaces the worker between calls without the daemon knowing
 * when a call starts: the worker itself serves supervisor requests only
 * between calls, so a WorkerRetire it reads means no call of it is under
 * way.  A call in flight finishes on the old worker; a call it had not
 * begun finds the channel closed, and the client sends it again to the
 * replacement (a death outside the call: client/call.c's CALL_RETRY).
 * Leaving RETIRING answers the Reload requests waiting for it (reload.c).
 *
 * Recovery never gives up while it is possible: a failed spawn (EMFILE,
 * ENOMEM, ...) and a worker that keeps dying before serving are retried
 * with a backoff doubling from MXOP__BACKOFF_FIRST_MS to
 * MXOP__BACKOFF_MAX_MS.  Only what no new worker can fix ends service:
 * a quarantined library, or one that no longer loads (op indices would
 * shift).  Deaths reach this file only through the worker callbacks at the
 * bottom (mxop__session_worker_cbs); worker.c never touches a session.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"
#include "shm/call_page.h"

typedef enum sess_event {
    EV_DIED,
    EV_TIMER,
    EV_UNRESTORABLE,
    EV_END,
    EV_RELOAD,
    EV_REPLAYED /* the live worker answered a replayed request */
} sess_event_t;

static void transition(mxop__session_t *s, sess_event_t ev, const void *arg);
static void replayed(mxop__session_t *s);

/* A session left RETIRING (replaced, failed or ended): the daemon's reloads hear of it. */
static void settled(mxop__daemon_t *d)
{
    mxop__reload_settled(d);
}

/* ------------------------------------------------------------------------ */
/* Timers. */

static void stimer_closed_cb(uv_handle_t *h)
{
    free(MXOP__CONTAINER_OF((uv_timer_t *)h, mxop__stimer_t, timer));
}

mxop__stimer_t *mxop__stimer_new(mxop__session_t *s)
{
    mxop__stimer_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    if (uv_timer_init(s->d->loop, &t->timer) != 0) {
        free(t);
        return NULL;
    }
    t->s = s;
    return t;
}

void mxop__stimer_free(mxop__stimer_t *t)
{
    if (t == NULL)
        return;
    t->s = NULL;
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, stimer_closed_cb);
}

static void respawn_cb(uv_timer_t *t)
{
    mxop__session_t *s = MXOP__CONTAINER_OF(t, mxop__stimer_t, timer)->s;
    if (s != NULL)
        transition(s, EV_TIMER, NULL);
}

/* ------------------------------------------------------------------------ */
/* Actions. */

/* True if one of the session's libraries is quarantined (it cannot be given to a new worker). */
static const mxop__lib_t *quarantined_lib(mxop__session_t *s, char *err, size_t errlen)
{
    for (size_t i = 0; i < s->n_libs; i++)
        if (mxop__quarantine_check(s->d, s->libs[i].path, err, errlen) != 0)
            return &s->libs[i];
    return NULL;
}

/* Forgets a replacement's channel kept from the client (reload_fd). */
static void close_reload_fd(mxop__session_t *s)
{
    if (s->reload_fd >= 0)
        close(s->reload_fd);
    s->reload_fd = -1;
}

/* Enters FAILED: requests fail with `code` and `msg` from now on; the client is told. */
static void enter_failed(mxop__session_t *s, int code, const char *msg)
{
    close_reload_fd(s);
    s->state = MXOP__SESS_FAILED;
    s->dead_code = code == MXOP_EQUARANTINED ? code : MXOP_EWORKER_CRASHED;
    mxop__fmt(s->dead_msg, sizeof(s->dead_msg), "%s", msg);
    mxop__spare_event(s, MXOP__SPARE_EV_STOP, NULL);
    MXOP__LOGE(s->id, NULL, "%s", msg);
    mxop__reply_event(s, &s->death, msg, false, -1);
}

/* Enters WAITING (RELOAD_WAITING after a retirement): the timer brings the next attempt. */
static void enter_waiting(mxop__session_t *s, uint64_t delay_ms)
{
    s->state = mxop__session_reload_held(s) ? MXOP__SESS_RELOAD_WAITING : MXOP__SESS_WAITING;
    s->respawn_at = mxop__now_ns() + (int64_t)delay_ms * 1000000LL;
    if (s->respawn_timer != NULL)
        uv_timer_start(&s->respawn_timer->timer, respawn_cb, delay_ms, 0);
}

/*
 * Puts a worker in place of the dead one and tells the client: the spare
 * when there is one (it has every library and region already), else a new
 * worker given them now.  A spawn that fails is retried after a backoff,
 * and the client is told at its first failure in a row.
 */
static void respawn(mxop__session_t *s)
{
    mxop__daemon_t *d = s->d;
    const mxop__worker_exit_t *e = &s->death;
    int client_fd = -1;
    mxop__worker_t *w = mxop__spare_take(s, &client_fd);
    bool warm = w != NULL;
    if (!warm) {
        mxop__spare_event(s, MXOP__SPARE_EV_DROP, NULL);
        char err[MXOP__MSG_MAX];
        if (mxop__worker_spawn(d, s->id, s->generation + 1, &mxop__session_worker_cbs, s, &w, err,
                               sizeof(err)) != 0) {
            s->spawn_failures++;
            uint64_t delay = mxop__backoff_ms(s->spawn_failures + 1);
            char msg[MXOP__MSG_MAX];
            mxop__fmt(msg, sizeof(msg),
                      "%s; no replacement worker could be started (%s); retrying in %llu ms "
                      "(attempt %d)",
                      e->message, err, (unsigned long long)delay, s->spawn_failures);
            /* Logged and told once per run of failures, then every tenth: no flood. */
            if (s->spawn_failures == 1 || s->spawn_failures % 10 == 0) {
                MXOP__LOGW(s->id, NULL, "%s", msg);
                if (s->spawn_failures == 1)
                    mxop__reply_event(s, e, msg, false, -1);
            }
            mxop__replay_held(s, false, MXOP_EWORKER_CRASHED, msg);
            enter_waiting(s, delay);
            return;
        }
        client_fd = mxop__worker_take_client_fd(w);
    }
    if (s->spawn_failures > 0)
        MXOP__LOGI(s->id, NULL, "a replacement worker started after %d failed attempts",
                   s->spawn_failures);
    s->spawn_failures = 0;
    /*
     * A reload's replacement may have loaded a file with other ops: the
     * client gets its channel once every replayed load was checked
     * (replayed()), so that no call reaches it before.  A promoted spare
     * (no reload discarded it since) has been checked already.
     */
    bool hold = s->state == MXOP__SESS_RELOAD_WAITING && !warm;
    s->state = hold ? MXOP__SESS_RELOAD_CHECKING : MXOP__SESS_RUNNING;
    s->generation = w->generation;
    s->worker = w;
    s->restarts++;
    /*
     * A new worker missing a library would number the ops after it wrongly:
     * it must not serve.  Its death (outside any call) restarts it, with backoff.
     */
    if (warm) {
        /* What the spare loaded is now what the session runs. */
        for (size_t i = 0; i < s->n_libs; i++)
            s->libs[i].ver = s->libs[i].spare_ver;
    }
    if (warm ? !mxop__replay_device_regions(s) : !mxop__replay_to(s, MXOP__FIFO_LIVE))
        mxop__worker_kill(w, "it could not be given the session's libraries and regions");
    /* After the libraries and regions: requests a retired worker never read. */
    mxop__replay_held(s, true, MXOP_EWORKER_CRASHED, "it could not be sent to the new worker");
    if (hold) {
        close_reload_fd(s);
        s->reload_fd = client_fd;
        replayed(s);
    } else {
        mxop__reply_event(s, e, e->message, true, client_fd);
        close(client_fd);
    }
    MXOP__LOGI(s->id, NULL,
               "worker restarted: pid %d, generation %u, %s (%zu libraries, %zu regions)",
               (int)w->pid, (unsigned)s->generation, warm ? "the warm spare" : "started cold",
               s->n_libs, s->n_regions);
    mxop__spare_event(s, MXOP__SPARE_EV_WANTED, NULL);
}

/* RUNNING + DIED: what the death means for the session, then the next state. */
static void on_died(mxop__session_t *s, const mxop__worker_exit_t *x, bool retired)
{
    mxop__daemon_t *d = s->d;
    /* The report is kept as it came; only its message gains what the session knows. */
    mxop__worker_exit_t *e = &s->death;
    *e = *x;
    /* What the dead worker had not answered: failed below, or re-sent to its replacement. */
    mxop__pending_t *queue = mxop__worker_queue_take_all(s->worker);
    s->worker = NULL;
    /* After a retirement, or a reload's replacement not yet checked: hold the next one too. */
    s->state =
        retired || mxop__session_reload_held(s) ? MXOP__SESS_RELOAD_WAITING : MXOP__SESS_WAITING;
    /* A reload's replacement that dies before serving never reaches the client. */
    close_reload_fd(s);

    /*
     * A worker that died idle while loading a library: say which, and count
     * it against it if the library did it (a fault or an exit, not a
     * SIGKILL from outside or from the OOM killer, nor a timeout).
     */
    char load_note[160] = "";
    if (!retired && x->op[0] == '\0' && queue != NULL && queue->kind == MXOP__PENDING_LOAD) {
        int sig = x->term_signal;
        /* A worker that never exec'd never loaded it: a failed start is no library's doing. */
        bool by_library = x->started && x->code != MXOP_ETIMEOUT && sig != SIGKILL &&
                          sig != SIGTERM && sig != SIGINT && sig != SIGHUP;
        int n = by_library ? mxop__quarantine_crash(d, queue->path) : 0;
        if (n >= MXOP__QUARANTINE_CRASHES)
            mxop__fmt(load_note, sizeof(load_note),
                      "; it has crashed a worker %d times while loading and is now quarantined", n);
        mxop__fmt(e->message, sizeof(e->message), "%s while loading library '%s'%s", x->message,
                  queue->name, load_note);
    }
    /*
     * The backoff counts only deaths nobody asked for, of workers that never
     * served a call: a worker dying at start-up or while its libraries are
     * replayed would otherwise respawn at full speed for ever.  A death
     * inside a client's call or request is followed by a restart at once:
     * the next one needs another call, so the client sets the pace.
     */
    bool client_caused = x->call_id != 0 || (queue != NULL && !queue->replay);
    if (retired) {
        /*
         * It answered everything sent before its Retire, then exited: what
         * is still pending came after, and goes to the replacement.  A
         * retirement is no death to back off from.
         */
        s->held = queue;
        client_caused = true;
        mxop__fmt(e->message, sizeof(e->message),
                  "the session's worker retired between calls and was replaced to reload %s; "
                  "stateful instances it held are lost",
                  s->retire_why);
    } else {
        mxop__replay_fail_pending(s, queue, x->code, x->message, load_note);
    }
    if (client_caused || x->served)
        s->idle_deaths = 0;
    if (!client_caused)
        s->idle_deaths++;
    if (mxop__session_ending(s)) {
        mxop__replay_held(s, false, MXOP_EWORKER_CRASHED, "the session is ending");
        return;
    }

    char msg[MXOP__MSG_MAX];
    char err[MXOP__MSG_MAX];
    const mxop__lib_t *q = quarantined_lib(s, err, sizeof(err));
    if (q != NULL) {
        mxop__fmt(msg, sizeof(msg),
                  "%s; the session's library '%s' is quarantined, so its worker cannot be "
                  "restored and the session's requests now fail",
                  e->message, q->name);
        e->code = MXOP_EQUARANTINED;
        enter_failed(s, MXOP_EQUARANTINED, msg);
        mxop__replay_held(s, false, MXOP_EQUARANTINED, msg);
        return;
    }
    uint64_t delay = client_caused ? 0 : mxop__backoff_ms(s->idle_deaths);
    if (delay == 0 || s->respawn_timer == NULL) {
        respawn(s);
        return;
    }
    enter_waiting(s, delay);
    MXOP__LOGI(s->id, NULL, "restarting the worker in %llu ms (%d deaths in a row)",
               (unsigned long long)delay, s->idle_deaths);
}

static void on_unrestorable(mxop__session_t *s, const char *why)
{
    mxop__pending_t *queue = NULL;
    if (s->worker != NULL) {
        queue = mxop__worker_detach_kill(s->worker);
        s->worker = NULL;
    }
    mxop__replay_fail_pending(s, queue, MXOP_EWORKER_CRASHED, why, "");
    mxop__replay_held(s, false, MXOP_EWORKER_CRASHED, why);
    memset(&s->death, 0, sizeof(s->death));
    s->death.code = MXOP_EWORKER_CRASHED;
    s->death.exit_status = -1;
    enter_failed(s, MXOP_EWORKER_CRASHED, why);
}

static void on_end(mxop__session_t *s)
{
    if (s->worker != NULL) {
        /* The client is gone: what its worker had not answered has no one to answer. */
        mxop__pending_free_list(mxop__worker_detach_kill(s->worker));
        s->worker = NULL;
    }
    mxop__spare_event(s, MXOP__SPARE_EV_STOP, NULL);
    close_reload_fd(s);
    /* Nor do requests held for a replacement. */
    mxop__pending_free_list(s->held);
    s->held = NULL;
    mxop__stimer_free(s->respawn_timer);
    mxop__stimer_free(s->spare_timer);
    s->respawn_timer = s->spare_timer = NULL;
    s->state = MXOP__SESS_ENDED;
    s->client = NULL;
    s->d->n_sessions--;
    MXOP__LOGI(s->id, NULL, "session ended (%llu worker restarts)",
               (unsigned long long)s->restarts);
}

/* RUNNING (RELOAD_CHECKING) + RELOAD: the worker retires between calls; the spare has the old
 * file. */
static void on_reload(mxop__session_t *s, const char *why)
{
    mxop__spare_event(s, MXOP__SPARE_EV_DROP, NULL);
    mxop__fmt(s->retire_why, sizeof(s->retire_why), "%s", why);
    Mxop__WorkerRetire wr = MXOP__WORKER_RETIRE__INIT;
    Mxop__SupRequest req = MXOP__SUP_REQUEST__INIT;
    req.id = s->next_sup_id++;
    req.body_case = MXOP__SUP_REQUEST__BODY_RETIRE;
    req.retire = &wr;
    mxop__worker_t *w = s->worker;
    if (mxop__worker_retire(w, &req) != 0) {
        /* Its channel is gone: it is dying anyway, and its replacement loads the new file. */
        MXOP__LOGI(s->id, NULL, "reload of %s: worker %d is already going", why, (int)w->pid);
        return;
    }
    s->state =
        s->state == MXOP__SESS_RELOAD_CHECKING ? MXOP__SESS_RELOAD_RETIRING : MXOP__SESS_RETIRING;
    /* Its bound (deadline.c): from now, or from the end of the call it may be running now. */
    s->retire_since_ns = mxop__now_ns();
    s->retire_sup_id = req.id;
    mxop__call_page_t cp;
    s->retire_call_id =
        s->call_page != NULL && mxop__call_page_read(s->call_page, &cp) ? cp.call_id : 0;
    MXOP__LOGI(s->id, NULL, "reload of %s: worker %d retires after its call in flight, if any", why,
               (int)w->pid);
}

/* ------------------------------------------------------------------------ */
/* The transition function: the only place s->state changes (through the actions above). */

static void transition(mxop__session_t *s, sess_event_t ev, const void *arg)
{
    mxop__sess_state_t was = s->state;
    bool has_worker = mxop__session_has_worker(s);
    bool retiring = was == MXOP__SESS_RETIRING || was == MXOP__SESS_RELOAD_RETIRING;
    switch (ev) {
    case EV_DIED: {
        if (!has_worker)
            break;
        const mxop__worker_exit_t *x = arg;
        /*
         * Retired: it exited at the Retire, or the daemon ended it while it
         * ran no call (past its retirement's bound, found stopped): either
         * way what is pending goes to the replacement, nothing is lost.
         */
        bool retired = retiring && x->call_id == 0 &&
                       ((x->term_signal == 0 && x->exit_status == 0) || x->daemon_killed);
        on_died(s, x, retired);
        break;
    }
    case EV_RELOAD:
        if (mxop__session_serving(s))
            on_reload(s, arg);
        else if (was == MXOP__SESS_WAITING || was == MXOP__SESS_RELOAD_WAITING)
            mxop__spare_event(s, MXOP__SPARE_EV_DROP, NULL);
        break;
    case EV_TIMER:
        if (was != MXOP__SESS_WAITING && was != MXOP__SESS_RELOAD_WAITING)
            break;
        if (mxop__session_ending(s))
            break;
        respawn(s);
        break;
    case EV_UNRESTORABLE:
        if (has_worker)
            on_unrestorable(s, arg);
        break;
    case EV_END:
        if (was != MXOP__SESS_ENDED)
            on_end(s);
        break;
    case EV_REPLAYED: replayed(s); break;
    }
    /*
     * A session that left a reload's states (replaced and checked, failed
     * or ended) may complete Reload requests: reload.c answers those whose
     * sessions all did.  Asking after every transition asks no more than
     * that.
     */
    settled(s->d);
}

/* ------------------------------------------------------------------------ */
/* Entry points. */

void mxop__session_open(mxop__client_t *cl, uint64_t req_id)
{
    mxop__daemon_t *d = cl->d;
    mxop__session_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        mxop__client_reply_error(cl, req_id, MXOP_ENOMEM, "out of memory for a session");
        return;
    }
    s->d = d;
    s->id = ++d->next_session_id;
    s->generation = 1;
    s->opened_ns = mxop__now_ns();
    s->next_region = 1;
    s->next_sup_id = 1;
    s->spare_state = MXOP__SPARE_NONE;
    s->reload_fd = -1;

    char err[MXOP__MSG_MAX];
    int fds[2] = {-1, -1}; /* the data channel, the call page (and the lease page, below) */
    mxop__worker_t *w = NULL;
    int rc = mxop__call_page_create(s, &fds[1], err, sizeof(err));
    if (rc == 0)
        rc = mxop__worker_spawn(d, s->id, s->generation, &mxop__session_worker_cbs, s, &w, err,
                                sizeof(err));
    if (rc == 0)
        fds[0] = mxop__worker_take_client_fd(w);
    if (rc != 0) {
        MXOP__LOGE(s->id, NULL, "cannot open a session: %s", err);
        mxop__client_reply_error(cl, req_id, rc, err);
        if (fds[1] >= 0)
            close(fds[1]);
        mxop__call_page_free(s);
        free(s);
        return;
    }
    s->state = MXOP__SESS_RUNNING;
    s->worker = w;
    s->client = cl;
    cl->session = s;
    d->n_sessions++;
    /* Without timers there is no backoff (respawns are immediate) and no spare. */
    s->respawn_timer = mxop__stimer_new(s);
    s->spare_timer = mxop__stimer_new(s);

    Mxop__OpenSessionReply osr = MXOP__OPEN_SESSION_REPLY__INIT;
    osr.session = s->id;
    osr.worker_pid = (uint32_t)w->pid;
    osr.generation = s->generation;
    osr.confined = s->mem_confined;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req_id;
    r.body_case = MXOP__REPLY__BODY_OPEN_SESSION;
    r.open_session = &osr;
    /* Third, the client uid's spin-lease page (shm/lease_page.h), when there is one. */
    int lease_fd = mxop__lease_page_fd(&d->leases, cl->uid);
    int sent[3] = {fds[0], fds[1], lease_fd};
    mxop__reply_send_fds(cl, &r, sent, lease_fd >= 0 ? 3 : 2);
    close(fds[0]);
    close(fds[1]);
    MXOP__LOGI(s->id, NULL, "session opened by client %llu '%s'; worker %d",
               (unsigned long long)cl->id, cl->name, (int)w->pid);
    mxop__spare_event(s, MXOP__SPARE_EV_WANTED, NULL);
}

bool mxop__session_ending(const mxop__session_t *s)
{
    return s->state == MXOP__SESS_ENDED || s->client == NULL || s->client->conn.closing ||
           s->d->shutting_down;
}

int mxop__session_need_worker(mxop__session_t *s, char *err, size_t errlen)
{
    switch (s->state) {
    case MXOP__SESS_RUNNING:
    case MXOP__SESS_RETIRING:
    case MXOP__SESS_RELOAD_CHECKING:
    case MXOP__SESS_RELOAD_RETIRING: return 0;
    case MXOP__SESS_FAILED:
        mxop__fmt(err, errlen, "%s", s->dead_msg);
        return s->dead_code != 0 ? s->dead_code : MXOP_EWORKER_CRASHED;
    case MXOP__SESS_WAITING:
    case MXOP__SESS_RELOAD_WAITING: {
        int64_t left = (s->respawn_at - mxop__now_ns()) / 1000000;
        if (s->spawn_failures > 0)
            mxop__fmt(err, errlen,
                      "session %llu's worker died (%s) and no replacement could be started yet "
                      "(%d attempts); the next attempt is in %lld ms",
                      (unsigned long long)s->id, s->death.message, s->spawn_failures,
                      (long long)(left > 0 ? left : 0));
        else
            mxop__fmt(err, errlen,
                      "session %llu's worker died (%s) and is restarted in %lld ms, after %d "
                      "deaths in a row",
                      (unsigned long long)s->id, s->death.message, (long long)(left > 0 ? left : 0),
                      s->idle_deaths);
        return MXOP_EWORKER_CRASHED;
    }
    default:
        mxop__fmt(err, errlen, "session %llu has ended", (unsigned long long)s->id);
        return MXOP_EWORKER_CRASHED;
    }
}

/* The live worker cannot be given what the session had: the session fails with `why`. */
static void unrestorable(mxop__session_t *s, const char *why)
{
    transition(s, EV_UNRESTORABLE, why);
}

/*
 * The live worker answered a replayed request: once a replacement after a
 * retirement has answered all of them, the client gets its channel.
 */
static void replayed(mxop__session_t *s)
{
    if (s->state != MXOP__SESS_RELOAD_CHECKING)
        return;
    for (const mxop__pending_t *p = mxop__worker_queue(s->worker); p != NULL; p = p->next)
        if (p->replay)
            return;
    int fd = s->reload_fd;
    s->reload_fd = -1;
    s->state = MXOP__SESS_RUNNING;
    mxop__reply_event(s, &s->death, s->death.message, true, fd);
    close(fd);
}

void mxop__session_end(mxop__session_t *s)
{
    transition(s, EV_END, NULL);
}

bool mxop__session_reload(mxop__session_t *s, const char *why)
{
    transition(s, EV_RELOAD, why);
    return mxop__session_retiring(s);
}

/* ------------------------------------------------------------------------ */
/* How the session's workers report (the only way worker.c reaches a session). */

static void worker_reply(void *owner, mxop__worker_t *w, const Mxop__SupReply *r)
{
    mxop__session_t *s = owner;
    mxop__replay_verdict_t v = {0};
    if (s->worker == w)
        mxop__replay_live_reply(s, r, &v);
    else if (s->spare == w)
        mxop__replay_spare_reply(s, r, &v);
    if (v.spare_failed)
        mxop__spare_event(s, MXOP__SPARE_EV_FAILED, v.spare_why);
    if (v.unrestorable)
        unrestorable(s, v.why);
    if (v.replayed)
        transition(s, EV_REPLAYED, NULL);
}

static void worker_exit(void *owner, mxop__worker_t *w, const mxop__worker_exit_t *e)
{
    mxop__session_t *s = owner;
    if (s->spare == w) {
        /* A spare that faults while loading a library counts against that library too. */
        const mxop__pending_t *head = mxop__worker_queue(w);
        if (e->started && head != NULL && head->kind == MXOP__PENDING_LOAD &&
            e->term_signal != SIGKILL && e->term_signal != SIGTERM)
            mxop__quarantine_crash(s->d, head->path);
        char msg[MXOP__MSG_MAX];
        mxop__fmt(msg, sizeof(msg), "spare worker %d %s%s%s", (int)w->pid, e->how,
                  e->kill_msg[0] ? ": " : "", e->kill_msg);
        mxop__spare_event(s, MXOP__SPARE_EV_DIED, msg);
    } else if (s->worker == w) {
        if (e->retiring && e->term_signal == 0 && e->exit_status == 0 && e->call_id == 0)
            MXOP__LOGI(s->id, NULL, "worker %d retired for a reload", (int)w->pid);
        else
            mxop__introspect_death(s, w, e); /* notes and logs it */
        transition(s, EV_DIED, e);
    }
}

const mxop__worker_cbs_t mxop__session_worker_cbs = {
    .on_reply = worker_reply,
    .on_exit = worker_exit,
};
