/*
 * server/daemon/session.c - the control protocol, one state machine per client.
 *
 * A connection goes Hello -> OpenSession -> requests.  Requests that need
 * the worker (LoadLibrary, RegisterRegion, ReleaseRegion) are forwarded on
 * its supervisor channel; the worker answers in order, and a FIFO of
 * pending entries records which client request each SupReply completes.
 *
 * The session remembers what it loaded and registered, so that after a
 * worker dies the replacement is given the same libraries (in the same
 * order, so op indices stay stable) and the same regions before the client
 * is told, with the new data channel, that the worker was restarted.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/daemon.h"
#include "server/daemon/log.h"
#include "shm/region.h"

/* ------------------------------------------------------------------------ */
/* Replies. */

static void send_reply(mxop__client_t *cl, Mxop__Reply *r, int fd)
{
    if (cl == NULL || cl->conn.closing)
        return;
    int rc = mxop__conn_send(&cl->conn, MXOP__KIND_CTL_REPLY, &r->base, fd >= 0 ? &fd : NULL,
                             fd >= 0 ? 1 : 0);
    if (rc == MXOP_EFRAME_TOO_LARGE) {
        /* Say so rather than leave the client waiting for an answer. */
        Mxop__Reply e = MXOP__REPLY__INIT;
        e.id = r->id;
        e.status = MXOP_EFRAME_TOO_LARGE;
        e.message = "the reply exceeds the maximum frame size";
        rc = mxop__conn_send(&cl->conn, MXOP__KIND_CTL_REPLY, &e.base, NULL, 0);
    }
    if (rc != 0 && rc != MXOP_EDISCONNECTED)
        MXOP__LOGW(cl->session ? cl->session->id : 0, NULL,
                   "cannot send a reply to client %llu: %s", (unsigned long long)cl->id,
                   mxop_err_name(rc));
}

void mxop__client_reply_error(mxop__client_t *cl, uint64_t id, int code, const char *msg)
{
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = id;
    r.status = code;
    r.message = (char *)(msg != NULL && msg[0] != '\0' ? msg : mxop_strerror(code));
    send_reply(cl, &r, -1);
}

static void reply_errorf(mxop__client_t *cl, uint64_t id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_errorf(mxop__client_t *cl, uint64_t id, int code, const char *fmt, ...)
{
    char msg[MXOP__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mxop__client_reply_error(cl, id, code, msg);
}

static void reply_ok(mxop__client_t *cl, uint64_t id)
{
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = id;
    send_reply(cl, &r, -1);
}

static void reply_ops(mxop__session_t *s, uint64_t id)
{
    Mxop__OpInfo *stack[64];
    Mxop__OpInfo **ptrs = stack;
    if (s->n_ops > 64) {
        ptrs = malloc(sizeof(*ptrs) * s->n_ops);
        if (ptrs == NULL) {
            mxop__client_reply_error(s->client, id, MXOP_ENOMEM, "out of memory for the op list");
            return;
        }
    }
    for (size_t i = 0; i < s->n_ops; i++)
        ptrs[i] = &s->ops[i];
    Mxop__OpList list = MXOP__OP_LIST__INIT;
    list.n_ops = s->n_ops;
    list.ops = ptrs;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = id;
    r.body_case = MXOP__REPLY__BODY_OPS;
    r.ops = &list;
    send_reply(s->client, &r, -1);
    if (ptrs != stack)
        free(ptrs);
}

/* ------------------------------------------------------------------------ */
/* Session state. */

static char *xstrdup(const char *s)
{
    return strdup(s != NULL ? s : "");
}

static void op_free(Mxop__OpInfo *op)
{
    free(op->name);
    free(op->description);
    free(op->library);
}

static int op_copy(Mxop__OpInfo *dst, const Mxop__OpInfo *src, const char *libname)
{
    mxop__op_info__init(dst);
    dst->index = src->index;
    dst->num_inputs = src->num_inputs;
    dst->min_inputs = src->min_inputs;
    dst->num_outputs = src->num_outputs;
    dst->mutated_inputs = src->mutated_inputs;
    dst->has_backward = src->has_backward;
    dst->stateful = src->stateful;
    dst->name = xstrdup(src->name);
    dst->description = xstrdup(src->description);
    dst->library =
        xstrdup(src->library != NULL && src->library[0] != '\0' ? src->library : libname);
    if (dst->name == NULL || dst->description == NULL || dst->library == NULL) {
        op_free(dst);
        return MXOP_ENOMEM;
    }
    return 0;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 8;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (p == NULL)
        return MXOP_ENOMEM;
    *arr = p;
    *cap = n;
    return 0;
}

static const mxop__lib_t *find_lib(const mxop__session_t *s, const char *path)
{
    for (size_t i = 0; i < s->n_libs; i++)
        if (strcmp(s->libs[i].path, path) == 0)
            return &s->libs[i];
    return NULL;
}

/* Appends a loaded library and its ops.  On failure nothing is added. */
static int add_lib(mxop__session_t *s, const char *path, const char *name, const Mxop__SupReply *r)
{
    if (grow((void **)&s->libs, &s->cap_libs, s->n_libs + 1, sizeof(*s->libs)) != 0 ||
        grow((void **)&s->ops, &s->cap_ops, s->n_ops + r->n_ops, sizeof(*s->ops)) != 0)
        return MXOP_ENOMEM;
    mxop__lib_t lib = {.path = strdup(path), .name = strdup(name)};
    if (lib.path == NULL || lib.name == NULL)
        goto err_lib;
    size_t i;
    for (i = 0; i < r->n_ops; i++)
        if (op_copy(&s->ops[s->n_ops + i], r->ops[i], name) != 0)
            goto err_ops;
    s->n_ops += r->n_ops;
    s->libs[s->n_libs++] = lib;
    return 0;

err_ops:
    while (i-- > 0)
        op_free(&s->ops[s->n_ops + i]);
err_lib:
    free(lib.path);
    free(lib.name);
    return MXOP_ENOMEM;
}

static ssize_t find_region(const mxop__session_t *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_regions; i++)
        if (s->regions[i].id == id)
            return (ssize_t)i;
    return -1;
}

static mxop__pending_t *pending_new(mxop__session_t *s, int kind, uint64_t req_id, bool replay)
{
    mxop__pending_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->sup_id = s->next_sup_id++;
    p->req_id = req_id;
    p->kind = kind;
    p->replay = replay;
    p->fd = -1;
    return p;
}

static void pending_free(mxop__pending_t *p)
{
    if (p == NULL)
        return;
    free(p->path);
    free(p->name);
    if (p->fd >= 0)
        close(p->fd);
    free(p);
}

static void pending_push(mxop__session_t *s, mxop__pending_t *p)
{
    p->next = NULL;
    if (s->pend_tail != NULL)
        s->pend_tail->next = p;
    else
        s->pend_head = p;
    s->pend_tail = p;
}

static mxop__pending_t *pending_take(mxop__session_t *s, uint64_t sup_id)
{
    mxop__pending_t *prev = NULL;
    for (mxop__pending_t *p = s->pend_head; p != NULL; prev = p, p = p->next) {
        if (p->sup_id != sup_id)
            continue;
        if (prev != NULL)
            prev->next = p->next;
        else
            s->pend_head = p->next;
        if (s->pend_tail == p)
            s->pend_tail = prev;
        p->next = NULL;
        return p;
    }
    return NULL;
}

/* Sends the SupRequest for a pending entry; `fd` rides with it (borrowed) when >= 0. */
static int pending_send(mxop__session_t *s, mxop__pending_t *p, int fd)
{
    Mxop__SupRequest req = MXOP__SUP_REQUEST__INIT;
    Mxop__WorkerLoad load = MXOP__WORKER_LOAD__INIT;
    Mxop__WorkerMap map = MXOP__WORKER_MAP__INIT;
    Mxop__WorkerUnmap unmap = MXOP__WORKER_UNMAP__INIT;
    req.id = p->sup_id;
    switch (p->kind) {
    case MXOP__PENDING_LOAD:
        load.path = p->path;
        load.name = p->name;
        req.body_case = MXOP__SUP_REQUEST__BODY_LOAD;
        req.load = &load;
        break;
    case MXOP__PENDING_MAP:
        map.region = p->region;
        map.size = p->size;
        if (p->cuda) {
            map.cuda_ipc_handle.data = p->ipc;
            map.cuda_ipc_handle.len = sizeof(p->ipc);
            map.device = p->device;
        }
        req.body_case = MXOP__SUP_REQUEST__BODY_MAP;
        req.map = &map;
        break;
    default:
        unmap.region = p->region;
        req.body_case = MXOP__SUP_REQUEST__BODY_UNMAP;
        req.unmap = &unmap;
        break;
    }
    int rc = mxop__worker_send(s->worker, &req, fd);
    if (rc == 0)
        pending_push(s, p);
    return rc;
}

/* 0 when the session has a worker to forward to, else the code and a message. */
static int need_worker(mxop__session_t *s, char *err, size_t errlen)
{
    if (s->dead) {
        mxop__fmt(err, errlen, "%s", s->dead_msg);
        return MXOP_EWORKER_CRASHED;
    }
    if (s->worker == NULL) {
        mxop__fmt(err, errlen, "session %llu has no running worker", (unsigned long long)s->id);
        return MXOP_EWORKER_CRASHED;
    }
    return 0;
}

static void session_free(mxop__session_t *s)
{
    mxop__pending_t *p = s->pend_head;
    while (p != NULL) {
        mxop__pending_t *next = p->next;
        pending_free(p);
        p = next;
    }
    for (size_t i = 0; i < s->n_regions; i++)
        if (s->regions[i].fd >= 0)
            close(s->regions[i].fd);
    for (size_t i = 0; i < s->n_libs; i++) {
        free(s->libs[i].path);
        free(s->libs[i].name);
    }
    for (size_t i = 0; i < s->n_ops; i++)
        op_free(&s->ops[i]);
    free(s->regions);
    free(s->libs);
    free(s->ops);
    free(s);
}

/* The client is gone or going: stop the worker now; memory goes when the connection closes. */
static void session_end(mxop__session_t *s)
{
    if (s->client == NULL)
        return;
    if (s->worker != NULL) {
        mxop__worker_detach_kill(s->worker);
        s->worker = NULL;
    }
    s->client = NULL;
    s->d->n_sessions--;
    MXOP__LOGI(s->id, NULL, "session ended (%llu worker restarts)",
               (unsigned long long)s->restarts);
}

/* ------------------------------------------------------------------------ */
/* Requests. */

static const char *body_name(int body_case)
{
    switch (body_case) {
    case MXOP__REQUEST__BODY_HELLO: return "Hello";
    case MXOP__REQUEST__BODY_OPEN_SESSION: return "OpenSession";
    case MXOP__REQUEST__BODY_LOAD_LIBRARY: return "LoadLibrary";
    case MXOP__REQUEST__BODY_LIST_OPS: return "ListOps";
    case MXOP__REQUEST__BODY_REGISTER_REGION: return "RegisterRegion";
    case MXOP__REQUEST__BODY_RELEASE_REGION: return "ReleaseRegion";
    case MXOP__REQUEST__BODY_STATS: return "Stats";
    case MXOP__REQUEST__BODY_SHUTDOWN: return "Shutdown";
    default: return "an empty request";
    }
}

static void handle_hello(mxop__client_t *cl, const Mxop__Request *req)
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
        mxop__client_close(cl);
        return;
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
    send_reply(cl, &r, -1);
    MXOP__LOGI(0, NULL, "client %llu '%s' (uid %u, pid %d) speaks protocol %u",
               (unsigned long long)cl->id, cl->name, (unsigned)cl->uid, (int)cl->pid,
               (unsigned)best);
}

static void handle_open(mxop__client_t *cl, const Mxop__Request *req)
{
    mxop__daemon_t *d = cl->d;
    if (cl->session != NULL) {
        reply_errorf(cl, req->id, MXOP_EPROTOCOL,
                     "this connection already has session %llu; open another connection for "
                     "another session",
                     (unsigned long long)cl->session->id);
        return;
    }
    mxop__session_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a session");
        return;
    }
    s->d = d;
    s->id = ++d->next_session_id;
    s->generation = 1;
    s->next_region = 1;
    s->next_sup_id = 1;

    char err[MXOP__MSG_MAX];
    int client_fd = -1;
    mxop__worker_t *w = NULL;
    int rc = mxop__worker_spawn(d, s, s->generation, &w, &client_fd, err, sizeof(err));
    if (rc != 0) {
        MXOP__LOGE(s->id, NULL, "cannot open a session: %s", err);
        mxop__client_reply_error(cl, req->id, rc, err);
        free(s);
        return;
    }
    s->worker = w;
    s->client = cl;
    cl->session = s;
    d->n_sessions++;

    Mxop__OpenSessionReply osr = MXOP__OPEN_SESSION_REPLY__INIT;
    osr.session = s->id;
    osr.worker_pid = (uint32_t)w->pid;
    osr.generation = s->generation;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req->id;
    r.body_case = MXOP__REPLY__BODY_OPEN_SESSION;
    r.open_session = &osr;
    send_reply(cl, &r, client_fd);
    close(client_fd);
    MXOP__LOGI(s->id, NULL, "session opened by client %llu '%s'; worker %d",
               (unsigned long long)cl->id, cl->name, (int)w->pid);
}

/*
 * protobuf-c hands strings over NUL-terminated, hiding an embedded NUL.
 * This finds the wire length of LoadLibrary.path (Request field 12, its
 * field 1) the way a decoder sees it (the last occurrence wins), so that a
 * path with a NUL byte can be refused instead of silently shortened.
 */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Calls back for each occurrence of length-delimited `field`; false on a malformed buffer. */
static bool scan_field(const uint8_t *buf, size_t len, uint32_t field,
                       void (*cb)(const uint8_t *, size_t, void *), void *arg)
{
    const uint8_t *p = buf;
    const uint8_t *end = buf + len;
    while (p < end) {
        uint64_t key;
        uint64_t v;
        if (!read_varint(&p, end, &key))
            return false;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v))
                return false;
            break;
        case 1:
            if (end - p < 8)
                return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return false;
            p += 4;
            break;
        case 2:
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return false;
            if ((key >> 3) == field)
                cb(p, (size_t)v, arg);
            p += v;
            break;
        default: return false;
        }
    }
    return true;
}

static void path_cb(const uint8_t *p, size_t n, void *arg)
{
    (void)p;
    *(size_t *)arg = n;
}

static void load_cb(const uint8_t *p, size_t n, void *arg)
{
    scan_field(p, n, 1, path_cb, arg);
}

static size_t wire_path_len(const uint8_t *payload, uint32_t len, const char *decoded)
{
    size_t n = strlen(decoded);
    size_t wire = n;
    if (!scan_field(payload, len, MXOP__REQUEST__BODY_LOAD_LIBRARY, load_cb, &wire))
        return n;
    return wire;
}

static void handle_load(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req,
                        const uint8_t *payload, uint32_t len)
{
    const char *name = req->load_library->path != NULL ? req->load_library->path : "";
    size_t name_len = wire_path_len(payload, len, name);
    char resolved[PATH_MAX];
    char err[MXOP__MSG_MAX];
    int rc = mxop__plugin_resolve(s->d->cfg.plugin_dir, name, name_len, resolved, sizeof(resolved),
                                  err, sizeof(err));
    if (rc != 0) {
        MXOP__LOGI(s->id, NULL, "LoadLibrary refused: %s", err);
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    if (find_lib(s, resolved) != NULL) {
        /* Already loaded: the list as it is, without troubling the worker. */
        reply_ops(s, req->id);
        return;
    }
    rc = need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_LOAD, req->id, false);
    if (p == NULL || (p->path = strdup(resolved)) == NULL || (p->name = strdup(name)) == NULL) {
        pending_free(p);
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a library load");
        return;
    }
    rc = pending_send(s, p, -1);
    if (rc != 0) {
        pending_free(p);
        reply_errorf(cl, req->id, rc, "cannot forward LoadLibrary of '%s' to the worker: %s", name,
                     mxop_strerror(rc));
        return;
    }
    MXOP__LOGD(s->id, NULL, "loading library '%s' (%s)", name, resolved);
}

/* Gives a new region of the session its id (never 0, never one held). */
static void new_region_id(mxop__session_t *s, mxop__pending_t *p)
{
    do {
        p->region = s->next_region++;
        if (s->next_region == 0)
            s->next_region = 1;
    } while (p->region == 0 || find_region(s, p->region) >= 0);
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
    if (rr->cuda_ipc_handle.len != MXOP__CUDA_IPC_BYTES) {
        reply_errorf(cl, req->id, MXOP_EINVAL, "the CUDA IPC handle has %zu bytes, not %d",
                     rr->cuda_ipc_handle.len, MXOP__CUDA_IPC_BYTES);
        return;
    }
    if (rr->device < 0) {
        reply_errorf(cl, req->id, MXOP_EINVAL, "device region on CUDA device %d: not an ordinal",
                     (int)rr->device);
        return;
    }
    if (rr->size == 0) {
        mxop__client_reply_error(cl, req->id, MXOP_EINVAL, "region size is 0");
        return;
    }
    if (s->n_regions + s->n_pending_maps >= MXOP__SESSION_MAX_REGIONS) {
        reply_errorf(cl, req->id, MXOP_ELIMIT,
                     "session %llu already holds %d regions, the most a session may have",
                     (unsigned long long)s->id, MXOP__SESSION_MAX_REGIONS);
        return;
    }
    rc = need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_MAP, req->id, false);
    if (p == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a region");
        return;
    }
    new_region_id(s, p);
    p->size = rr->size;
    p->cuda = true;
    p->device = rr->device;
    memcpy(p->ipc, rr->cuda_ipc_handle.data, sizeof(p->ipc));
    rc = pending_send(s, p, -1);
    if (rc != 0) {
        pending_free(p);
        reply_errorf(cl, req->id, rc, "cannot forward the region to the worker: %s",
                     mxop_strerror(rc));
        return;
    }
    s->n_pending_maps++;
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
            reply_errorf(cl, req->id, MXOP_EINVAL,
                         "RegisterRegion carries %d fds; exactly one is expected", nfds);
        return; /* the connection closes unclaimed descriptors */
    }
    int fd = mxop__conn_take_fd(&cl->conn);
    uint64_t size = req->register_region->size;
    char err[MXOP__MSG_MAX];
    int rc;
    if (size == 0) {
        mxop__client_reply_error(cl, req->id, MXOP_EINVAL, "region size is 0");
        goto err_fd;
    }
    char why[256];
    rc = mxop__region_check_fd(fd, size, why, sizeof(why));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, why);
        goto err_fd;
    }
    if (s->n_regions + s->n_pending_maps >= MXOP__SESSION_MAX_REGIONS) {
        reply_errorf(cl, req->id, MXOP_ELIMIT,
                     "session %llu already holds %d regions, the most a session may have",
                     (unsigned long long)s->id, MXOP__SESSION_MAX_REGIONS);
        goto err_fd;
    }
    rc = need_worker(s, err, sizeof(err));
    if (rc != 0) {
        mxop__client_reply_error(cl, req->id, rc, err);
        goto err_fd;
    }
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_MAP, req->id, false);
    if (p == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a region");
        goto err_fd;
    }
    /* Ids are never 0 (that is MXOP_REGION_HEAP) and never reused while held. */
    new_region_id(s, p);
    p->size = size;
    rc = pending_send(s, p, fd);
    if (rc != 0) {
        pending_free(p);
        reply_errorf(cl, req->id, rc, "cannot forward the region to the worker: %s",
                     mxop_strerror(rc));
        goto err_fd;
    }
    p->fd = fd; /* kept until the worker has mapped it */
    s->n_pending_maps++;
    return;

err_fd:
    close(fd);
}

static void handle_release(mxop__client_t *cl, mxop__session_t *s, const Mxop__Request *req)
{
    uint32_t id = req->release_region->region;
    ssize_t i = find_region(s, id);
    if (i < 0) {
        reply_errorf(cl, req->id, MXOP_EUNKNOWN_REGION, "session %llu has no region %u",
                     (unsigned long long)s->id, (unsigned)id);
        return;
    }
    /* Gone from the session at once, so a restart does not map it again. */
    if (s->regions[i].fd >= 0)
        close(s->regions[i].fd);
    s->region_bytes -= s->regions[i].size;
    s->regions[i] = s->regions[--s->n_regions];

    char err[MXOP__MSG_MAX];
    if (need_worker(s, err, sizeof(err)) != 0) {
        reply_ok(cl, req->id);
        return;
    }
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_UNMAP, req->id, false);
    if (p == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a region release");
        return;
    }
    p->region = id;
    if (pending_send(s, p, -1) != 0) {
        /* The worker is going away; its mappings go with it. */
        pending_free(p);
        reply_ok(cl, req->id);
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
    send_reply(cl, &r, -1);
}

static void handle_shutdown(mxop__client_t *cl, const Mxop__Request *req)
{
    mxop__daemon_t *d = cl->d;
    if (cl->uid != d->euid && cl->uid != 0) {
        reply_errorf(cl, req->id, MXOP_EDENIED,
                     "uid %u may not shut the daemon down (only uid %u or root may)",
                     (unsigned)cl->uid, (unsigned)d->euid);
        return;
    }
    reply_ok(cl, req->id);
    char why[96];
    mxop__fmt(why, sizeof(why), "Shutdown requested by client %llu (uid %u, pid %d)",
              (unsigned long long)cl->id, (unsigned)cl->uid, (int)cl->pid);
    mxop__daemon_shutdown(d, why);
}

static void handle_request(mxop__client_t *cl, const Mxop__Request *req, const uint8_t *payload,
                           uint32_t len)
{
    int body = (int)req->body_case;
    if (!cl->hello_done) {
        if (body != MXOP__REQUEST__BODY_HELLO) {
            reply_errorf(cl, req->id, MXOP_EPROTOCOL,
                         "the first request on a connection must be Hello, not %s",
                         body_name(body));
            mxop__client_close(cl);
            return;
        }
        handle_hello(cl, req);
        return;
    }

    mxop__session_t *s = cl->session;
    switch (body) {
    case MXOP__REQUEST__BODY_HELLO:
        mxop__client_reply_error(cl, req->id, MXOP_EPROTOCOL,
                                 "Hello was already negotiated on this connection");
        return;
    case MXOP__REQUEST__BODY_OPEN_SESSION: handle_open(cl, req); return;
    case MXOP__REQUEST__BODY_STATS: handle_stats(cl, req); return;
    case MXOP__REQUEST__BODY_SHUTDOWN: handle_shutdown(cl, req); return;
    case MXOP__REQUEST__BODY_LOAD_LIBRARY:
    case MXOP__REQUEST__BODY_LIST_OPS:
    case MXOP__REQUEST__BODY_REGISTER_REGION:
    case MXOP__REQUEST__BODY_RELEASE_REGION: break;
    default:
        reply_errorf(cl, req->id, MXOP_EPROTOCOL,
                     "request %llu has no body this daemon knows (protocol %u)",
                     (unsigned long long)req->id, (unsigned)cl->version);
        return;
    }

    if (s == NULL) {
        reply_errorf(cl, req->id, MXOP_EPROTOCOL, "%s needs a session: open a session first",
                     body_name(body));
        return;
    }
    switch (body) {
    case MXOP__REQUEST__BODY_LOAD_LIBRARY: handle_load(cl, s, req, payload, len); break;
    case MXOP__REQUEST__BODY_LIST_OPS: reply_ops(s, req->id); break;
    case MXOP__REQUEST__BODY_REGISTER_REGION: handle_register(cl, s, req); break;
    default: handle_release(cl, s, req); break;
    }
}

/* ------------------------------------------------------------------------ */
/* The client connection. */

static void client_frame_cb(mxop__conn_t *c, uint16_t kind, const uint8_t *payload, uint32_t len)
{
    mxop__client_t *cl = c->data;
    (void)kind;
    mxop__pbarena_reset(&c->arena);
    Mxop__Request *req = mxop__request__unpack(&c->arena.allocator, len, payload);
    if (req == NULL) {
        reply_errorf(cl, 0, MXOP_EPROTOCOL, "a request of %u bytes does not decode as mxop.Request",
                     (unsigned)len);
        MXOP__LOGW(cl->session ? cl->session->id : 0, NULL,
                   "client %llu sent an undecodable request; closing it",
                   (unsigned long long)cl->id);
        mxop__client_close(cl);
        return;
    }
    if (req->id == 0) {
        /* Id 0 is reserved for events; an answer to it could not be told apart. */
        mxop__client_reply_error(cl, 0, MXOP_EPROTOCOL,
                                 "request id 0 is reserved; ids must be non-zero");
        mxop__client_close(cl);
        mxop__pbarena_reset(&c->arena);
        return;
    }
    handle_request(cl, req, payload, len);
    mxop__pbarena_reset(&c->arena);
}

static void client_error_cb(mxop__conn_t *c, int code, const char *msg)
{
    mxop__client_t *cl = c->data;
    uint64_t sid = cl->session ? cl->session->id : 0;
    if (code == 0 || code == MXOP_EDISCONNECTED) {
        MXOP__LOGD(sid, NULL, "client %llu: %s", (unsigned long long)cl->id, msg);
    } else {
        MXOP__LOGW(sid, NULL, "client %llu: %s; closing the connection", (unsigned long long)cl->id,
                   msg);
        mxop__client_reply_error(cl, 0, code, msg);
    }
    mxop__client_close(cl);
}

static void client_closed_cb(mxop__conn_t *c)
{
    mxop__client_t *cl = c->data;
    mxop__list_remove(&cl->link);
    if (cl->session != NULL)
        session_free(cl->session);
    free(cl);
}

void mxop__client_start(mxop__daemon_t *d, int fd, uid_t uid, pid_t pid)
{
    mxop__client_t *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        MXOP__LOGE(0, NULL, "out of memory for a new connection");
        close(fd);
        return;
    }
    cl->d = d;
    cl->id = ++d->next_client_id;
    cl->uid = uid;
    cl->pid = pid;
    mxop__list_init(&cl->link);
    if (mxop__conn_init(d, &cl->conn, fd, MXOP__KIND_CTL_REQUEST, client_frame_cb, client_error_cb,
                        client_closed_cb, cl) != 0) {
        MXOP__LOGE(0, NULL, "cannot serve a new connection");
        close(fd);
        free(cl);
        return;
    }
    mxop__list_push(&d->clients, &cl->link);
    MXOP__LOGD(0, NULL, "client %llu connected (uid %u, pid %d)", (unsigned long long)cl->id,
               (unsigned)uid, (int)pid);
}

void mxop__client_close(mxop__client_t *cl)
{
    if (cl->conn.closing)
        return;
    if (cl->session != NULL)
        session_end(cl->session);
    mxop__conn_close(&cl->conn);
}

/* ------------------------------------------------------------------------ */
/* The worker's side. */

static void sup_load_done(mxop__session_t *s, mxop__pending_t *p, const Mxop__SupReply *r)
{
    const char *msg = r->message != NULL && r->message[0] != '\0' ? r->message : NULL;
    if (p->replay) {
        if (r->status != 0)
            MXOP__LOGW(s->id, NULL,
                       "reloading library '%s' into worker generation %u failed: %s; op "
                       "indices after it may no longer match",
                       p->name, (unsigned)s->generation, msg ? msg : mxop_strerror(r->status));
        return;
    }
    if (r->status != 0) {
        MXOP__LOGI(s->id, NULL, "library '%s' did not load: %s", p->name,
                   msg ? msg : mxop_strerror(r->status));
        if (msg != NULL)
            mxop__client_reply_error(s->client, p->req_id, r->status, msg);
        else
            reply_errorf(s->client, p->req_id, r->status, "library '%s' did not load: %s", p->name,
                         mxop_strerror(r->status));
        return;
    }
    if (find_lib(s, p->path) == NULL && add_lib(s, p->path, p->name, r) != 0) {
        mxop__client_reply_error(s->client, p->req_id, MXOP_ENOMEM,
                                 "out of memory recording the library's ops");
        return;
    }
    MXOP__LOGI(s->id, NULL, "loaded library '%s' (%zu ops)", p->name, r->n_ops);
    reply_ops(s, p->req_id);
}

static void sup_map_done(mxop__session_t *s, mxop__pending_t *p, const Mxop__SupReply *r)
{
    const char *msg = r->message != NULL && r->message[0] != '\0' ? r->message : NULL;
    if (p->replay) {
        if (r->status != 0)
            MXOP__LOGW(s->id, NULL, "re-mapping region %u into worker generation %u failed: %s",
                       (unsigned)p->region, (unsigned)s->generation,
                       msg ? msg : mxop_strerror(r->status));
        return;
    }
    s->n_pending_maps--;
    if (r->status != 0) {
        mxop__client_reply_error(s->client, p->req_id, r->status, msg);
        return;
    }
    if (grow((void **)&s->regions, &s->cap_regions, s->n_regions + 1, sizeof(*s->regions)) != 0) {
        /* The worker has it mapped; unmapping is its business at the next restart. */
        mxop__client_reply_error(s->client, p->req_id, MXOP_ENOMEM, "out of memory for a region");
        return;
    }
    mxop__region_t *nr = &s->regions[s->n_regions++];
    *nr = (mxop__region_t){
        .id = p->region, .fd = p->fd, .size = p->size, .cuda = p->cuda, .device = p->device};
    if (p->cuda)
        memcpy(nr->ipc, p->ipc, sizeof(nr->ipc));
    s->region_bytes += p->size;
    p->fd = -1;

    Mxop__RegisterRegionReply rr = MXOP__REGISTER_REGION_REPLY__INIT;
    rr.region = p->region;
    Mxop__Reply reply = MXOP__REPLY__INIT;
    reply.id = p->req_id;
    reply.body_case = MXOP__REPLY__BODY_REGISTER_REGION;
    reply.register_region = &rr;
    send_reply(s->client, &reply, -1);
    MXOP__LOGD(s->id, NULL, "registered %sregion %u (%llu bytes)", p->cuda ? "device " : "",
               (unsigned)p->region, (unsigned long long)p->size);
}

void mxop__session_sup_reply(mxop__session_t *s, const Mxop__SupReply *r)
{
    mxop__pending_t *p = pending_take(s, r->id);
    if (p == NULL) {
        MXOP__LOGW(s->id, NULL, "worker answered supervisor request %llu, which is not pending",
                   (unsigned long long)r->id);
        return;
    }
    if (s->pend_head != NULL && s->pend_head->sup_id < p->sup_id)
        MXOP__LOGW(s->id, NULL, "worker answered supervisor request %llu out of order",
                   (unsigned long long)r->id);
    switch (p->kind) {
    case MXOP__PENDING_LOAD: sup_load_done(s, p, r); break;
    case MXOP__PENDING_MAP: sup_map_done(s, p, r); break;
    default:
        if (!p->replay) {
            if (r->status != 0)
                mxop__client_reply_error(s->client, p->req_id, r->status, r->message);
            else
                reply_ok(s->client, p->req_id);
        }
        break;
    }
    pending_free(p);
}

/* Answers every request that was waiting on the dead worker. */
static void fail_pending(mxop__session_t *s, const char *message)
{
    bool first = true;
    mxop__pending_t *p = s->pend_head;
    s->pend_head = s->pend_tail = NULL;
    while (p != NULL) {
        mxop__pending_t *next = p->next;
        if (p->replay) {
            MXOP__LOGW(s->id, NULL, "replay of %s was lost with the worker",
                       p->kind == MXOP__PENDING_LOAD ? "a library" : "a region");
        } else if (p->kind == MXOP__PENDING_LOAD) {
            /* The head was running; the rest never reached the worker's loader. */
            if (first)
                reply_errorf(s->client, p->req_id, MXOP_EWORKER_CRASHED,
                             "library '%s' crashed the worker while loading: %s", p->name, message);
            else
                reply_errorf(s->client, p->req_id, MXOP_EWORKER_CRASHED,
                             "the worker died before library '%s' was loaded: %s", p->name,
                             message);
        } else if (p->kind == MXOP__PENDING_MAP) {
            s->n_pending_maps--;
            reply_errorf(s->client, p->req_id, MXOP_EWORKER_CRASHED,
                         "the worker died before mapping the region: %s", message);
        } else {
            /* The region is released either way: the dead worker's mappings died with it. */
            reply_ok(s->client, p->req_id);
        }
        first = false;
        pending_free(p);
        p = next;
    }
}

/* Records a death; true when the session has died too often to respawn again. */
static bool respawn_burst(mxop__session_t *s)
{
    int64_t now = mxop__now_ns();
    s->deaths[s->n_deaths % MXOP__RESPAWN_BURST] = now;
    s->n_deaths++;
    if (s->n_deaths < MXOP__RESPAWN_BURST)
        return false;
    int64_t oldest = s->deaths[s->n_deaths % MXOP__RESPAWN_BURST];
    return now - oldest <= MXOP__RESPAWN_WINDOW_NS;
}

static void send_event(mxop__session_t *s, int code, int term_signal, int exit_status,
                       uint64_t call_id, const char *op, const char *message, bool restarted,
                       int client_fd)
{
    Mxop__WorkerEvent ev = MXOP__WORKER_EVENT__INIT;
    ev.code = code;
    ev.signal = term_signal;
    ev.exit_status = exit_status;
    ev.call_id = call_id;
    ev.op = (char *)(op != NULL ? op : "");
    ev.message = (char *)message;
    ev.generation = s->generation;
    ev.worker_pid = s->worker != NULL ? (uint32_t)s->worker->pid : 0;
    ev.restarted = restarted;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = 0;
    r.status = code;
    r.message = (char *)message;
    r.body_case = MXOP__REPLY__BODY_EVENT;
    r.event = &ev;
    send_reply(s->client, &r, client_fd);
}

/* Gives the new worker every library (in order) and region of the session. */
static void replay(mxop__session_t *s)
{
    for (size_t i = 0; i < s->n_libs; i++) {
        mxop__pending_t *p = pending_new(s, MXOP__PENDING_LOAD, 0, true);
        if (p == NULL || (p->path = strdup(s->libs[i].path)) == NULL ||
            (p->name = strdup(s->libs[i].name)) == NULL || pending_send(s, p, -1) != 0) {
            MXOP__LOGW(s->id, NULL, "cannot replay library '%s' into the new worker",
                       s->libs[i].name);
            pending_free(p);
        }
    }
    for (size_t i = 0; i < s->n_regions; i++) {
        mxop__pending_t *p = pending_new(s, MXOP__PENDING_MAP, 0, true);
        if (p == NULL)
            continue;
        p->region = s->regions[i].id;
        p->size = s->regions[i].size;
        p->cuda = s->regions[i].cuda;
        p->device = s->regions[i].device;
        memcpy(p->ipc, s->regions[i].ipc, sizeof(p->ipc));
        if (pending_send(s, p, s->regions[i].fd) != 0) {
            MXOP__LOGW(s->id, NULL, "cannot re-map region %u into the new worker",
                       (unsigned)p->region);
            pending_free(p);
        }
    }
}

void mxop__session_worker_died(mxop__session_t *s, int code, int term_signal, int exit_status,
                               uint64_t call_id, const char *op, const char *message)
{
    mxop__daemon_t *d = s->d;
    /* A worker that died idle while loading a library: say which library. */
    char ev_msg[MXOP__MSG_MAX];
    mxop__fmt(ev_msg, sizeof(ev_msg), "%s", message);
    if ((op == NULL || op[0] == '\0') && s->pend_head != NULL &&
        s->pend_head->kind == MXOP__PENDING_LOAD)
        mxop__fmt(ev_msg, sizeof(ev_msg), "%s while loading library '%s'", message,
                  s->pend_head->name);
    /*
     * The loop guard counts only deaths nobody asked for: a worker dying at
     * start-up or while its libraries are replayed would otherwise respawn
     * at full speed for ever.  A death inside a client's call or request is
     * always followed by a restart: the next one needs another call, so the
     * client sets the pace (and five crashing calls in a row must each
     * recover, as tests/test_crash.c expects).
     */
    bool client_caused = call_id != 0 || (s->pend_head != NULL && !s->pend_head->replay);
    fail_pending(s, message);
    bool burst = !client_caused && respawn_burst(s);
    if (s->client == NULL || s->client->conn.closing || d->shutting_down)
        return;

    char msg[MXOP__MSG_MAX];
    char err[MXOP__MSG_MAX];
    bool give_up = burst;
    mxop__worker_t *w = NULL;
    int client_fd = -1;
    if (burst) {
        mxop__fmt(msg, sizeof(msg),
                  "%s; the worker died %d times within %lld s, so it is not restarted and the "
                  "session's requests now fail",
                  ev_msg, MXOP__RESPAWN_BURST, (long long)(MXOP__RESPAWN_WINDOW_NS / 1000000000LL));
    } else if (mxop__worker_spawn(d, s, s->generation + 1, &w, &client_fd, err, sizeof(err)) != 0) {
        give_up = true;
        mxop__fmt(msg, sizeof(msg), "%s; no replacement worker could be started: %s", ev_msg, err);
    }
    if (give_up) {
        s->dead = true;
        mxop__fmt(s->dead_msg, sizeof(s->dead_msg), "%s", msg);
        MXOP__LOGE(s->id, NULL, "%s", msg);
        send_event(s, code, term_signal, exit_status, call_id, op, msg, false, -1);
        return;
    }

    s->generation++;
    s->worker = w;
    s->restarts++;
    replay(s);
    send_event(s, code, term_signal, exit_status, call_id, op, ev_msg, true, client_fd);
    close(client_fd);
    MXOP__LOGI(s->id, NULL,
               "worker restarted: pid %d, generation %u; replaying %zu libraries and %zu regions",
               (int)w->pid, (unsigned)s->generation, s->n_libs, s->n_regions);
}
