/*
 * client/pool.c - calls in flight from several threads on one client
 * a pool of sibling sessions.
 *
 * A client runs one call at a time under its lock.  With a pool
 * (mxop_connect_opts_t.max_sessions > 1), a forward or backward that finds
 * the lock taken by another thread's call goes to an idle sibling session
 * instead: a second session of the same daemon, opened on first need, with
 * its own worker.  A sibling replays the client's libraries (in the order
 * they were loaded) before its first call and after each new load, and
 * registers the client's regions (arena chunks, staging and user regions)
 * on first use, from a duplicate of their memfd: the same memory, mapped by
 * both workers, so arrays travel as they are with their region ids
 * translated.  Calls with an op state stay on the client (the state lives
 * in its worker), and so do calls with strides or device regions; when no
 * sibling is idle and the pool is full, the call waits for the lock as
 * before.
 *
 * Locking: the pool's own mutex guards its siblings and their busy
 * flags.  The client's region table (with each region's registrations
 * on the siblings, released by regions.c with the region) and library
 * list are read here under c->regions_lock and c->libs_lock only, while
 * another thread's call may hold c->lock: every change of those takes
 * both (regions.c, cuda.c, op_table.c).
 * A sibling is a client of its own without a pool, opened by session.c
 * and driven under its own lock: its library loads and region
 * registrations go through the public calls (which, without a pool, never
 * come back here), its forward or backward straight to invoke.c.  The
 * public mxop_forward and mxop_backward are here, above invoke.c: they
 * choose the client or a sibling, then call down.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/util.h"

typedef struct sib {
    mxop_client_t *c; /* NULL while being opened, or after failing to open */
    int busy;         /* a thread is using it */
    size_t nlibs;     /* the client's libraries loaded here so far */
} sib_t;

struct mxop__pool {
    pthread_mutex_t lock;
    char *path;
    char *name;
    /* What a sibling is opened with: the client's settings (timeout_ms changes). */
    int data_path;
    int32_t timeout_ms, connect_timeout_ms;
    int max; /* siblings at most (max_sessions - 1) */
    sib_t sibs[MXOP__POOL_MAX];
    int nsibs;
    uint64_t calls, errors; /* calls made on siblings, for mxop_stats */
};

int mxop__pool_init(mxop_client_t *c, const char *path, const char *name, int max_sessions)
{
    if (max_sessions <= 1)
        return 0;
    struct mxop__pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return MXOP_ENOMEM;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return MXOP_ENOMEM;
    }
    p->path = strdup(path);
    p->name = name != NULL ? strdup(name) : NULL;
    if (p->path == NULL || (name != NULL && p->name == NULL)) {
        free(p->path);
        free(p->name);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return MXOP_ENOMEM;
    }
    p->timeout_ms = c->timeout_ms;
    p->connect_timeout_ms = c->connect_timeout_ms;
    p->data_path = c->data_path;
    p->max = max_sessions - 1 < MXOP__POOL_MAX ? max_sessions - 1 : MXOP__POOL_MAX;
    c->pool = p;
    return 0;
}

void mxop__pool_free(mxop_client_t *c)
{
    struct mxop__pool *p = c->pool;
    if (p == NULL)
        return;
    for (int i = 0; i < p->nsibs; i++) {
        if (p->sibs[i].c != NULL) {
            mxop__client_hang_up(p->sibs[i].c);
            mxop__client_free(p->sibs[i].c);
        }
    }
    free(p->path);
    free(p->name);
    pthread_mutex_destroy(&p->lock);
    free(p);
    c->pool = NULL;
}

void mxop__pool_stats(mxop_client_t *c, uint64_t *calls, uint64_t *errors)
{
    struct mxop__pool *p = c->pool;
    *calls = *errors = 0;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    *calls = p->calls;
    *errors = p->errors;
    pthread_mutex_unlock(&p->lock);
}

/* An idle sibling marked busy (opened here if the pool may grow), or NULL. */
static sib_t *take_sibling(struct mxop__pool *p)
{
    sib_t *s = NULL;
    int open = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->nsibs; i++) {
        if (!p->sibs[i].busy && p->sibs[i].c != NULL) {
            s = &p->sibs[i];
            break;
        }
    }
    if (s == NULL && p->nsibs < p->max) {
        s = &p->sibs[p->nsibs++];
        memset(s, 0, sizeof *s);
        open = 1;
    }
    if (s != NULL)
        s->busy = 1;
    pthread_mutex_unlock(&p->lock);
    if (s == NULL || !open)
        return s;
    /* A sibling has no pool of its own; it reconnects as $MXOP_RECONNECT says. */
    mxop_client_t *sc = NULL;
    char err[MXOP__ERR_MAX];
    pthread_mutex_lock(&p->lock);
    int32_t timeout_ms = p->timeout_ms;
    pthread_mutex_unlock(&p->lock);
    int rc = mxop__client_open(p->path, p->name, p->data_path, timeout_ms, p->connect_timeout_ms,
                               MXOP_RECONNECT_DEFAULT, &sc, err, sizeof err);
    pthread_mutex_lock(&p->lock);
    if (rc < 0) {
        /* No more sessions (the daemon's limits, say): the pool stops
         * growing, and calls wait for the client as without it. */
        p->max = p->nsibs - 1;
        s->c = NULL;
        s->busy = 0;
        s = NULL;
    } else {
        s->c = sc;
    }
    pthread_mutex_unlock(&p->lock);
    return s;
}

static void give_sibling(struct mxop__pool *p, sib_t *s, int counted, int failed)
{
    pthread_mutex_lock(&p->lock);
    s->busy = 0;
    if (counted) {
        p->calls++;
        if (failed)
            p->errors++;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Loads into the sibling the libraries the client loaded since its last call. */
static int replay_libraries(mxop_client_t *c, sib_t *s)
{
    char name[4096];
    while (mxop__library_copy(c, s->nlibs, name, sizeof name)) {
        int rc = mxop_load_library(s->c, name);
        if (rc < 0)
            return rc;
        s->nlibs++;
    }
    return 0;
}

/* The sibling's id of the client's region `id` (registered there on first
 * use); 0 when it cannot have one (a device region, no descriptor). */
static uint32_t sibling_region(mxop_client_t *c, sib_t *s, uint32_t id)
{
    uint32_t sid = mxop__region_copy_find(c, id, s->c);
    if (sid != 0)
        return sid;

    int fd = -1;
    size_t size = 0;
    void *cmap = NULL;
    pthread_mutex_lock(&c->regions_lock);
    for (size_t i = 0; i < c->nregions; i++) {
        const mxop__region_t *r = &c->regions[i];
        if (r->id == id) {
            if (!r->cuda && r->fd >= 0) {
                fd = dup(r->fd);
                size = r->size;
                cmap = r->cmap; /* the client's writable mapping, for scratch mode's copies */
            }
            break;
        }
    }
    pthread_mutex_unlock(&c->regions_lock);
    if (fd < 0)
        return 0;
    int rc = mxop__region_register_shared(s->c, fd, size, cmap, &sid);
    close(fd);
    if (rc < 0)
        return 0;
    /* Recorded on the client's region, which releases it there when it goes (regions.c). */
    if (mxop__region_copy_add(c, id, s->c, sid) < 0) {
        (void)mxop_region_release(s->c, sid);
        return 0;
    }
    return sid;
}

/*
 * The arrays as the sibling names them: a region of the client's (named,
 * or the one a heap array's bytes lie in) by the sibling's id for it.  Bit
 * i of `writes`: the call writes array i; one in a region the client
 * marked read-only keeps the call on the client, which refuses it by name
 * (the sibling's copy of the region bears no mark).  -1: not on a sibling.
 */
static int translate(mxop_client_t *c, sib_t *s, const mxop_array_t *a, int n, uint64_t writes,
                     mxop_array_t *t)
{
    for (int i = 0; i < n; i++) {
        t[i] = a[i];
        uint32_t id;
        uint64_t off;
        int read_only;
        if (!mxop__lookup_for_sibling(c, &a[i], &id, &off, &read_only))
            continue; /* staged by the sibling, or a shared-heap block it registers itself */
        if (read_only && i < 64 && ((writes >> i) & 1u))
            return -1;
        uint32_t sid = sibling_region(c, s, id);
        if (sid == 0)
            return -1;
        t[i].region = sid;
        t[i].offset = off;
    }
    return 0;
}

/* Bit i: output i is written (its req is not null). */
static uint64_t out_writes(const mxop_array_t *out, int n_out)
{
    uint64_t w = 0;
    for (int i = 0; i < n_out && i < 64; i++)
        if (out[i].req != MXOP_REQ_NULL)
            w |= (uint64_t)1 << i;
    return w;
}

static int pool_try(mxop_client_t *c, const mxop_op_t *op, int backward, const mxop_call_t *call,
                    const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out, int *rc_out)
{
    struct mxop__pool *p = c->pool;
    if (p == NULL || op == NULL || op->client != c || op->stateful || op->name == NULL ||
        n_in < 0 || n_out < 0 || n_in > MXOP_MAX_TENSORS || n_out > MXOP_MAX_TENSORS ||
        (n_in > 0 && in == NULL) || (n_out > 0 && out == NULL))
        return 0; /* the client's own checks give the error */
    if (call != NULL) {
        if (call->struct_size >= offsetof(mxop_call_t, state) + sizeof call->state &&
            call->state != 0)
            return 0;
        if (call->struct_size >= offsetof(mxop_call_t, out_strides) + sizeof call->out_strides &&
            (call->in_strides != NULL || call->out_strides != NULL))
            return 0;
    }
    sib_t *s = take_sibling(p);
    if (s == NULL)
        return 0;
    const mxop_op_t *sop = NULL;
    mxop_array_t tin[MXOP_MAX_TENSORS], tout[MXOP_MAX_TENSORS];
    if (replay_libraries(c, s) < 0 || mxop_op_find(s->c, op->name, &sop) < 0 ||
        translate(c, s, in, n_in, backward ? 0 : op->mutated_inputs, tin) < 0 ||
        translate(c, s, out, n_out, out_writes(out, n_out), tout) < 0) {
        give_sibling(p, s, 0, 0);
        return 0;
    }
    /* The sibling has no pool: its call waits for its own lock. */
    pthread_mutex_lock(&s->c->lock);
    int rc = mxop__invoke_locked(s->c, sop, backward, call, tin, n_in, tout, n_out);
    pthread_mutex_unlock(&s->c->lock);
    if (rc < 0) {
        mxop__error_of_sibling(c, mxop_last_error(s->c));
    } else {
        mxop__error_forget_sibling();
        /* A dynamic-shape output's real shape, as the sibling learnt it. */
        for (int i = 0; i < n_out; i++) {
            out[i].ndim = tout[i].ndim;
            memcpy(out[i].shape, tout[i].shape, sizeof out[i].shape);
            out[i].nbytes = tout[i].nbytes;
        }
    }
    give_sibling(p, s, 1, rc < 0);
    *rc_out = rc;
    return 1;
}

/*
 * The engine's forward and backward: on the client under its lock, or, when
 * another thread's call holds that lock and the client has a pool, on an
 * idle sibling.  Without a pool this is the lock and invoke.c's call.
 */
static int invoke(mxop_client_t *c, const mxop_op_t *op, int backward, const mxop_call_t *call,
                  const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out)
{
    if (c == NULL)
        return MXOP_EINVAL;
    if (c->pool == NULL) {
        pthread_mutex_lock(&c->lock);
    } else if (pthread_mutex_trylock(&c->lock) != 0) {
        /* Another thread's call has the session: a sibling takes this one. */
        int rc;
        if (pool_try(c, op, backward, call, in, n_in, out, n_out, &rc))
            return rc;
        pthread_mutex_lock(&c->lock);
    }
    int rc = mxop__invoke_locked(c, op, backward, call, in, n_in, out, n_out);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_forward(mxop_client_t *c, const mxop_op_t *op, const mxop_call_t *call,
                 const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out)
{
    return invoke(c, op, 0, call, in, n_in, out, n_out);
}

int mxop_backward(mxop_client_t *c, const mxop_op_t *op, const mxop_call_t *call,
                  const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out)
{
    return invoke(c, op, 1, call, in, n_in, out, n_out);
}

void mxop__pool_set_timeout(mxop_client_t *c, int32_t timeout_ms)
{
    struct mxop__pool *p = c->pool;
    if (p == NULL)
        return;
    mxop_client_t *sibs[MXOP__POOL_MAX];
    int n = 0;
    pthread_mutex_lock(&p->lock);
    p->timeout_ms = timeout_ms; /* for siblings opened later */
    for (int i = 0; i < p->nsibs; i++)
        if (p->sibs[i].c != NULL)
            sibs[n++] = p->sibs[i].c;
    pthread_mutex_unlock(&p->lock);
    /* Outside the pool's lock: a sibling busy with a call is waited for. */
    for (int i = 0; i < n; i++)
        (void)mxop__client_set_timeout(sibs[i], timeout_ms);
}
