/*
 * client/stats.c - counters, the default deadline, and the daemon's
 * shutdown (the error detail is error.c's).
 */
#include <stdio.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"

int mxop_set_timeout(mxop_client_t *c, int32_t timeout_ms)
{
    if (c == NULL)
        return MXOP_EINVAL;
    int rc = mxop__client_set_timeout(c, timeout_ms);
    if (rc == 0)
        mxop__pool_set_timeout(c, timeout_ms);
    return rc;
}

int mxop_stats(mxop_client_t *c, mxop_stats_t *st)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    if (st == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_stats: st is NULL");
        goto out;
    }

    Mxop__Stats body = MXOP__STATS__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_STATS;
    req.stats = &body;
    Mxop__Reply *r;
    rc = mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL);
    if (rc == 0 && (r->body_case != MXOP__REPLY__BODY_STATS || r->stats == NULL))
        rc = mxop__fail(c, MXOP_EPROTOCOL, "mxop-serverd answered Stats without statistics");
    uint32_t sessions = rc == 0 ? r->stats->sessions : 0;

    /* The local part is filled even when the daemon could not answer.
     * Restarts are counted here, as the client learns of them, so the
     * count matches the errors the engine has seen. */
    uint64_t regions = 0, bytes = 0;
    for (size_t i = 0; i < c->nregions; i++) {
        regions++;
        bytes += c->regions[i].size;
    }
    c->stats.regions = regions;
    c->stats.region_bytes = bytes;
    c->stats.worker_pid = c->worker_pid;
    c->stats.daemon_sessions = sessions;
    *st = c->stats;
    uint64_t pcalls, perrors;
    mxop__pool_stats(c, &pcalls, &perrors);
    st->calls += pcalls;
    st->errors += perrors;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_stats_v2(mxop_client_t *c, mxop_stats_v2_t *st)
{
    if (c == NULL)
        return MXOP_EINVAL;
    if (st == NULL || st->struct_size == 0) {
        pthread_mutex_lock(&c->lock);
        int rc = mxop__fail(c, MXOP_EINVAL, "mxop_stats_v2: %s",
                            st == NULL ? "st is NULL" : "set st->struct_size first");
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    mxop_stats_t old;
    memset(&old, 0, sizeof(old));
    int rc = mxop_stats(c, &old);
    mxop_stats_v2_t v;
    memset(&v, 0, sizeof(v));
    v.struct_size = st->struct_size < sizeof(v) ? st->struct_size : (uint32_t)sizeof(v);
    v.worker_pid = old.worker_pid;
    v.daemon_sessions = old.daemon_sessions;
    v.calls = old.calls;
    v.errors = old.errors;
    v.worker_restarts = old.worker_restarts;
    v.staged_bytes = old.staged_bytes;
    v.regions = old.regions;
    v.region_bytes = old.region_bytes;
    pthread_mutex_lock(&c->lock);
    v.scratch_bytes = c->scratch_bytes;
    v.confined = (uint32_t)c->confined;
    pthread_mutex_unlock(&c->lock);
    /* Write only what the caller's struct has room for. */
    memcpy(st, &v, v.struct_size);
    return rc;
}

int mxop_shutdown_daemon(mxop_client_t *c)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    Mxop__Shutdown body = MXOP__SHUTDOWN__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_SHUTDOWN;
    req.shutdown = &body;
    Mxop__Reply *r;
    int was_dead = c->sess.state == MXOP__SESS_DEAD;
    int rc = mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL);
    /* A daemon that closes the connection at once has still been asked and
     * is going away; only a refusal (MXOP_EDENIED) is a failure. */
    if (rc == MXOP_EDISCONNECTED && !was_dead)
        rc = 0;
    if (rc == 0)
        mxop__sess_to(c, MXOP__SESS_DEAD, -1, MXOP_EDISCONNECTED,
                      "mxop-serverd was shut down by this client");
    pthread_mutex_unlock(&c->lock);
    return rc;
}
