/*
 * server/daemon/core/introspect.c - DaemonStatus and DaemonStats (`mxop status`,
 * `mxop stats`, `mxop top`), and the deaths the daemon notes for them.
 *
 * Where the numbers come from: calls, errors by code, latency and staged
 * bytes per op are the client's, counted in the session's call page
 * (shm/call_stats.h), which only the client and the daemon map; the
 * engine is trusted, the worker never sees that memory.  Crashes,
 * timeouts and restart reasons are the daemon's own observations of its
 * workers (mxop__introspect_death).
 *
 * Who sees what: an administrator (the daemon's euid or root) sees every
 * session; any other client only the sessions of its own uid.
 */
#include "server/daemon/core/introspect.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics_text.h"
#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/layers.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"
#include "shm/call_page.h"

/* Allocations of one reply, freed together once it is sent. */
typedef struct pool {
    void **p;
    size_t n;
    size_t cap;
    bool failed;
} pool_t;

static void *pool_alloc(pool_t *pl, size_t n, size_t size)
{
    if (pl->failed)
        return NULL;
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 64;
        void **np = realloc(pl->p, cap * sizeof(*np));
        if (np == NULL) {
            pl->failed = true;
            return NULL;
        }
        pl->p = np;
        pl->cap = cap;
    }
    void *m = calloc(n ? n : 1, size);
    if (m == NULL) {
        pl->failed = true;
        return NULL;
    }
    pl->p[pl->n++] = m;
    return m;
}

static void pool_free(pool_t *pl)
{
    for (size_t i = 0; i < pl->n; i++)
        free(pl->p[i]);
    free(pl->p);
}

/* Administrators see every session; anyone else their own uid's (admin.c). */
static bool is_admin(const mxop__daemon_t *d, const mxop__client_t *asker)
{
    return mxop__client_is_admin(d, asker);
}

static const char *state_name(mxop__sess_state_t st)
{
    switch (st) {
    /* A reload's states read as the ones they behave as (`mxop status` shows no more). */
    case MXOP__SESS_RUNNING:
    case MXOP__SESS_RELOAD_CHECKING: return "running";
    case MXOP__SESS_WAITING:
    case MXOP__SESS_RELOAD_WAITING: return "waiting";
    case MXOP__SESS_FAILED: return "failed";
    case MXOP__SESS_RETIRING:
    case MXOP__SESS_RELOAD_RETIRING: return "retiring";
    default: return "ended";
    }
}

/* The library of op `name` in the session ("" when unknown). */
static const char *library_of(const mxop__session_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_ops; i++)
        if (s->ops[i].name != NULL && strcmp(s->ops[i].name, name) == 0)
            return s->ops[i].library != NULL ? s->ops[i].library : "";
    return "";
}

void mxop__introspect_death(mxop__session_t *s, const mxop__worker_t *w,
                            const mxop__worker_exit_t *e)
{
    bool timeout = e->code == MXOP_ETIMEOUT;
    if (timeout)
        s->timeouts++;
    else
        s->crashes++;

    mxop__restart_note_t *n = &s->recent[s->n_recent % MXOP__RECENT_RESTARTS];
    s->n_recent++;
    n->at_ns = mxop__now_ns();
    n->exit = *e;

    if (e->op[0] != '\0') {
        mxop__op_fault_t *f = NULL;
        for (size_t i = 0; i < s->n_faults && f == NULL; i++)
            if (strcmp(s->faults[i].op, e->op) == 0)
                f = &s->faults[i];
        if (f == NULL && s->n_faults < MXOP__FAULT_OPS) {
            f = &s->faults[s->n_faults++];
            mxop__fmt(f->op, sizeof(f->op), "%s", e->op);
        }
        if (f != NULL) {
            if (timeout)
                f->timeouts++;
            else
                f->crashes++;
        }
    }

    /*
     * The call's inputs travel from the client to the worker without the
     * daemon: their shapes are the worker's account (its status page),
     * quoted as such.  The message carries the signal and the worker's own
     * note (worker.c).
     */
    mxop__log_ctx_t ctx = {
        .session = s->id, .op = e->op, .library = library_of(s, e->op), .worker_pid = (int)w->pid};
    char sig[48] = "";
    if (e->term_signal > 0)
        mxop__fmt(sig, sizeof(sig), "; signal %d (%s)", e->term_signal,
                  mxop__signal_name(e->term_signal));
    char shapes[256] = "";
    if (e->op[0] != '\0')
        mxop__note_inputs(w->page, shapes, sizeof(shapes));
    mxop__log_ev(MXOP__LOG_WARN, &ctx, "%s [%s%s%s%s%s]", e->message, mxop_err_name(e->code), sig,
                 e->op[0] ? "" : "; no call in flight",
                 shapes[0] ? "; inputs (the worker's account): " : "", shapes);
}

/* ------------------------------------------------------------------------ */
/* DaemonStatus */

static Mxop__SessionStatus *session_status(pool_t *pl, const mxop__client_t *cl, int64_t now)
{
    const mxop__session_t *s = cl->session;
    Mxop__SessionStatus *st = pool_alloc(pl, 1, sizeof(*st));
    if (st == NULL)
        return NULL;
    mxop__session_status__init(st);
    st->id = s->id;
    st->client_pid = (uint32_t)cl->pid;
    st->client_uid = (uint32_t)cl->uid;
    st->client_name = (char *)cl->name;
    st->n_libraries = s->n_libs;
    st->libraries = pool_alloc(pl, s->n_libs, sizeof(char *));
    for (size_t i = 0; st->libraries != NULL && i < s->n_libs; i++)
        st->libraries[i] = s->libs[i].name;
    /* Which file each library's worker runs (hot reload: reload.c, libver.c). */
    st->library_versions = pool_alloc(pl, s->n_libs, sizeof(Mxop__LibraryVersion *));
    for (size_t i = 0; st->library_versions != NULL && i < s->n_libs; i++) {
        Mxop__LibraryVersion *v = pool_alloc(pl, 1, sizeof(*v));
        if (v == NULL)
            break;
        mxop__libver_pb(s->libs[i].name, s->libs[i].path, &s->libs[i].ver, v);
        st->library_versions[st->n_library_versions++] = v;
    }
    st->regions = (uint32_t)s->n_regions;
    st->region_bytes = s->region_bytes;
    st->worker_pid = s->worker != NULL ? (uint32_t)s->worker->pid : 0;
    st->spare_pid = s->spare != NULL ? (uint32_t)s->spare->pid : 0;
    st->generation = s->generation;
    st->restarts = s->restarts;
    st->state = (char *)state_name(s->state);
    st->age_ms = (uint64_t)((now - s->opened_ns) / 1000000);
    uint64_t kept = s->n_recent < MXOP__RECENT_RESTARTS ? s->n_recent : MXOP__RECENT_RESTARTS;
    st->n_recent_restarts = kept;
    st->recent_restarts = pool_alloc(pl, kept, sizeof(Mxop__RestartNote *));
    for (uint64_t k = 0; st->recent_restarts != NULL && k < kept; k++) {
        const mxop__restart_note_t *n =
            &s->recent[(s->n_recent - kept + k) % MXOP__RECENT_RESTARTS];
        Mxop__RestartNote *rn = pool_alloc(pl, 1, sizeof(*rn));
        if (rn == NULL)
            return NULL;
        mxop__restart_note__init(rn);
        rn->ago_ms = (uint64_t)((now - n->at_ns) / 1000000);
        rn->code = n->exit.code;
        rn->signal = n->exit.term_signal;
        rn->op = (char *)n->exit.op;
        rn->message = (char *)n->exit.message;
        st->recent_restarts[k] = rn;
    }
    st->n_ops = s->n_ops;
    st->ops = pool_alloc(pl, s->n_ops, sizeof(Mxop__OpInfo *));
    for (size_t i = 0; st->ops != NULL && i < s->n_ops; i++)
        st->ops[i] = &s->ops[i];
    return pl->failed ? NULL : st;
}

/* True if `cl` is a session `asker` may see. */
static bool visible(const mxop__client_t *asker, const mxop__client_t *cl)
{
    return cl->session != NULL && (is_admin(asker->d, asker) || cl->uid == asker->uid);
}

void mxop__introspect_status(mxop__client_t *asker, const Mxop__Request *req)
{
    mxop__daemon_t *d = asker->d;
    int64_t now = mxop__now_ns();
    pool_t pl = {0};
    Mxop__DaemonStatusReply st = MXOP__DAEMON_STATUS_REPLY__INIT;
    st.version = MXOP_VERSION_STRING;
    st.uptime_ms = (uint64_t)((now - d->start_ns) / 1000000);
    st.pid = (uint32_t)d->pid;
    st.euid = (uint32_t)d->euid;
    st.sandbox = (char *)d->cfg.sandbox;
    st.layers = (char *)mxop__layers_describe();
    st.admin = is_admin(d, asker);
    st.sessions_total = d->n_sessions;
    st.clients = d->n_clients;

    size_t n = 0;
    for (mxop__list_t *l = d->clients.next; l != &d->clients; l = l->next)
        n += visible(asker, MXOP__CONTAINER_OF(l, mxop__client_t, link));
    st.sessions = pool_alloc(&pl, n, sizeof(Mxop__SessionStatus *));
    for (mxop__list_t *l = d->clients.next; st.sessions != NULL && l != &d->clients; l = l->next) {
        const mxop__client_t *cl = MXOP__CONTAINER_OF(l, mxop__client_t, link);
        if (!visible(asker, cl))
            continue;
        Mxop__SessionStatus *ss = session_status(&pl, cl, now);
        if (ss == NULL)
            break;
        st.sessions[st.n_sessions++] = ss;
    }
    if (pl.failed) {
        pool_free(&pl);
        mxop__client_reply_error(asker, req->id, MXOP_ENOMEM, "out of memory for DaemonStatus");
        return;
    }
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req->id;
    r.body_case = MXOP__REPLY__BODY_DAEMON_STATUS;
    r.daemon_status = &st;
    mxop__reply_send(asker, &r, -1);
    pool_free(&pl);
}

/* ------------------------------------------------------------------------ */
/* DaemonStats */

/* Copies the client's counters of slot `o` (relaxed loads: each value whole). */
static void read_slot(const mxop__op_stats_t *o, uint64_t *calls, uint64_t *errors,
                      uint64_t *staged, uint64_t *sum, uint64_t *max, uint64_t *buckets,
                      uint64_t *codes)
{
    *calls = atomic_load_explicit(&o->calls, memory_order_relaxed);
    *errors = atomic_load_explicit(&o->errors, memory_order_relaxed);
    *staged = atomic_load_explicit(&o->staged_bytes, memory_order_relaxed);
    *sum = atomic_load_explicit(&o->sum_ns, memory_order_relaxed);
    *max = atomic_load_explicit(&o->max_ns, memory_order_relaxed);
    for (unsigned b = 0; b < MXOP__STATS_BUCKETS; b++)
        buckets[b] = atomic_load_explicit(&o->buckets[b], memory_order_relaxed);
    for (unsigned k = 0; k < MXOP__STATS_CODES; k++)
        codes[k] = atomic_load_explicit(&o->codes[k], memory_order_relaxed);
}

/* The non-zero error counters as ErrorCount entries. */
static Mxop__ErrorCount **error_counts(pool_t *pl, const uint64_t *codes, size_t *n_out)
{
    size_t n = 0;
    for (unsigned k = 0; k < MXOP__STATS_CODES; k++)
        n += codes[k] != 0;
    *n_out = 0;
    Mxop__ErrorCount **v = pool_alloc(pl, n, sizeof(*v));
    for (unsigned k = 0; v != NULL && k < MXOP__STATS_CODES; k++) {
        if (codes[k] == 0)
            continue;
        Mxop__ErrorCount *e = pool_alloc(pl, 1, sizeof(*e));
        if (e == NULL)
            return NULL;
        mxop__error_count__init(e);
        e->code = k == 0 ? 0 : -(int32_t)(1000 + k);
        e->count = codes[k];
        v[(*n_out)++] = e;
    }
    return v;
}

static const mxop__op_fault_t *fault_of(const mxop__session_t *s, const char *op)
{
    for (size_t i = 0; i < s->n_faults; i++)
        if (strcmp(s->faults[i].op, op) == 0)
            return &s->faults[i];
    return NULL;
}

/* The rows of one session: one per op it has loaded, and its totals. */
static int session_stats(pool_t *pl, const mxop__client_t *cl, Mxop__DaemonStatsReply *out)
{
    const mxop__session_t *s = cl->session;
    Mxop__SessionStats *ss = pool_alloc(pl, 1, sizeof(*ss));
    if (ss == NULL)
        return MXOP_ENOMEM;
    mxop__session_stats__init(ss);
    ss->session = s->id;
    ss->client_pid = (uint32_t)cl->pid;
    ss->client_uid = (uint32_t)cl->uid;
    ss->crashes = s->crashes;
    ss->timeouts = s->timeouts;
    ss->restarts = s->restarts;
    uint64_t all_buckets[MXOP__STATS_BUCKETS] = {0};
    uint64_t all_codes[MXOP__STATS_CODES] = {0};

    const mxop__call_stats_t *cs = s->call_page != NULL ? &s->call_page->stats : NULL;
    for (size_t i = 0; i < s->n_ops; i++) {
        const Mxop__OpInfo *oi = &s->ops[i];
        Mxop__OpStats *os = pool_alloc(pl, 1, sizeof(*os));
        uint64_t *buckets = pool_alloc(pl, MXOP__STATS_BUCKETS, sizeof(uint64_t));
        uint64_t codes[MXOP__STATS_CODES] = {0};
        if (os == NULL || buckets == NULL)
            return MXOP_ENOMEM;
        mxop__op_stats__init(os);
        os->session = s->id;
        os->library = oi->library != NULL ? oi->library : "";
        os->op = oi->name != NULL ? oi->name : "";
        if (cs != NULL && oi->index < MXOP__STATS_OPS)
            read_slot(&cs->ops[oi->index], &os->calls, &os->errors, &os->staged_bytes, &os->sum_ns,
                      &os->max_ns, buckets, codes);
        os->n_buckets = MXOP__STATS_BUCKETS;
        os->buckets = buckets;
        os->p50_ns = mxop__stats_quantile(buckets, MXOP__STATS_BUCKETS, 0.50, os->max_ns);
        os->p99_ns = mxop__stats_quantile(buckets, MXOP__STATS_BUCKETS, 0.99, os->max_ns);
        os->errors_by_code = error_counts(pl, codes, &os->n_errors_by_code);
        const mxop__op_fault_t *f = fault_of(s, os->op);
        if (f != NULL) {
            os->crashes = f->crashes;
            os->timeouts = f->timeouts;
        }
        for (unsigned b = 0; b < MXOP__STATS_BUCKETS; b++)
            all_buckets[b] += buckets[b];
        for (unsigned k = 0; k < MXOP__STATS_CODES; k++)
            all_codes[k] += codes[k];
        ss->calls += os->calls;
        ss->errors += os->errors;
        ss->staged_bytes += os->staged_bytes;
        if (os->max_ns > ss->max_ns)
            ss->max_ns = os->max_ns;
        out->ops[out->n_ops++] = os;
    }
    ss->p50_ns = mxop__stats_quantile(all_buckets, MXOP__STATS_BUCKETS, 0.50, ss->max_ns);
    ss->p99_ns = mxop__stats_quantile(all_buckets, MXOP__STATS_BUCKETS, 0.99, ss->max_ns);
    ss->errors_by_code = error_counts(pl, all_codes, &ss->n_errors_by_code);
    out->sessions[out->n_sessions++] = ss;
    return pl->failed ? MXOP_ENOMEM : 0;
}

/*
 * Fills `out` with the rows of the sessions of `uid` (every session when
 * `all`); what it points to lives in `pl`.
 */
static int build_stats(mxop__daemon_t *d, bool all, uid_t uid, pool_t *pl,
                       Mxop__DaemonStatsReply *out)
{
    size_t n_sess = 0, n_ops = 0;
    for (mxop__list_t *l = d->clients.next; l != &d->clients; l = l->next) {
        const mxop__client_t *cl = MXOP__CONTAINER_OF(l, mxop__client_t, link);
        if (cl->session != NULL && (all || cl->uid == uid)) {
            n_sess++;
            n_ops += cl->session->n_ops;
        }
    }
    out->uptime_ms = (uint64_t)((mxop__now_ns() - d->start_ns) / 1000000);
    out->sessions_total = d->n_sessions;
    out->sessions = pool_alloc(pl, n_sess, sizeof(Mxop__SessionStats *));
    out->ops = pool_alloc(pl, n_ops, sizeof(Mxop__OpStats *));
    if (out->sessions == NULL || out->ops == NULL)
        return MXOP_ENOMEM;
    for (mxop__list_t *l = d->clients.next; l != &d->clients; l = l->next) {
        const mxop__client_t *cl = MXOP__CONTAINER_OF(l, mxop__client_t, link);
        if (cl->session != NULL && (all || cl->uid == uid) && session_stats(pl, cl, out) != 0)
            return MXOP_ENOMEM;
    }
    return 0;
}

void mxop__introspect_stats(mxop__client_t *asker, const Mxop__Request *req)
{
    mxop__daemon_t *d = asker->d;
    pool_t pl = {0};
    Mxop__DaemonStatsReply st = MXOP__DAEMON_STATS_REPLY__INIT;
    if (build_stats(d, is_admin(d, asker), asker->uid, &pl, &st) != 0) {
        pool_free(&pl);
        mxop__client_reply_error(asker, req->id, MXOP_ENOMEM, "out of memory for DaemonStats");
        return;
    }
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req->id;
    r.body_case = MXOP__REPLY__BODY_DAEMON_STATS;
    r.daemon_stats = &st;
    mxop__reply_send(asker, &r, -1);
    pool_free(&pl);
}

char *mxop__metrics_text(mxop__daemon_t *d)
{
    pool_t pl = {0};
    Mxop__DaemonStatsReply st = MXOP__DAEMON_STATS_REPLY__INIT;
    char *text = NULL;
    if (build_stats(d, true, 0, &pl, &st) == 0)
        text = mxop__metrics_format(&st);
    pool_free(&pl);
    return text;
}
