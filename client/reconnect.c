/*
 * client/reconnect.c - a client whose daemon went away (stopped after a
 * hand-over to a new daemon, or restarted by its service manager) connects
 * again to the same socket path and puts its session back as it was:
 * the libraries it had loaded (same names, same order), its regions
 * (re-registered from the memfds it holds: the daemon's ids may change, the
 * ids the engine holds do not, c->regions[].wire maps them), and its op
 * handles (re-resolved by library and name).  Op states cannot be carried
 * over: their ids answer MXOP_ESTATE_LOST, naming the op, until the engine
 * creates them again.
 *
 * The files above (invoke.c, library.c, regions.c) ask here before and
 * after a request; the decisions are made here, and the session's parts
 * are restored through the files below (session_open.c, op_table.c,
 * region_wire.c).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "client/client_internal.h"
#include "client/session_state.h"
#include "common/util.h"
#include "shm/call_page.h"

/*
 * How long the call that finds its daemon gone under it tries to reconnect
 * before it fails (the next call tries for the client's whole timeout): a
 * hand-over's new daemon is there at once, and a call should not hang on a
 * daemon that is merely gone.
 */
#define INFLIGHT_BUDGET_MS 500

/* Backoff between attempts: from FIRST up to MAX, doubling. */
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 500

typedef struct state_rec {
    uint64_t id;
    char *op; /* the op's name, for the error */
    int lost; /* created on a daemon that went away */
} state_rec_t;

struct mxop__reconn {
    int on;
    char *path;
    char *name; /* client name for Hello, or NULL */
    state_rec_t *states;
    size_t nstates, capstates;
    uint32_t count; /* reconnections made */
    int failed;     /* the last full attempt found no daemon: later ones try once */
    /* A reconnection is under way: what it calls (a region registered again) must not start
     * another when the new daemon goes away too. */
    int busy;
};

int mxop__reconnect_init(mxop_client_t *c, const char *path, const char *name, int on)
{
    struct mxop__reconn *r = calloc(1, sizeof *r);
    if (r == NULL)
        return MXOP_ENOMEM;
    r->on = on;
    r->path = strdup(path);
    r->name = name != NULL ? strdup(name) : NULL;
    if (r->path == NULL || (name != NULL && r->name == NULL)) {
        free(r->path);
        free(r->name);
        free(r);
        return MXOP_ENOMEM;
    }
    c->rcn = r;
    return 0;
}

void mxop__reconnect_free(mxop_client_t *c)
{
    struct mxop__reconn *r = c->rcn;
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nstates; i++)
        free(r->states[i].op);
    free(r->states);
    free(r->path);
    free(r->name);
    free(r);
    c->rcn = NULL;
}

int mxop__reconnect_enabled(const mxop_client_t *c)
{
    return c->rcn != NULL && c->rcn->on;
}

static state_rec_t *state_find(struct mxop__reconn *r, uint64_t id)
{
    for (size_t i = 0; i < r->nstates; i++)
        if (r->states[i].id == id)
            return &r->states[i];
    return NULL;
}

static void state_remove(struct mxop__reconn *r, state_rec_t *s)
{
    free(s->op);
    *s = r->states[--r->nstates];
}

void mxop__reconnect_note_state(mxop_client_t *c, uint64_t id, const mxop_op_t *op)
{
    struct mxop__reconn *r = c->rcn;
    if (r == NULL || !r->on)
        return;
    /* A new daemon's worker may hand out an id a lost state had: the new one wins. */
    state_rec_t *old = state_find(r, id);
    if (old != NULL)
        state_remove(r, old);
    if (r->nstates == r->capstates) {
        size_t cap = r->capstates ? r->capstates * 2 : 8;
        state_rec_t *a = realloc(r->states, cap * sizeof *a);
        if (a == NULL)
            return;
        r->states = a;
        r->capstates = cap;
    }
    char *name = strdup(op != NULL && op->name != NULL ? op->name : "?");
    if (name == NULL)
        return;
    r->states[r->nstates++] = (state_rec_t){.id = id, .op = name, .lost = 0};
}

int mxop__reconnect_state_destroyed(mxop_client_t *c, uint64_t id)
{
    struct mxop__reconn *r = c->rcn;
    state_rec_t *s = r != NULL ? state_find(r, id) : NULL;
    if (s == NULL)
        return 0;
    int lost = s->lost;
    state_remove(r, s);
    return lost;
}

int mxop__reconnect_check_state(mxop_client_t *c, uint64_t id)
{
    struct mxop__reconn *r = c->rcn;
    state_rec_t *s = r != NULL && id != 0 ? state_find(r, id) : NULL;
    if (s == NULL || !s->lost)
        return 0;
    return mxop__fail(c, MXOP_ESTATE_LOST,
                      "state %llu of op '%s' was lost when mxop-serverd went away (the client "
                      "reconnected to %s); create it again with mxop_state_create",
                      (unsigned long long)id, s->op, r->path);
}

/*
 * Puts the op table in the order of the new daemon's OpList, keeping every
 * handle: an op found again by library and name moves to its new index;
 * the others stay in the table, not present (check_op names them).
 */
static int ops_remap(mxop_client_t *c, const Mxop__OpList *list)
{
    size_t n = list != NULL ? list->n_ops : 0;
    size_t cap = c->nops;
    for (size_t i = 0; i < n; i++) {
        if (list->ops[i] == NULL || list->ops[i]->index >= 65536)
            return mxop__fail(c, MXOP_EPROTOCOL, "mxop-serverd sent an op with a bad index");
        if (list->ops[i]->index + 1 > cap)
            cap = list->ops[i]->index + 1;
    }
    if (cap == 0)
        return 0;
    mxop_op_t **a = calloc(cap, sizeof *a);
    char *used = calloc(c->nops + 1, 1);
    if (a == NULL || used == NULL) {
        free(a);
        free(used);
        return mxop__fail(c, MXOP_ENOMEM, "out of memory reconnecting");
    }
    for (size_t i = 0; i < n; i++) {
        const Mxop__OpInfo *in = list->ops[i];
        for (size_t k = 0; k < c->nops; k++) {
            mxop_op_t *op = c->ops[k];
            if (used[k] || op->name == NULL || strcmp(op->name, in->name ? in->name : "") != 0 ||
                strcmp(op->library ? op->library : "", in->library ? in->library : "") != 0)
                continue;
            if (a[in->index] == NULL) {
                a[in->index] = op;
                used[k] = 1;
            }
            break;
        }
    }
    size_t slot = 0;
    for (size_t k = 0; k < c->nops; k++) {
        if (used[k])
            continue;
        while (a[slot] != NULL)
            slot++;
        a[slot] = c->ops[k];
    }
    free(used);
    /* The slots left are new entries; on failure only those are freed (c->ops is untouched). */
    char *fresh = calloc(cap, 1);
    int rc = fresh == NULL ? MXOP_ENOMEM : 0;
    for (size_t k = 0; rc == 0 && k < cap; k++) {
        if (a[k] != NULL)
            continue;
        a[k] = calloc(1, sizeof *a[k]);
        if (a[k] == NULL) {
            rc = MXOP_ENOMEM;
            break;
        }
        fresh[k] = 1;
        a[k]->client = c;
    }
    if (rc < 0) {
        for (size_t k = 0; fresh != NULL && k < cap; k++)
            if (fresh[k])
                free(a[k]);
        free(fresh);
        free(a);
        return mxop__fail(c, rc, "out of memory reconnecting");
    }
    free(fresh);
    for (size_t k = 0; k < cap; k++) {
        a[k]->index = (uint32_t)k;
        a[k]->present = 0;
    }
    free(c->ops);
    c->ops = a;
    c->nops = c->capops = cap;
    return 0;
}

static int reload_libraries(mxop_client_t *c)
{
    const Mxop__OpList *list = NULL;
    Mxop__Reply *rep;
    int failed = 0;
    for (size_t i = 0; i < mxop__library_count(c); i++) {
        Mxop__LoadLibrary body = MXOP__LOAD_LIBRARY__INIT;
        body.path = (char *)mxop__library_at(c, i);
        Mxop__Request req = MXOP__REQUEST__INIT;
        req.body_case = MXOP__REQUEST__BODY_LOAD_LIBRARY;
        req.load_library = &body;
        int rc = mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &rep, NULL);
        if (rc < 0 && c->sess.state == MXOP__SESS_DEAD)
            return rc;
        if (rc < 0) {
            /* The library is not there any more: its ops' calls say they are gone. */
            failed = 1;
            continue;
        }
        if (rep->body_case != MXOP__REPLY__BODY_OPS)
            return mxop__fail(c, MXOP_EPROTOCOL,
                              "mxop-serverd answered LoadLibrary without an op list");
        if (rep->ops != NULL && rep->ops->confined)
            c->confined = 1;
        list = rep->ops;
        failed = 0;
    }
    if (failed) {
        /* The list of the last library loaded went with the failed load's reply: asked again. */
        Mxop__ListOps body = MXOP__LIST_OPS__INIT;
        Mxop__Request req = MXOP__REQUEST__INIT;
        req.body_case = MXOP__REQUEST__BODY_LIST_OPS;
        req.list_ops = &body;
        int rc = mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &rep, NULL);
        if (rc < 0)
            return rc;
        if (rep->body_case != MXOP__REPLY__BODY_OPS)
            return mxop__fail(c, MXOP_EPROTOCOL,
                              "mxop-serverd answered ListOps without an op list");
        list = rep->ops;
    }
    int rc = ops_remap(c, list);
    if (rc == 0)
        rc = mxop__ops_update(c, list);
    return rc;
}

/* Drops everything of the session on the daemon that went away. */
static void forget_session(mxop_client_t *c)
{
    mxop__ctlchan_hangup(&c->ctl);
    mxop__sess_to(c, MXOP__SESS_OPENING, -1, 0, NULL);
    if (c->call_page != NULL)
        munmap(c->call_page, sizeof(mxop__call_page_t));
    c->call_page = NULL;
    mxop__lease_unmap(&c->lease);
    c->ev_code = 0;
    c->ev_call_id = 0;
    c->ev_has_op = 0;
    c->ev_msg[0] = '\0';
    c->idle_note[0] = '\0';
    c->confined = 0;
    /* The old session's states: ids of a worker that is gone. */
    for (size_t i = 0; i < c->rcn->nstates; i++)
        c->rcn->states[i].lost = 1;
}

/*
 * Reconnects, trying for budget_ms (`full`: the client's whole timeout; once
 * such a try found no daemon, later ones try once, so that calls do not each
 * wait out the timeout while the daemon stays away).
 */
static int reconnect(mxop_client_t *c, int budget_ms, int full)
{
    struct mxop__reconn *r = c->rcn;
    char why[MXOP__ERR_MAX];
    mxop__fmt(why, sizeof why, "%s", c->sess.why);
    forget_session(c);
    if (full && r->failed)
        budget_ms = 0;
    int64_t end = mxop__now_ns() + (int64_t)budget_ms * 1000000;
    int backoff = BACKOFF_FIRST_MS;
    int rc;
    for (int attempt = 1;; attempt++) {
        rc = mxop__session_open(c, r->path, r->name);
        if (rc == 0)
            break;
        mxop__ctlchan_hangup(&c->ctl);
        mxop__sess_to(c, MXOP__SESS_OPENING, -1, 0, NULL);
        int64_t left = end - mxop__now_ns();
        if (left <= 0 || rc == MXOP_EDENIED || rc == MXOP_EVERSION || rc == MXOP_EINVAL) {
            char last[MXOP__ERR_MAX];
            memcpy(last, c->err, sizeof last);
            if (full && rc != MXOP_EDENIED && rc != MXOP_EVERSION && rc != MXOP_EINVAL)
                r->failed = 1;
            char msg[MXOP__ERR_MAX];
            mxop__fmt(msg, sizeof msg,
                      "mxop-serverd went away (%s) and the client could not reconnect to %s "
                      "within %d ms (%d attempt%s; last: %s)",
                      why, r->path, budget_ms, attempt, attempt == 1 ? "" : "s", last);
            mxop__sess_to(c, MXOP__SESS_DEAD, -1, MXOP_EDISCONNECTED, msg);
            return mxop__fail(c, MXOP_EDISCONNECTED, "%s", msg);
        }
        int ms = backoff;
        if ((int64_t)ms * 1000000 > left)
            ms = (int)(left / 1000000) + 1;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    rc = reload_libraries(c);
    if (rc == 0)
        rc = mxop__regions_reregister(c);
    if (rc < 0) {
        /* Half a session is worse than none: the next call tries again. */
        char last[MXOP__ERR_MAX];
        memcpy(last, c->err, sizeof last);
        mxop__ctlchan_hangup(&c->ctl);
        mxop__sess_to(c, MXOP__SESS_OPENING, -1, 0, NULL);
        char msg[MXOP__ERR_MAX];
        mxop__fmt(msg, sizeof msg,
                  "mxop-serverd went away and the client reconnected to %s, but could not "
                  "restore its session: %s",
                  r->path, last);
        mxop__sess_to(c, MXOP__SESS_DEAD, -1, MXOP_EDISCONNECTED, msg);
        return mxop__fail(c, MXOP_EDISCONNECTED, "%s", msg);
    }
    r->count++;
    r->failed = 0;
    return 0;
}

static int reconnect_now(mxop_client_t *c, int budget_ms, int full)
{
    c->rcn->busy = 1;
    int rc = reconnect(c, budget_ms, full);
    c->rcn->busy = 0;
    return rc;
}

/* The daemon went away (as opposed to refusing, or breaking the protocol): worth reconnecting. */
static int daemon_gone(const mxop_client_t *c)
{
    return c->sess.state == MXOP__SESS_DEAD && c->sess.code == MXOP_EDISCONNECTED;
}

#define OFF_NOTE " (automatic reconnection is off: opts.reconnect or MXOP_RECONNECT)"

/* With reconnection off, the daemon's going away says so, for whoever wonders why it stuck. */
static void note_off(mxop_client_t *c)
{
    if (c->rcn == NULL || c->rcn->on || !daemon_gone(c) || strstr(c->sess.why, OFF_NOTE) != NULL)
        return;
    char msg[MXOP__ERR_MAX];
    mxop__fmt(msg, sizeof msg, "%s%s", c->sess.why, OFF_NOTE);
    mxop__sess_to(c, MXOP__SESS_DEAD, -1, c->sess.code, msg);
}

int mxop__reconnect_if_gone(mxop_client_t *c)
{
    note_off(c);
    if (!daemon_gone(c) || !mxop__reconnect_enabled(c) || c->rcn->busy)
        return 0;
    return reconnect_now(c, c->timeout_ms, 1);
}

int mxop__reconnect_after(mxop_client_t *c, int rc, const mxop_op_t *op, int rerun_safe, int *again)
{
    *again = 0;
    if (rc < 0 && c->rcn != NULL && !c->rcn->on && daemon_gone(c) &&
        strstr(c->err, OFF_NOTE) == NULL) {
        char was[MXOP__ERR_MAX];
        memcpy(was, c->err, sizeof was);
        note_off(c);
        return mxop__fail(c, rc, "%s%s", was, OFF_NOTE);
    }
    if (rc >= 0 || !daemon_gone(c) || !mxop__reconnect_enabled(c) || c->rcn->busy)
        return rc;
    char was[MXOP__ERR_MAX];
    memcpy(was, c->err, sizeof was);
    int budget = c->timeout_ms < INFLIGHT_BUDGET_MS ? c->timeout_ms : INFLIGHT_BUDGET_MS;
    int r2 = reconnect_now(c, budget, 0);
    if (r2 < 0)
        return r2;
    if (rerun_safe) {
        /* Nothing of the call can have stuck: it runs again on the new daemon. */
        *again = 1;
        return rc;
    }
    return mxop__fail(c, MXOP_EDISCONNECTED,
                      "mxop-serverd went away during this call%s%s%s (%s); the client reconnected "
                      "to %s: call again",
                      op != NULL ? " of op '" : "", op != NULL && op->name ? op->name : "",
                      op != NULL ? "'" : "", was, c->rcn->path);
}
