/*
 * server/daemon/session/ctl.c - the control protocol of one client.
 *
 * A connection goes Hello -> OpenSession -> requests.  Requests that need
 * the worker (LoadLibrary, RegisterRegion, ReleaseRegion) are forwarded on
 * its supervisor channel as pending entries (tables.c); the worker's
 * answers complete them (replay.c).  What a request may look like was
 * checked before it got here (ctl_validate.c).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/memconfine.h"
#include "server/daemon/session/session.h"
#include "shm/region.h"

static mxop__ctl_verdict_t handle_hello(mxop__client_t *cl, const Mxop__Request *req)
{
    const Mxop__Hello *h = req->hello;
    uint32_t lo = h->min_version;
    uint32_t hi = h->max_version;
    const char *name = h->client_name != NULL ? h->client_name : "";
    size_t n = strnlen(name, sizeof(cl->name) - 1);
    for (size_t i = 0; i < n; i++)
        cl->name[i] = ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) ? '?' : name[i];
    cl->name[n] = '\0';

    uint32_t best = hi < MXOP__DAEMON_PROTO_MAX ? hi : MXOP__DAEMON_PROTO_MAX;
    uint32_t floor = lo > MXOP__DAEMON_PROTO_MIN ? lo : MXOP__DAEMON_PROTO_MIN;
    if (lo > hi || best < floor) {
        char msg[MXOP__MSG_MAX];
        mxop__fmt(msg, sizeof(msg),
                  "client speaks protocol versions [%u, %u], this daemon speaks [%u, %u]",
                  (unsigned)lo, (unsigned)hi, MXOP__DAEMON_PROTO_MIN, MXOP__DAEMON_PROTO_MAX);
        MXOP__LOGW(0, NULL, "client %llu (%s): %s", (unsigned long long)cl->id, cl->name, msg);
        mxop__client_reply_error(cl, req->id, MXOP_EVERSION, msg);
        return MXOP__CTL_CLOSE;
    }
    cl->version = best;
    cl->hello_done = true;

    Mxop__HelloReply hr = MXOP__HELLO_REPLY__INIT;
    hr.version = best;
    hr.server_version = MXOP_VERSION_STRING;
    hr.max_frame = MXOP__FRAME_MAX;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req->id;
    r.body_case = MXOP__REPLY__BODY_HELLO;
    r.hello = &hr;
    mxop__reply_send(cl, &r, -1);
    MXOP__LOGI(0, NULL, "client %llu '%s' (uid %u, pid %d) speaks protocol %u",
               (unsigned long long)cl->id, cl->name, (unsigned)cl->uid, (int)cl->pid,
               (unsigned)best);
    return MXOP__CTL_KEEP;
}

static void handle_load(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req)
{
    /* ctl_validate.c has refused a path with a NUL byte: the decoded string is all of it. */
    const char *name = req->load_library->path != NULL ? req->load_library->path : "";
    size_t name_len = strlen(name);
    char resolved[PATH_MAX];
    char err[MXOP__MSG_MAX];
    int rc = mxop__plugin_resolve(s->d->cfg.plugin_dir, name, name_len, resolved, sizeof(resolved),
                                  err, sizeof(err));
    if (rc != 0) {
        MXOP__LOGI(s->id, NULL, "LoadLibrary refused: %s", err);
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    if (mxop__session_find_lib(s, resolved) != NULL) {
        /* Already loaded: the list as it is, without troubling the worker. */
        mxop__reply_ops(s, req->id);
        return;
    }
    rc = mxop__quarantine_check(s->d, resolved, err, sizeof(err));
    if (rc != 0) {
        MXOP__LOGI(s->id, NULL, "LoadLibrary of '%s' refused: %s", name, err);
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    size_t loading = 0;
    for (const mxop__pending_t *q = mxop__worker_queue(s->worker); q != NULL; q = q->next)
        loading += q->kind == MXOP__PENDING_LOAD && !q->replay;
    if (s->n_libs + loading >= s->d->cfg.session_max_libs) {
        mxop__reply_errorf(cl, req->id, MXOP_ELIMIT,
                           "session %llu already has %zu libraries, the most a session may load "
                           "(--session-max-libraries %llu)",
                           (unsigned long long)s->id, s->n_libs + loading,
                           (unsigned long long)s->d->cfg.session_max_libs);
        return;
    }
    rc = mxop__session_need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_LOAD, req->id, false);
    if (p == NULL || (p->path = strdup(resolved)) == NULL || (p->name = strdup(name)) == NULL) {
        mxop__pending_free(p);
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a library load");
        return;
    }
    /*
     * The daemon opens the library and the worker loads that descriptor
     * (libfd.c); its version, for Reload and `mxop load` (libver.c), and the
     * allowlist's verdict come from the same descriptor.
     */
    rc = mxop__libfd_open(s->d, p, err, sizeof(err));
    if (rc != 0) {
        mxop__pending_free(p);
        MXOP__LOGI(s->id, NULL, "LoadLibrary refused: %s", err);
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    /* An untrusted library under strict: the session's regions become read-only to it first. */
    if (!p->allow_trusted && !mxop__memconfine_trusted(s->d, resolved)) {
        rc = mxop__memconfine_session(s, err, sizeof(err));
        if (rc != 0) {
            mxop__pending_free(p);
            mxop__reply_errorf(cl, req->id, rc, "LoadLibrary of '%s' refused: %s", name, err);
            return;
        }
    }
    rc = mxop__pending_send_client(s, p, -1);
    if (rc != 0) {
        mxop__pending_free(p);
        mxop__reply_errorf(cl, req->id, rc, "cannot forward LoadLibrary of '%s' to the worker: %s",
                           name, mxop_strerror(rc));
        return;
    }
    MXOP__LOGD(s->id, NULL, "loading library '%s' (%s)", name, resolved);
}

/* The session's region quotas (--session-max-regions, --session-max-region-mb), answered. */
static int region_quota(mxop__client_t *cl, mxop__session_t *s, uint64_t req_id, uint64_t size)
{
    const mxop__config_t *cfg = &s->d->cfg;
    if (s->n_regions + s->n_pending_maps >= cfg->session_max_regions) {
        mxop__reply_errorf(cl, req_id, MXOP_ELIMIT,
                           "session %llu already holds %zu regions, the most a session may have "
                           "(--session-max-regions %llu)",
                           (unsigned long long)s->id, s->n_regions + s->n_pending_maps,
                           (unsigned long long)cfg->session_max_regions);
        return MXOP_ELIMIT;
    }
    uint64_t limit = cfg->session_max_region_mb << 20;
    if (limit != 0 && (size > limit || s->region_bytes + s->pending_map_bytes > limit - size)) {
        mxop__reply_errorf(cl, req_id, MXOP_ELIMIT,
                           "a region of %llu bytes would take session %llu past %llu MiB of "
                           "regions (--session-max-region-mb); it holds %llu bytes",
                           (unsigned long long)size, (unsigned long long)s->id,
                           (unsigned long long)cfg->session_max_region_mb,
                           (unsigned long long)(s->region_bytes + s->pending_map_bytes));
        return MXOP_ELIMIT;
    }
    return 0;
}

/*
 * A device region: GPU memory of the engine, named by its CUDA IPC handle.
 * The daemon cannot check it (it does not touch CUDA); it checks the form
 * and keeps the handle, to be replayed like an fd; the worker opens it.
 */
static void handle_register_cuda(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req)
{
    const Mxop__RegisterRegion *rr = req->register_region;
    char err[MXOP__MSG_MAX];
    int rc;
    if (mxop__conn_frame_nfds(&cl->conn) != 0) {
        mxop__client_reply_error(cl, req->id, MXOP_EINVAL,
                                 "RegisterRegion of a device region carries an fd; a CUDA IPC "
                                 "handle needs none");
        return; /* the connection closes unclaimed descriptors */
    }
    /* The handle's length, the ordinal and the size were checked by mxop__ctl_validate. */
    if (region_quota(cl, s, req->id, rr->size) != 0)
        return;
    rc = mxop__session_need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_MAP, req->id, false);
    if (p == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a region");
        return;
    }
    p->region = mxop__session_new_region_id(s);
    p->size = rr->size;
    p->cuda = true;
    p->device = rr->device;
    memcpy(p->ipc, rr->cuda_ipc_handle.data, sizeof(p->ipc));
    rc = mxop__pending_send_client(s, p, -1);
    if (rc != 0) {
        mxop__pending_free(p);
        mxop__reply_errorf(cl, req->id, rc, "cannot forward the region to the worker: %s",
                           mxop_strerror(rc));
        return;
    }
    s->n_pending_maps++;
    s->pending_map_bytes += p->size;
}

static void handle_register(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req)
{
    if (req->register_region->cuda_ipc_handle.len > 0) {
        handle_register_cuda(cl, s, req);
        return;
    }
    int nfds = mxop__conn_frame_nfds(&cl->conn);
    if (nfds != 1) {
        if (nfds == 0)
            mxop__client_reply_error(cl, req->id, MXOP_EINVAL, "RegisterRegion carries no fd");
        else
            mxop__reply_errorf(cl, req->id, MXOP_EINVAL,
                               "RegisterRegion carries %d fds; exactly one is expected", nfds);
        return; /* the connection closes unclaimed descriptors */
    }
    int fd = mxop__conn_take_fd(&cl->conn);
    uint64_t size = req->register_region->size;
    char err[MXOP__MSG_MAX];
    int rc;
    /* A size of 0 was refused by mxop__ctl_validate. */
    char why[256];
    rc = mxop__region_check_fd(fd, size, why, sizeof(why));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, why);
        goto err_fd;
    }
    if (region_quota(cl, s, req->id, size) != 0)
        goto err_fd;
    rc = mxop__memconfine_check_region(s, fd, req->register_region->scratch, err, sizeof(err));
    if (rc != 0) {
        mxop__reply_errorf(cl, req->id, rc, "region refused: %s", err);
        goto err_fd;
    }
    rc = mxop__session_need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        goto err_fd;
    }
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_MAP, req->id, false);
    if (p == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a region");
        goto err_fd;
    }
    /* Ids are never 0 (that is MXOP_REGION_HEAP) and never reused while held. */
    p->region = mxop__session_new_region_id(s);
    p->size = size;
    p->scratch = req->register_region->scratch;
    p->reserved_from = req->register_region->reserved_from;
    rc = mxop__pending_send_client(s, p, fd);
    if (rc != 0) {
        mxop__pending_free(p);
        mxop__reply_errorf(cl, req->id, rc, "cannot forward the region to the worker: %s",
                           mxop_strerror(rc));
        goto err_fd;
    }
    p->fd = fd; /* kept until the worker has mapped it */
    s->n_pending_maps++;
    s->pending_map_bytes += p->size;
    return;

err_fd:
    close(fd);
}

/*
 * The client found its worker unusable (garbage on the data channel): kill
 * it; the death is handled as any other, and its WorkerEvent brings the
 * replacement's channel.  A client can only ever replace its own worker,
 * which it could also do by writing garbage to it.
 */
static void handle_replace(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req)
{
    char err[MXOP__MSG_MAX];
    int rc = mxop__session_need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    /* A worker that garbled its channel and then died (a worker answers a
     * bad frame so, and exits) was replaced by its own death: the client's
     * request, which crossed the WorkerEvent, must not cost a second worker. */
    uint32_t gen = req->replace_worker->generation;
    if (gen != 0 && s->worker != NULL && s->worker->generation != gen) {
        mxop__reply_ok(cl, req->id);
        return;
    }
    /* The client's words go to the log: printable bytes only, and not too many. */
    char reason[200];
    const char *r = req->replace_worker->reason != NULL ? req->replace_worker->reason : "";
    size_t n = 0;
    for (; r[n] != '\0' && n + 1 < sizeof(reason); n++)
        reason[n] = r[n] >= 0x20 && r[n] < 0x7f ? r[n] : '?';
    reason[n] = '\0';
    char why[MXOP__MSG_MAX];
    mxop__fmt(why, sizeof(why), "the client asked for a new worker: %s",
              n > 0 ? reason : "(no reason given)");
    mxop__worker_kill(s->worker, why); /* which logs it */
    mxop__reply_ok(cl, req->id);
}

static void handle_release(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req)
{
    uint32_t id = req->release_region->region;
    ssize_t i = mxop__session_find_region(s, id);
    if (i < 0) {
        mxop__reply_errorf(cl, req->id, MXOP_EUNKNOWN_REGION, "session %llu has no region %u",
                           (unsigned long long)s->id, (unsigned)id);
        return;
    }
    /* Gone from the session at once, so a restart does not map it again. */
    if (s->regions[i].fd >= 0)
        close(s->regions[i].fd);
    s->region_bytes -= s->regions[i].size;
    s->regions[i] = s->regions[--s->n_regions];
    char why[MXOP__MSG_MAX];
    if (mxop__mirror_unmap(s, id, why, sizeof(why)) != 0)
        mxop__spare_event(s, MXOP__SPARE_EV_FAILED, why);

    char err[MXOP__MSG_MAX];
    if (mxop__session_need_worker(s, err, sizeof(err)) != 0) {
        mxop__reply_ok(cl, req->id);
        return;
    }
    mxop__pending_t *p = mxop__pending_new(s, MXOP__PENDING_UNMAP, req->id, false);
    if (p == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a region release");
        return;
    }
    p->region = id;
    if (mxop__pending_send(s, p, -1, MXOP__FIFO_LIVE) != 0) {
        /* The worker is going away; its mappings go with it. */
        mxop__pending_free(p);
        mxop__reply_ok(cl, req->id);
    }
}

static void handle_stats(mxop__client_t *cl, const Mxop__Request *req)
{
    mxop__daemon_t *d = cl->d;
    mxop__session_t *s = cl->session;
    Mxop__StatsReply st = MXOP__STATS_REPLY__INIT;
    st.sessions = d->n_sessions;
    st.uptime_ms = (uint64_t)((mxop__now_ns() - d->start_ns) / 1000000LL);
    if (s != NULL) {
        st.worker_restarts = s->restarts;
        st.regions = (uint32_t)s->n_regions;
        st.region_bytes = s->region_bytes;
        st.worker_pid = s->worker != NULL ? (uint32_t)s->worker->pid : 0;
    }
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req->id;
    r.body_case = MXOP__REPLY__BODY_STATS;
    r.stats = &st;
    mxop__reply_send(cl, &r, -1);
}

static void handle_shutdown(mxop__client_t *cl, const Mxop__Request *req)
{
    mxop__daemon_t *d = cl->d;
    if (!mxop__client_is_admin(d, cl)) {
        char err[MXOP__MSG_MAX];
        int rc = mxop__admin_refusal(d, cl, "Shutdown", err, sizeof(err));
        MXOP__LOGW(0, NULL, "client %llu: %s", (unsigned long long)cl->id, err);
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    mxop__reply_ok(cl, req->id);
    char why[96];
    mxop__fmt(why, sizeof(why), "Shutdown requested by client %llu (uid %u, pid %d)",
              (unsigned long long)cl->id, (unsigned)cl->uid, (int)cl->pid);
    /* The stop itself, when nothing is in flight, is the next tick's (watchdog.c). */
    (void)mxop__drain_begin(d, why);
}

/* A request on a connection past its Hello. */
static void serve(mxop__client_t *cl, const Mxop__Request *req)
{
    int body = (int)req->body_case;
    mxop__session_t *s = cl->session;
    switch (body) {
    case MXOP__REQUEST__BODY_HELLO:
        mxop__client_reply_error(cl, req->id, MXOP_EPROTOCOL,
                                 "Hello was already negotiated on this connection");
        return;
    case MXOP__REQUEST__BODY_OPEN_SESSION:
        if (s != NULL) {
            mxop__reply_errorf(cl, req->id, MXOP_EPROTOCOL,
                               "this connection already has session %llu; open another "
                               "connection for another session",
                               (unsigned long long)s->id);
            return;
        }
        mxop__session_open(cl, req->id);
        return;
    case MXOP__REQUEST__BODY_STATS: handle_stats(cl, req); return;
    case MXOP__REQUEST__BODY_SHUTDOWN: handle_shutdown(cl, req); return;
    /* Hot reload (reload.c). */
    case MXOP__REQUEST__BODY_RELOAD: mxop__ctl_reload(cl, req); return;
    case MXOP__REQUEST__BODY_SESSION_LIBRARIES: mxop__ctl_session_libraries(cl, req); return;
    case MXOP__REQUEST__BODY_DAEMON_STATUS: mxop__introspect_status(cl, req); return;
    case MXOP__REQUEST__BODY_DAEMON_STATS: mxop__introspect_stats(cl, req); return;
    case MXOP__REQUEST__BODY_LOAD_LIBRARY:
    case MXOP__REQUEST__BODY_LIST_OPS:
    case MXOP__REQUEST__BODY_REGISTER_REGION:
    case MXOP__REQUEST__BODY_RELEASE_REGION:
    case MXOP__REQUEST__BODY_REPLACE_WORKER: break;
    default:
        mxop__reply_errorf(cl, req->id, MXOP_EPROTOCOL,
                           "request %llu has no body this daemon knows (protocol %u)",
                           (unsigned long long)req->id, (unsigned)cl->version);
        return;
    }

    if (s == NULL) {
        mxop__reply_errorf(cl, req->id, MXOP_EPROTOCOL, "%s needs a session: open a session first",
                           mxop__ctl_body_name(body));
        return;
    }
    switch (body) {
    case MXOP__REQUEST__BODY_LOAD_LIBRARY: handle_load(cl, s, req); break;
    case MXOP__REQUEST__BODY_LIST_OPS: mxop__reply_ops(s, req->id); break;
    case MXOP__REQUEST__BODY_REGISTER_REGION: handle_register(cl, s, req); break;
    case MXOP__REQUEST__BODY_REPLACE_WORKER: handle_replace(cl, s, req); break;
    default: handle_release(cl, s, req); break;
    }
}

mxop__ctl_verdict_t mxop__ctl_handle(mxop__client_t *cl, const Mxop__Request *req,
                                     const uint8_t *payload, uint32_t len)
{
    (void)payload;
    (void)len;
    int body = (int)req->body_case;
    if (cl->hello_done) {
        serve(cl, req);
        return MXOP__CTL_KEEP;
    }
    if (body != MXOP__REQUEST__BODY_HELLO) {
        mxop__reply_errorf(cl, req->id, MXOP_EPROTOCOL,
                           "the first request on a connection must be Hello, not %s",
                           mxop__ctl_body_name(body));
        return MXOP__CTL_CLOSE;
    }
    return handle_hello(cl, req);
}
