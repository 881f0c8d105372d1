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
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/opinfo_ext.h"
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
    mxop__opinfo_ext_free(op);
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
    if (dst->name == NULL || dst->description == NULL || dst->library == NULL ||
        mxop__opinfo_ext_copy(dst, src) != 0) {
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

/* A FIFO of pending entries: the live worker's, or the spare's. */
typedef struct fifo {
    mxop__pending_t **head;
    mxop__pending_t **tail;
} fifo_t;

static fifo_t main_fifo(mxop__session_t *s)
{
    return (fifo_t){&s->pend_head, &s->pend_tail};
}

static fifo_t spare_fifo(mxop__session_t *s)
{
    return (fifo_t){&s->spare_head, &s->spare_tail};
}

static void fifo_push(fifo_t q, mxop__pending_t *p)
{
    p->next = NULL;
    if (*q.tail != NULL)
        (*q.tail)->next = p;
    else
        *q.head = p;
    *q.tail = p;
}

static mxop__pending_t *fifo_take(fifo_t q, uint64_t sup_id)
{
    mxop__pending_t *prev = NULL;
    for (mxop__pending_t *p = *q.head; p != NULL; prev = p, p = p->next) {
        if (p->sup_id != sup_id)
            continue;
        if (prev != NULL)
            prev->next = p->next;
        else
            *q.head = p->next;
        if (*q.tail == p)
            *q.tail = prev;
        p->next = NULL;
        return p;
    }
    return NULL;
}

static void fifo_free(fifo_t q)
{
    mxop__pending_t *p = *q.head;
    while (p != NULL) {
        mxop__pending_t *next = p->next;
        pending_free(p);
        p = next;
    }
    *q.head = *q.tail = NULL;
}

static mxop__pending_t *pending_take(mxop__session_t *s, uint64_t sup_id)
{
    return fifo_take(main_fifo(s), sup_id);
}

/*
 * Sends the SupRequest for a pending entry to the live worker, or to the
 * spare when `to_spare`; `fd` rides with it (borrowed) when >= 0.
 */
static int pending_send_to(mxop__session_t *s, mxop__pending_t *p, int fd, bool to_spare)
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
    int rc = mxop__worker_send(to_spare ? s->spare : s->worker, &req, fd);
    if (rc == 0)
        fifo_push(to_spare ? spare_fifo(s) : main_fifo(s), p);
    return rc;
}

static int pending_send(mxop__session_t *s, mxop__pending_t *p, int fd)
{
    return pending_send_to(s, p, fd, false);
}

/* 0 when the session has a worker to forward to, else the code and a message. */
static int need_worker(mxop__session_t *s, char *err, size_t errlen)
{
    if (s->dead) {
        mxop__fmt(err, errlen, "%s", s->dead_msg);
        return s->dead_code != 0 ? s->dead_code : MXOP_EWORKER_CRASHED;
    }
    if (s->worker == NULL && s->respawn_due) {
        int64_t left = (s->respawn_at - mxop__now_ns()) / 1000000;
        mxop__fmt(err, errlen,
                  "session %llu's worker died (%s) and is restarted in %lld ms, after %d deaths "
                  "in a row",
                  (unsigned long long)s->id, s->death.message, (long long)(left > 0 ? left : 0),
                  s->idle_deaths);
        return MXOP_EWORKER_CRASHED;
    }
    if (s->worker == NULL) {
        mxop__fmt(err, errlen, "session %llu has no running worker", (unsigned long long)s->id);
        return MXOP_EWORKER_CRASHED;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Timers */

static void stimer_closed_cb(uv_handle_t *h)
{
    free(MXOP__CONTAINER_OF((uv_timer_t *)h, mxop__stimer_t, timer));
}

static mxop__stimer_t *stimer_new(mxop__session_t *s)
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

static void stimer_free(mxop__stimer_t *t)
{
    if (t == NULL)
        return;
    t->s = NULL;
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, stimer_closed_cb);
}

/* 0 for the first death in a row, then MXOP__BACKOFF_FIRST_MS doubling, capped. */
static uint64_t backoff_ms(int deaths)
{
    if (deaths <= 1)
        return 0;
    uint64_t ms = MXOP__BACKOFF_FIRST_MS;
    for (int i = 2; i < deaths && ms < MXOP__BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < MXOP__BACKOFF_MAX_MS ? ms : MXOP__BACKOFF_MAX_MS;
}

static void spare_cb(uv_timer_t *t);

/* Starts a spare after `delay_ms`, if the session wants one and has none. */
static void schedule_spare(mxop__session_t *s, uint64_t delay_ms)
{
    if (!s->d->cfg.warm_spare || s->spare != NULL || s->dead || s->spare_timer == NULL ||
        s->spare_deaths >= MXOP__RESPAWN_GIVE_UP || s->d->shutting_down)
        return;
    uv_timer_start(&s->spare_timer->timer, spare_cb, delay_ms, 0);
}

/* Ends the spare (if any) and forgets what it was asked. */
static void drop_spare(mxop__session_t *s)
{
    if (s->spare != NULL) {
        mxop__worker_detach_kill(s->spare);
        s->spare = NULL;
    }
    fifo_free(spare_fifo(s));
}

static void session_free(mxop__session_t *s)
{
    fifo_free(main_fifo(s));
    fifo_free(spare_fifo(s));
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
    drop_spare(s);
    stimer_free(s->respawn_timer);
    stimer_free(s->spare_timer);
    s->respawn_timer = s->spare_timer = NULL;
    s->respawn_due = false;
    s->client = NULL;
    s->d->n_sessions--;
    MXOP__LOGI(s->id, NULL, "session ended (%llu worker restarts)",
               (unsigned long long)s->restarts);
}

static void mirror_unmap(mxop__session_t *s, uint32_t region);

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
    /* Without timers there is no backoff (respawns are immediate) and no spare. */
    s->respawn_timer = stimer_new(s);
    s->spare_timer = stimer_new(s);

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
    schedule_spare(s, MXOP__SPARE_DELAY_MS);
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
    rc = mxop__quarantine_check(s->d, resolved, err, sizeof(err));
    if (rc != 0) {
        MXOP__LOGI(s->id, NULL, "LoadLibrary of '%s' refused: %s", name, err);
        mxop__client_reply_error(cl, req->id, rc, err);
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
    mirror_unmap(s, id);

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

/* The spare cannot follow the session any more: end it and start another later. */
static void spare_failed(mxop__session_t *s, const char *why)
{
    MXOP__LOGW(s->id, NULL, "spare worker %d: %s; replacing it",
               s->spare != NULL ? (int)s->spare->pid : 0, why);
    drop_spare(s);
    s->spare_deaths++;
    schedule_spare(s, backoff_ms(s->spare_deaths) + MXOP__SPARE_DELAY_MS);
}

static mxop__pending_t *load_entry(mxop__session_t *s, const mxop__lib_t *lib)
{
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_LOAD, 0, true);
    if (p != NULL &&
        ((p->path = strdup(lib->path)) == NULL || (p->name = strdup(lib->name)) == NULL)) {
        pending_free(p);
        p = NULL;
    }
    return p;
}

static void mirror_load(mxop__session_t *s, const mxop__lib_t *lib)
{
    if (s->spare == NULL)
        return;
    mxop__pending_t *p = load_entry(s, lib);
    if (p == NULL || pending_send_to(s, p, -1, true) != 0) {
        pending_free(p);
        spare_failed(s, "cannot send it a library");
    }
}

/*
 * Device regions are not given to the spare: opening one makes a CUDA
 * context, which costs GPU memory a spare should not hold.  The spare
 * gets them when it takes over (replay_device_regions).
 */
static void mirror_map(mxop__session_t *s, const mxop__region_t *r)
{
    if (s->spare == NULL || r->cuda)
        return;
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_MAP, 0, true);
    if (p != NULL) {
        p->region = r->id;
        p->size = r->size;
        p->cuda = r->cuda;
        p->device = r->device;
        memcpy(p->ipc, r->ipc, sizeof(p->ipc));
    }
    if (p == NULL || pending_send_to(s, p, r->fd, true) != 0) {
        pending_free(p);
        spare_failed(s, "cannot send it a region");
    }
}

static void mirror_unmap(mxop__session_t *s, uint32_t region)
{
    if (s->spare == NULL)
        return;
    mxop__pending_t *p = pending_new(s, MXOP__PENDING_UNMAP, 0, true);
    if (p != NULL)
        p->region = region;
    if (p == NULL || pending_send_to(s, p, -1, true) != 0) {
        pending_free(p);
        spare_failed(s, "cannot tell it to release a region");
    }
}

/*
 * Gives a new worker (or the spare) every library, in order, and every
 * region of the session.  False if something could not be sent (the worker
 * is already gone, or memory is short): it is then incomplete.
 */
static bool replay_to(mxop__session_t *s, bool to_spare)
{
    for (size_t i = 0; i < s->n_libs; i++) {
        mxop__pending_t *p = load_entry(s, &s->libs[i]);
        if (p == NULL || pending_send_to(s, p, -1, to_spare) != 0) {
            MXOP__LOGD(s->id, NULL, "cannot replay library '%s' into the new worker",
                       s->libs[i].name);
            pending_free(p);
            return false;
        }
    }
    for (size_t i = 0; i < s->n_regions; i++) {
        if (to_spare && s->regions[i].cuda)
            continue; /* see mirror_map */
        mxop__pending_t *p = pending_new(s, MXOP__PENDING_MAP, 0, true);
        if (p == NULL)
            return false;
        p->region = s->regions[i].id;
        p->size = s->regions[i].size;
        p->cuda = s->regions[i].cuda;
        p->device = s->regions[i].device;
        memcpy(p->ipc, s->regions[i].ipc, sizeof(p->ipc));
        if (pending_send_to(s, p, s->regions[i].fd, to_spare) != 0) {
            MXOP__LOGD(s->id, NULL, "cannot re-map region %u into the new worker",
                       (unsigned)p->region);
            pending_free(p);
            return false;
        }
    }
    return true;
}

/* The device regions a spare did not get, once it is the session's worker. */
static bool replay_device_regions(mxop__session_t *s)
{
    for (size_t i = 0; i < s->n_regions; i++) {
        const mxop__region_t *r = &s->regions[i];
        if (!r->cuda)
            continue;
        mxop__pending_t *p = pending_new(s, MXOP__PENDING_MAP, 0, true);
        if (p == NULL)
            return false;
        p->region = r->id;
        p->size = r->size;
        p->cuda = true;
        p->device = r->device;
        memcpy(p->ipc, r->ipc, sizeof(p->ipc));
        if (pending_send(s, p, -1) != 0) {
            pending_free(p);
            return false;
        }
    }
    return true;
}

static void spare_cb(uv_timer_t *t)
{
    mxop__session_t *s = MXOP__CONTAINER_OF(t, mxop__stimer_t, timer)->s;
    if (s == NULL || s->spare != NULL || s->dead || s->client == NULL || s->d->shutting_down)
        return;
    if (s->worker == NULL)
        return; /* a respawn is due; it schedules the next spare itself */
    char err[MXOP__MSG_MAX];
    int client_fd = -1;
    mxop__worker_t *w = NULL;
    if (mxop__worker_spawn(s->d, s, s->generation + 1, &w, &client_fd, err, sizeof(err)) != 0) {
        MXOP__LOGW(s->id, NULL, "cannot start a spare worker: %s", err);
        s->spare_deaths++;
        schedule_spare(s, backoff_ms(s->spare_deaths) + MXOP__SPARE_DELAY_MS);
        return;
    }
    w->spare = true;
    w->client_fd = client_fd;
    s->spare = w;
    if (!replay_to(s, true)) {
        spare_failed(s, "it could not be given the session's libraries and regions");
        return;
    }
    MXOP__LOGD(s->id, NULL, "spare worker %d started (generation %u)", (int)w->pid,
               (unsigned)w->generation);
}

void mxop__session_spare_reply(mxop__session_t *s, const Mxop__SupReply *r)
{
    mxop__pending_t *p = fifo_take(spare_fifo(s), r->id);
    if (p == NULL) {
        MXOP__LOGW(s->id, NULL, "spare answered supervisor request %llu, which is not pending",
                   (unsigned long long)r->id);
        return;
    }
    if (r->status != 0) {
        char why[MXOP__MSG_MAX];
        const char *what = p->kind == MXOP__PENDING_LOAD  ? "load library"
                           : p->kind == MXOP__PENDING_MAP ? "map region"
                                                          : "unmap region";
        mxop__fmt(why, sizeof(why), "it could not %s %s: %s", what,
                  p->kind == MXOP__PENDING_LOAD ? p->name : "",
                  r->message != NULL && r->message[0] ? r->message : mxop_strerror(r->status));
        pending_free(p);
        spare_failed(s, why);
        return;
    }
    pending_free(p);
}

void mxop__session_spare_died(mxop__session_t *s, int term_signal, const char *message)
{
    s->spare = NULL;
    /* A spare that faults while loading a library counts against that library too. */
    if (s->spare_head != NULL && s->spare_head->kind == MXOP__PENDING_LOAD &&
        term_signal != SIGKILL && term_signal != SIGTERM)
        mxop__quarantine_crash(s->d, s->spare_head->path);
    fifo_free(spare_fifo(s));
    if (s->client == NULL || s->d->shutting_down)
        return;
    MXOP__LOGW(s->id, NULL, "%s; it was not in use yet", message);
    s->spare_deaths++;
    if (s->spare_deaths >= MXOP__RESPAWN_GIVE_UP)
        MXOP__LOGW(s->id, NULL, "%d spare workers died in a row: this session gets no more",
                   s->spare_deaths);
    schedule_spare(s, backoff_ms(s->spare_deaths) + MXOP__SPARE_DELAY_MS);
}

static void fail_pending(mxop__session_t *s, const char *message, const char *load_note);
static void give_up(mxop__session_t *s, int code, const char *msg);

/* The live worker cannot be given what the session had: end it and the session's service. */
static void cannot_restore(mxop__session_t *s, const char *why)
{
    if (s->worker != NULL) {
        mxop__worker_detach_kill(s->worker);
        s->worker = NULL;
    }
    fail_pending(s, why, "");
    memset(&s->death, 0, sizeof(s->death));
    s->death.code = MXOP_EWORKER_CRASHED;
    s->death.exit_status = -1;
    give_up(s, MXOP_EWORKER_CRASHED, why);
}

static void sup_load_done(mxop__session_t *s, mxop__pending_t *p, const Mxop__SupReply *r)
{
    const char *msg = r->message != NULL && r->message[0] != '\0' ? r->message : NULL;
    if (p->replay) {
        if (r->status != 0) {
            /*
             * Without it the ops after it would take other indices: a call
             * could run the wrong op.  The session cannot be restored.
             */
            char why[MXOP__MSG_MAX];
            mxop__fmt(why, sizeof(why),
                      "library '%s' no longer loads into a new worker (%s), so the session's "
                      "ops cannot be restored and its requests now fail",
                      p->name, msg ? msg : mxop_strerror(r->status));
            cannot_restore(s, why);
        }
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
    if (find_lib(s, p->path) == NULL) {
        if (add_lib(s, p->path, p->name, r) != 0) {
            mxop__client_reply_error(s->client, p->req_id, MXOP_ENOMEM,
                                     "out of memory recording the library's ops");
            return;
        }
        /* Only now that it loaded without crashing does the spare get it too. */
        mirror_load(s, &s->libs[s->n_libs - 1]);
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
    mirror_map(s, &s->regions[s->n_regions - 1]);

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

/*
 * Answers every request that was waiting on the dead worker.  `load_note`
 * (may be "") is added to the answer of the load that was running.
 */
static void fail_pending(mxop__session_t *s, const char *message, const char *load_note)
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
                             "library '%s' crashed the worker while loading: %s%s", p->name,
                             message, load_note);
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

/* No more workers for this session: requests fail with `code` and `msg` from now on. */
static void give_up(mxop__session_t *s, int code, const char *msg)
{
    s->dead = true;
    s->dead_code = code == MXOP_EQUARANTINED ? code : MXOP_EWORKER_CRASHED;
    s->respawn_due = false;
    mxop__fmt(s->dead_msg, sizeof(s->dead_msg), "%s", msg);
    drop_spare(s);
    MXOP__LOGE(s->id, NULL, "%s", msg);
    const mxop__death_t *e = &s->death;
    send_event(s, code, e->term_signal, e->exit_status, e->call_id, e->op, msg, false, -1);
}

/*
 * Puts a worker in place of the dead one and tells the client: the spare
 * when there is one (it has every library and region already), else a new
 * worker given them now.  Then a new spare is started.
 */
static void respawn(mxop__session_t *s)
{
    mxop__daemon_t *d = s->d;
    const mxop__death_t *e = &s->death;
    s->respawn_due = false;
    if (s->client == NULL || s->client->conn.closing || d->shutting_down || s->dead)
        return;

    mxop__worker_t *w = s->spare;
    int client_fd = -1;
    bool warm = w != NULL && !w->exited && w->sup_open;
    if (warm) {
        s->spare = NULL;
        w->spare = false;
        client_fd = w->client_fd;
        w->client_fd = -1;
        /* What it still has in flight joins the session's FIFO, as the replays they are. */
        s->pend_head = s->spare_head;
        s->pend_tail = s->spare_tail;
        s->spare_head = s->spare_tail = NULL;
        s->spare_deaths = 0;
    } else {
        drop_spare(s);
        char err[MXOP__MSG_MAX];
        w = NULL;
        if (mxop__worker_spawn(d, s, s->generation + 1, &w, &client_fd, err, sizeof(err)) != 0) {
            char msg[MXOP__MSG_MAX];
            mxop__fmt(msg, sizeof(msg), "%s; no replacement worker could be started: %s",
                      e->message, err);
            give_up(s, e->code, msg);
            return;
        }
    }
    s->generation = w->generation;
    s->worker = w;
    s->restarts++;
    /*
     * A new worker missing a library would number the ops after it wrongly:
     * it must not serve.  Its death (outside any call) restarts it, with backoff.
     */
    if (warm ? !replay_device_regions(s) : !replay_to(s, false))
        mxop__worker_kill(w, "it could not be given the session's libraries and regions");
    send_event(s, e->code, e->term_signal, e->exit_status, e->call_id, e->op, e->message, true,
               client_fd);
    close(client_fd);
    MXOP__LOGI(s->id, NULL,
               "worker restarted: pid %d, generation %u, %s (%zu libraries, %zu regions)",
               (int)w->pid, (unsigned)s->generation, warm ? "the warm spare" : "started cold",
               s->n_libs, s->n_regions);
    schedule_spare(s, MXOP__SPARE_DELAY_MS);
}

static void respawn_cb(uv_timer_t *t)
{
    mxop__session_t *s = MXOP__CONTAINER_OF(t, mxop__stimer_t, timer)->s;
    if (s != NULL && s->respawn_due)
        respawn(s);
}

/* True if one of the session's libraries is quarantined (it cannot be given to a new worker). */
static const mxop__lib_t *quarantined_lib(mxop__session_t *s, char *err, size_t errlen)
{
    for (size_t i = 0; i < s->n_libs; i++)
        if (mxop__quarantine_check(s->d, s->libs[i].path, err, errlen) != 0)
            return &s->libs[i];
    return NULL;
}

void mxop__session_worker_died(mxop__session_t *s, int code, int term_signal, int exit_status,
                               uint64_t call_id, const char *op, const char *message, bool served)
{
    mxop__daemon_t *d = s->d;
    mxop__death_t *e = &s->death;
    memset(e, 0, sizeof(*e));
    e->code = code;
    e->term_signal = term_signal;
    e->exit_status = exit_status;
    e->call_id = call_id;
    mxop__fmt(e->op, sizeof(e->op), "%s", op != NULL ? op : "");
    mxop__fmt(e->message, sizeof(e->message), "%s", message);

    /*
     * A worker that died idle while loading a library: say which, and count
     * it against it if the library did it (a fault or an exit, not a
     * SIGKILL from outside or from the OOM killer, nor a timeout).
     */
    char load_note[160] = "";
    if ((op == NULL || op[0] == '\0') && s->pend_head != NULL &&
        s->pend_head->kind == MXOP__PENDING_LOAD) {
        bool by_library = code != MXOP_ETIMEOUT && term_signal != SIGKILL &&
                          term_signal != SIGTERM && term_signal != SIGINT && term_signal != SIGHUP;
        int n = by_library ? mxop__quarantine_crash(d, s->pend_head->path) : 0;
        if (n >= MXOP__QUARANTINE_CRASHES)
            mxop__fmt(load_note, sizeof(load_note),
                      "; it has crashed a worker %d times while loading and is now quarantined", n);
        mxop__fmt(e->message, sizeof(e->message), "%s while loading library '%s'%s", message,
                  s->pend_head->name, load_note);
    }
    /*
     * The loop guard counts only deaths nobody asked for, of workers that
     * never served a call: a worker dying at start-up or while its
     * libraries are replayed would otherwise respawn at full speed for
     * ever.  A death inside a client's call or request is always followed
     * by a restart at once: the next one needs another call, so the client
     * sets the pace (and five crashing calls in a row must each recover).
     */
    bool client_caused = call_id != 0 || (s->pend_head != NULL && !s->pend_head->replay);
    fail_pending(s, message, load_note);
    if (client_caused || served)
        s->idle_deaths = 0;
    if (!client_caused)
        s->idle_deaths++;
    if (s->client == NULL || s->client->conn.closing || d->shutting_down)
        return;

    char msg[MXOP__MSG_MAX];
    char err[MXOP__MSG_MAX];
    const mxop__lib_t *q = quarantined_lib(s, err, sizeof(err));
    if (q != NULL) {
        mxop__fmt(msg, sizeof(msg),
                  "%s; the session's library '%s' is quarantined, so its worker cannot be "
                  "restored and the session's requests now fail",
                  e->message, q->name);
        give_up(s, MXOP_EQUARANTINED, msg);
        return;
    }
    if (s->idle_deaths >= MXOP__RESPAWN_GIVE_UP) {
        mxop__fmt(msg, sizeof(msg),
                  "%s; %d workers in a row died before serving a call, so no more are started "
                  "and the session's requests now fail",
                  e->message, s->idle_deaths);
        give_up(s, code, msg);
        return;
    }
    uint64_t delay = client_caused ? 0 : backoff_ms(s->idle_deaths);
    if (delay == 0 || s->respawn_timer == NULL) {
        respawn(s);
        return;
    }
    s->respawn_due = true;
    s->respawn_at = mxop__now_ns() + (int64_t)delay * 1000000LL;
    uv_timer_start(&s->respawn_timer->timer, respawn_cb, delay, 0);
    MXOP__LOGI(s->id, NULL, "restarting the worker in %llu ms (%d deaths in a row)",
               (unsigned long long)delay, s->idle_deaths);
}
