/*
 * server/daemon/session/tables.c - what a session holds: its libraries and their
 * ops, its regions, and the supervisor requests it sends (each then waits
 * on its worker's queue, worker.h: the live worker's or the spare's).
 *
 * The worker answers supervisor requests in order; each queued entry
 * records which client request a SupReply completes, or that it was a
 * replay nobody waits for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/opinfo_ext.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/memconfine.h"
#include "server/daemon/session/session.h"
#include "server/daemon/worker/worker.h"

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
    dst->devices = src->devices;
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

const mxop__lib_t *mxop__session_find_lib(const mxop__session_t *s, const char *path)
{
    for (size_t i = 0; i < s->n_libs; i++)
        if (strcmp(s->libs[i].path, path) == 0)
            return &s->libs[i];
    return NULL;
}

/* The session's library names for the prefix of its workers' output (worker_output.c). */
static void note_libs(const mxop__session_t *s)
{
    char names[1024];
    size_t at = 0;
    names[0] = '\0';
    for (size_t i = 0; i < s->n_libs && at + 1 < sizeof(names); i++)
        at +=
            (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? "," : "", s->libs[i].name);
    (void)mxop__worker_output_set_libs(s->id, names);
}

int mxop__session_add_lib(mxop__session_t *s, const char *path, const char *name,
                          const Mxop__SupReply *r)
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
    note_libs(s);
    return 0;

err_ops:
    while (i-- > 0)
        op_free(&s->ops[s->n_ops + i]);
err_lib:
    free(lib.path);
    free(lib.name);
    return MXOP_ENOMEM;
}

ssize_t mxop__session_find_region(const mxop__session_t *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_regions; i++)
        if (s->regions[i].id == id)
            return (ssize_t)i;
    return -1;
}

int mxop__session_add_region(mxop__session_t *s, const mxop__region_t *r)
{
    if (grow((void **)&s->regions, &s->cap_regions, s->n_regions + 1, sizeof(*s->regions)) != 0)
        return MXOP_ENOMEM;
    s->regions[s->n_regions++] = *r;
    s->region_bytes += r->size;
    return 0;
}

uint32_t mxop__session_new_region_id(mxop__session_t *s)
{
    uint32_t id;
    do {
        id = s->next_region++;
        if (s->next_region == 0)
            s->next_region = 1;
    } while (id == 0 || mxop__session_find_region(s, id) >= 0);
    return id;
}

mxop__pending_t *mxop__pending_new(mxop__session_t *s, int kind, uint64_t req_id, bool replay)
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

void mxop__pending_free(mxop__pending_t *p)
{
    if (p == NULL)
        return;
    free(p->path);
    free(p->name);
    free(p->allowlist_where);
    free(p->open_error);
    if (p->fd >= 0)
        close(p->fd);
    free(p);
}

void mxop__pending_free_list(mxop__pending_t *p)
{
    while (p != NULL) {
        mxop__pending_t *next = p->next;
        mxop__pending_free(p);
        p = next;
    }
}

int mxop__pending_send(mxop__session_t *s, mxop__pending_t *p, int fd, enum mxop__pending_fifo q)
{
    Mxop__SupRequest req = MXOP__SUP_REQUEST__INIT;
    Mxop__WorkerLoad load = MXOP__WORKER_LOAD__INIT;
    Mxop__WorkerMap map = MXOP__WORKER_MAP__INIT;
    Mxop__WorkerUnmap unmap = MXOP__WORKER_UNMAP__INIT;
    Mxop__WorkerPing ping = MXOP__WORKER_PING__INIT;
    int ro_fd = -1;
    req.id = p->sup_id;
    switch (p->kind) {
    case MXOP__PENDING_LOAD:
        load.path = p->path;
        load.name = p->name;
        load.confine = s->mem_confined;
        /* The library goes as the descriptor the daemon opened (libfd.c); never by path alone. */
        load.sha256 = p->expect_sha256;
        load.allowlist_where = p->allowlist_where != NULL ? p->allowlist_where : "";
        fd = p->fd;
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
        map.scratch = p->scratch;
        map.reserved_from = p->reserved_from;
        if (s->mem_confined && !p->cuda && !p->scratch && fd >= 0) {
            /* Scratch mode: the worker gets a descriptor it cannot write through. */
            char why[256];
            ro_fd = mxop__memconfine_ro_fd(fd, why, sizeof(why));
            if (ro_fd < 0) {
                MXOP__LOGW(s->id, NULL, "region %u: %s", (unsigned)p->region, why);
                return MXOP_ESHM;
            }
            fd = ro_fd;
            map.read_only = true;
        }
        req.body_case = MXOP__SUP_REQUEST__BODY_MAP;
        req.map = &map;
        break;
    case MXOP__PENDING_PING:
        req.body_case = MXOP__SUP_REQUEST__BODY_PING;
        req.ping = &ping;
        break;
    default:
        unmap.region = p->region;
        req.body_case = MXOP__SUP_REQUEST__BODY_UNMAP;
        req.unmap = &unmap;
        break;
    }
    /* Sent, it joins the worker's queue until its answer. */
    int rc = mxop__worker_send(q == MXOP__FIFO_SPARE ? s->spare : s->worker, &req, fd, p);
    if (ro_fd >= 0)
        close(ro_fd);
    return rc;
}

int mxop__pending_send_client(mxop__session_t *s, mxop__pending_t *p, int fd)
{
    int rc = mxop__pending_send(s, p, fd, MXOP__FIFO_LIVE);
    /*
     * A worker that broke its channel is killed and reaped a moment later;
     * until then the session still says RUNNING.  A request caught in that
     * window is not the one that crashed: it waits for the replacement, as
     * requests after a Retire do, instead of failing with another's crash.
     * (A held load or map is re-sent with its descriptor, p->fd.)
     */
    if (rc != MXOP_EWORKER_CRASHED || !mxop__session_serving(s))
        return rc;
    p->next = NULL;
    mxop__pending_t **tail = &s->held;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = p;
    MXOP__LOGD(s->id, NULL, "request %llu held for the replacement of the dying worker",
               (unsigned long long)p->req_id);
    return 0;
}

void mxop__session_free(mxop__session_t *s)
{
    (void)mxop__worker_output_set_libs(s->id, NULL);
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
    mxop__call_page_free(s);
    free(s);
}
