/*
 * server/daemon/session/deadline.c - deadlines from trusted state only.
 *
 * What the watchdog enforces comes from two places, neither of which a
 * worker can write:
 *
 *   - the session's call page (shm/call_page.h), a memfd the daemon maps
 *     and gives to the client alone: the client publishes each call in
 *     flight with its deadline.  A call past its deadline, or running
 *     longer than --max-timeout-ms since the daemon first saw it, gets its
 *     worker killed with MXOP_ETIMEOUT naming the library, the op and the
 *     callback; this holds when the client has gone too, and when the
 *     worker is stopped or hung before it even read the call.
 *   - the daemon's own clock for the requests it sends the worker itself:
 *     a library's load (mxop_plugin_init) running longer than
 *     --init-timeout-ms kills the worker (live or spare) the same way.
 *
 * The worker's status page only names what was running when a worker
 * died; nothing read from it decides a kill.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/session/session.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/core/daemon.h"
#include "shm/call_page.h"

static const char *kind_name(int kind)
{
    switch (kind) {
    case MXOP__CALLK_FORWARD: return "forward";
    case MXOP__CALLK_BACKWARD: return "backward";
    case MXOP__CALLK_INFER: return "infer_shape/infer_type";
    case MXOP__CALLK_STATE_CREATE: return "state_create";
    case MXOP__CALLK_STATE_DESTROY: return "state_destroy";
    case MXOP__CALLK_ATTACH_MAILBOX: return "mailbox attach";
    default: return "call";
    }
}

/*
 * The callback the worker says it is in ("check_attrs"), copied out of its
 * status page byte by byte and kept only if it looks like a callback's
 * name: the worker's account, quoted in a message, never believed for more.
 */
static void worker_callback(const mxop__worker_t *w, char *out, size_t outlen)
{
    out[0] = '\0';
    if (w == NULL || w->page == NULL || outlen < MXOP__STATUS_CB_MAX)
        return;
    char cb[MXOP__STATUS_CB_MAX];
    memcpy(cb, (const void *)w->page->callback, sizeof(cb));
    cb[sizeof(cb) - 1] = '\0';
    for (size_t i = 0; cb[i] != '\0'; i++)
        if (!((cb[i] >= 'a' && cb[i] <= 'z') || cb[i] == '_'))
            return;
    memcpy(out, cb, sizeof(cb));
}

/*
 * For a call the client could not name the op of (state_destroy knows
 * only a state id): the op the worker says it runs, if the session has an
 * op of that name, and its library.  Quoted, never believed for more.
 */
static const Mxop__OpInfo *worker_op(const mxop__session_t *s)
{
    const mxop__worker_t *w = s->worker;
    if (w == NULL || w->page == NULL)
        return NULL;
    char op[MXOP__STATUS_OP_MAX];
    memcpy(op, (const void *)w->page->op, sizeof(op));
    op[sizeof(op) - 1] = '\0';
    for (size_t i = 0; i < s->n_ops; i++)
        if (s->ops[i].name != NULL && strcmp(s->ops[i].name, op) == 0)
            return &s->ops[i];
    return NULL;
}

/* How long after a call is first seen its worker is looked at for a stop at every tick. */
#define STOP_WINDOW_NS (1000LL * 1000000LL)

/* The client's call in flight, checked against its deadline and the daemon's maximum. */
static void check_call(mxop__session_t *s, int64_t now)
{
    mxop__call_page_t cp;
    if (s->call_page == NULL || !mxop__call_page_read(s->call_page, &cp))
        return;
    if (cp.call_id == 0) {
        s->cp_seen_id = 0;
        return;
    }
    if (cp.call_id != s->cp_seen_id) {
        s->cp_seen_id = cp.call_id;
        s->cp_seen_ns = now;
    }
    /*
     * A new call on a stopped worker would only wait for its deadline:
     * replace the worker now.  Its death names no call (the worker never
     * took this one), so the client sends the call to the replacement.
     * Looked at on every tick of the call's first STOP_WINDOW_NS, not only
     * the first: a stop signal takes effect when the worker is next
     * scheduled, which on a loaded host can be after the call was seen.
     * Later the once-a-second sweep of every worker (worker_proc.c) holds.
     */
    if (now - s->cp_seen_ns < STOP_WINDOW_NS && cp.call_id != s->cp_killed_id &&
        s->worker != NULL && !mxop__worker_dying(s->worker) && mxop__worker_is_stopped(s->worker))
        mxop__worker_kill(s->worker, "it was stopped (SIGSTOP or a tracer) when a call came");
    /* A restart does not clear the page at once: the call that killed a worker cannot kill its
     * heir. */
    if (cp.call_id == s->cp_killed_id || s->worker == NULL)
        return;
    /*
     * A retiring worker runs no call begun after its Retire: such a call
     * goes to the replacement once the worker is gone (check_retire bounds
     * that), so it costs the worker no timeout that would fail the call.
     */
    if (mxop__session_retiring(s) && cp.call_id != s->retire_call_id)
        return;
    int64_t max_ns = (int64_t)s->d->cfg.max_timeout_ms * 1000000LL;
    bool past_deadline = cp.deadline_ns != 0 && now > cp.deadline_ns;
    bool past_max = now - s->cp_seen_ns > max_ns;
    if (!past_deadline && !past_max)
        return;
    char what[320];
    char cb[MXOP__STATUS_CB_MAX];
    worker_callback(s->worker, cb, sizeof(cb));
    const Mxop__OpInfo *wop = cp.op[0] == '\0' ? worker_op(s) : NULL;
    if (wop != NULL) {
        mxop__fmt(cp.op, sizeof(cp.op), "%s", wop->name);
        mxop__fmt(cp.library, sizeof(cp.library), "%s", wop->library);
    }
    if (cp.op[0] != '\0' && cb[0] != '\0')
        mxop__fmt(what, sizeof(what),
                  "%s of op '%s' (library '%s', call %llu; callback %s, by the worker's account) "
                  "in worker %d",
                  kind_name(cp.kind), cp.op, cp.library, (unsigned long long)cp.call_id, cb,
                  (int)s->worker->pid);
    else if (cp.op[0] != '\0')
        mxop__fmt(what, sizeof(what), "%s of op '%s' (library '%s', call %llu) in worker %d",
                  kind_name(cp.kind), cp.op, cp.library, (unsigned long long)cp.call_id,
                  (int)s->worker->pid);
    else
        mxop__fmt(what, sizeof(what), "%s (call %llu) in worker %d", kind_name(cp.kind),
                  (unsigned long long)cp.call_id, (int)s->worker->pid);
    char msg[MXOP__MSG_MAX];
    if (past_deadline)
        mxop__fmt(msg, sizeof(msg), "%s passed its deadline by %lld ms, and the worker was killed",
                  what, (long long)((now - cp.deadline_ns) / 1000000));
    else
        mxop__fmt(msg, sizeof(msg),
                  "%s ran %lld ms, longer than the daemon's limit of %llu ms (--max-timeout-ms), "
                  "and the worker was killed",
                  what, (long long)((now - s->cp_seen_ns) / 1000000),
                  (unsigned long long)s->d->cfg.max_timeout_ms);
    s->cp_killed_id = cp.call_id;
    mxop__worker_kill_timeout(s->worker, cp.call_id, cp.op, msg);
}

/* The head of a worker's queue of supervisor requests, against --init-timeout-ms (loads only). */
static void check_head(mxop__session_t *s, int q, mxop__worker_t *w, int64_t now)
{
    const mxop__pending_t *head = mxop__worker_queue(w);
    if (head == NULL || w == NULL) {
        s->head_sup_id[q] = 0;
        return;
    }
    if (head->sup_id != s->head_sup_id[q]) {
        /* The worker answers in order: the head began when the one before it was answered. */
        s->head_sup_id[q] = head->sup_id;
        s->head_since_ns[q] = now;
        return;
    }
    if (head->kind != MXOP__PENDING_LOAD)
        return;
    int64_t ran = now - s->head_since_ns[q];
    if (ran <= (int64_t)s->d->cfg.init_timeout_ms * 1000000LL)
        return;
    char msg[MXOP__MSG_MAX];
    mxop__fmt(msg, sizeof(msg),
              "library '%s' did not finish loading (mxop_plugin_init) in %s worker %d within "
              "%llu ms (--init-timeout-ms), and the worker was killed",
              head->name, q == MXOP__FIFO_SPARE ? "spare" : "the session's", (int)w->pid,
              (unsigned long long)s->d->cfg.init_timeout_ms);
    mxop__worker_kill_timeout(w, 0, NULL, msg);
}

/*
 * A worker that burns CPU while nothing of the session is in flight (a
 * thread a library left spinning after returning) is replaced.  "In
 * flight" comes from trusted state: the call the client published and the
 * daemon's own queue of supervisor requests (a library load may compute).
 */
static void check_idle(mxop__session_t *s, mxop__worker_t *w, bool busy, uint64_t call_id)
{
    if (w == NULL)
        return;
    char why[MXOP__MSG_MAX];
    if (mxop__idle_cpu_over(w->pid, busy, call_id, why, sizeof(why))) {
        MXOP__LOGW(s->id, NULL, "watchdog: worker %d: %s", (int)w->pid, why);
        if (w == s->worker)
            s->idle_cpu_killed = true;
        mxop__worker_kill(w, why);
    }
}

/*
 * Liveness probes.  A worker whose serving loop cannot run (stopped, or
 * deadlocked by a library: a signal handler waiting on a lock a library
 * thread holds, say) burns no CPU and names no call, so neither the
 * deadlines nor the idle-CPU check see it; the call after would wait on it
 * until its deadline.  So an idle live worker gets a WorkerPing once
 * --probe-interval-ms has passed since its last sign of life (its start,
 * a call, an answer), and the loop that serves calls answers it.  No
 * answer within --probe-timeout-ms of quiet (no call and no library load
 * beside it, which would rightly hold the loop) kills and replaces it; the
 * reason goes to the log and to the client's worker event.
 */
static void check_probe(mxop__session_t *s, int64_t now, bool call_in_flight)
{
    mxop__worker_t *w = s->worker;
    if (w == NULL || !mxop__session_serving(s) || s->d->cfg.probe_interval_ms == 0) {
        s->probe_pid = 0;
        return;
    }
    if (mxop__worker_dying(w))
        return; /* already being replaced */
    if (w->pid != s->probe_pid) {
        /* A new live worker (spawned or promoted): its start is its first sign of life. */
        s->probe_pid = w->pid;
        s->probe_ok_ns = now;
        s->probe_quiet_ns = now;
        s->probe_sup_id = 0;
        return;
    }
    bool loading = false;
    for (const mxop__pending_t *p = mxop__worker_queue(s->worker); p != NULL; p = p->next)
        loading = loading || p->kind == MXOP__PENDING_LOAD;
    if (call_in_flight || loading) {
        s->probe_ok_ns = now;
        s->probe_quiet_ns = now;
        return;
    }
    if (s->probe_sup_id != 0) {
        int64_t quiet = now - s->probe_quiet_ns;
        if (quiet <= (int64_t)s->d->cfg.probe_timeout_ms * 1000000LL)
            return;
        char why[MXOP__MSG_MAX];
        mxop__fmt(why, sizeof(why),
                  "idle worker %d did not answer a liveness probe within %llu ms "
                  "(--probe-timeout-ms): its serving loop is stopped or deadlocked (by a library's "
                  "thread or signal handler?), so it was replaced",
                  (int)w->pid, (unsigned long long)s->d->cfg.probe_timeout_ms);
        s->probe_sup_id = 0;
        mxop__worker_kill(w, why); /* which logs it */
        return;
    }
    if (now - s->probe_ok_ns < (int64_t)s->d->cfg.probe_interval_ms * 1000000LL)
        return;
    /* A probe is a replay: no client asked for it, and a death beside it is no client's. */
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_PING, 0, true);
    if (p == NULL)
        return;
    if (mxop__pending_send(s, p, -1, MXOP__FIFO_LIVE) != 0) {
        /* The channel is gone: the worker's exit follows and is handled there. */
        mxop__pending_free(p);
        s->probe_ok_ns = now;
        return;
    }
    s->probe_sup_id = p->sup_id;
    s->probe_quiet_ns = now;
}

/*
 * A retiring worker exits when it reads its Retire, after the call it may
 * be running then (and a library load sent before it); past
 * MXOP__RETIRE_TIMEOUT_MS from the later of the two (a serving loop
 * deadlocked by a library, a stop) it is killed, and its death is a
 * retirement all the same: what was sent after the Retire goes to the
 * replacement, and the reload is answered.  The call it was running keeps
 * its own deadline; a call the client sent after the Retire, which it
 * will never run, does not delay the kill.
 */
static void check_retire(mxop__session_t *s, int64_t now, uint64_t call_id)
{
    mxop__worker_t *w = s->worker;
    if (!mxop__session_retiring(s) || w == NULL || mxop__worker_dying(w))
        return;
    if (call_id != 0 && call_id == s->retire_call_id) {
        s->retire_since_ns = now;
        return;
    }
    s->retire_call_id = 0;
    /*
     * A library load sent before the Retire is its to finish first, under
     * its own deadline (check_head); anything else it had not answered is
     * re-sent to the replacement.
     */
    const mxop__pending_t *head = mxop__worker_queue(w);
    if (head != NULL && head->sup_id < s->retire_sup_id && head->kind == MXOP__PENDING_LOAD) {
        s->retire_since_ns = now;
        return;
    }
    if (now - s->retire_since_ns <= (int64_t)MXOP__RETIRE_TIMEOUT_MS * 1000000LL)
        return;
    char why[MXOP__MSG_MAX];
    mxop__fmt(why, sizeof(why),
              "it was asked to retire (reload of %s) and had not exited %d ms later with no call "
              "of its own to finish, so it was killed; requests sent after the Retire go to its "
              "replacement",
              s->retire_why, MXOP__RETIRE_TIMEOUT_MS);
    MXOP__LOGW(s->id, NULL, "worker %d: %s", (int)w->pid, why);
    mxop__worker_kill(w, why);
}

/* Whether a queue holds a request that makes the worker work (a probe does not count). */
static bool requests_pending(const mxop__pending_t *p)
{
    for (; p != NULL; p = p->next)
        if (p->kind != MXOP__PENDING_PING)
            return true;
    return false;
}

void mxop__deadlines_tick(mxop__daemon_t *d)
{
    int64_t now = mxop__now_ns();
    for (mxop__list_t *n = d->clients.next; n != &d->clients; n = n->next) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(n, mxop__client_t, link);
        mxop__session_t *s = cl->session;
        if (s == NULL || s->state == MXOP__SESS_ENDED)
            continue;
        check_call(s, now);
        check_head(s, MXOP__FIFO_LIVE, s->worker, now);
        check_head(s, MXOP__FIFO_SPARE, s->spare, now);
        mxop__call_page_t cp;
        bool have = s->call_page != NULL && mxop__call_page_read(s->call_page, &cp);
        uint64_t call_id = have ? cp.call_id : 0;
        check_probe(s, now, !have || call_id != 0);
        check_retire(s, now, call_id);
        check_idle(s, s->worker,
                   !have || call_id != 0 || requests_pending(mxop__worker_queue(s->worker)),
                   call_id);
        check_idle(s, s->spare, mxop__worker_queue(s->spare) != NULL, 0);
    }
}
