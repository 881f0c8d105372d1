/*
 * server/worker/sup.c - the supervisor channel's requests: load, map, unmap.
 *
 * The daemon has already checked what it forwards (library paths inside
 * the plugin directory, region fds that can back their size); the worker
 * checks again what would crash it if wrong, and answers every request
 * with a status and, on failure, a sentence.
 */
#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"
#include "server/worker/cuda.h"
#include "server/worker/worker.h"

static char msg[MXOP__W_MSG_MAX];

static void close_fds(int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static void fill_info(Mxop__OpInfo *info, const mxop__worker_op_t *op)
{
    mxop__op_info__init(info);
    info->index = op->index;
    info->name = (char *)op->name;
    info->description = op->description != NULL ? op->description : "";
    info->library = mxop__lib_get(op->lib)->name;
    info->num_inputs = op->def.num_inputs;
    info->min_inputs = op->def.min_inputs;
    info->num_outputs = op->def.num_outputs;
    info->mutated_inputs = op->def.mutated_inputs;
    info->has_backward = mxop__op_has_backward(op);
    info->stateful = mxop__op_stateful(op);
    info->n_attrs = (size_t)op->n_decls;
    info->attrs = op->pb_ptrs;
    info->flags = op->def.flags;
    info->dynamic_outputs = op->def.dynamic_outputs;
    /* For `mxop ops`: which tensors the op's forward callbacks take. */
    if (mxop__op_stateful(op))
        info->devices = (op->def.state_forward != NULL ? 1u : 0u) |
                        (op->def.state_forward_gpu != NULL ? 2u : 0u);
    else
        info->devices =
            (op->def.forward != NULL ? 1u : 0u) | (op->def.forward_gpu != NULL ? 2u : 0u);
}

static int load(const Mxop__WorkerLoad *wl, int *fds, int nfds, Mxop__SupReply *reply)
{
    uint32_t li;
    /* The worker loads only what the daemon opened for it: it never opens a library by path. */
    if (nfds != 1) {
        mxop__fmt(msg, sizeof(msg),
                  "WorkerLoad of '%s' came with %d descriptors, not the library's 1 (the daemon "
                  "could not open it: see its log)",
                  wl->name != NULL ? wl->name : "", nfds);
        return MXOP_EINVAL;
    }
    int fd = fds[0];
    fds[0] = -1; /* the loader takes it */
    /* Before any code of an untrusted library runs, the engine's regions become read-only. */
    if (wl->confine)
        mxop__regions_confine();
    int rc = mxop__plugin_load(wl->path, wl->name, fd, wl->sha256, wl->allowlist_where, &li, msg,
                               sizeof(msg));
    if (rc != 0)
        return rc;
    const mxop__worker_lib_t *lib = mxop__lib_get(li);
    if (lib->n_ops == 0)
        return 0;
    /* Loads are rare and off the hot path: the list may be allocated. */
    Mxop__OpInfo **ptrs = calloc(lib->n_ops, sizeof(*ptrs));
    Mxop__OpInfo *infos = calloc(lib->n_ops, sizeof(*infos));
    if (ptrs == NULL || infos == NULL) {
        free(ptrs);
        free(infos);
        mxop__fmt(msg, sizeof(msg), "library '%s' loaded, but its op list is out of memory",
                  lib->name);
        return MXOP_ENOMEM;
    }
    for (uint32_t i = 0; i < lib->n_ops; i++) {
        fill_info(&infos[i], mxop__op_get(lib->first_op + i));
        ptrs[i] = &infos[i];
    }
    reply->n_ops = lib->n_ops;
    reply->ops = ptrs;
    return 0;
}

static int map(const Mxop__WorkerMap *wm, int *fds, int nfds)
{
    if (wm->cuda_ipc_handle.len > 0) {
        /* A device region: the handle is the memory, no descriptor comes with it. */
        if (nfds != 0) {
            mxop__fmt(msg, sizeof(msg),
                      "WorkerMap of device region %u came with %d descriptors, not 0", wm->region,
                      nfds);
            return MXOP_EINVAL;
        }
        return mxop__region_add_cuda(wm->region, wm->size, wm->device, wm->cuda_ipc_handle.data,
                                     wm->cuda_ipc_handle.len, msg, sizeof(msg));
    }
    if (nfds != 1) {
        mxop__fmt(msg, sizeof(msg), "WorkerMap of region %u came with %d descriptors, not 1",
                  wm->region, nfds);
        return MXOP_EINVAL;
    }
    unsigned flags =
        (wm->read_only ? MXOP__MAP_READ_ONLY : 0u) | (wm->scratch ? MXOP__MAP_SCRATCH : 0u);
    int rc = mxop__region_add_flags(wm->region, wm->size, fds[0], flags, wm->reserved_from, msg,
                                    sizeof(msg));
    /* The mappings keep the memory; the descriptor is no longer needed. */
    close(fds[0]);
    fds[0] = -1;
    return rc;
}

void mxop__sup_handle(const Mxop__SupRequest *req, int *fds, int nfds, Mxop__SupReply *reply)
{
    int rc;
    msg[0] = '\0';
    reply->id = req->id;
    switch (req->body_case) {
    case MXOP__SUP_REQUEST__BODY_LOAD: rc = load(req->load, fds, nfds, reply); break;
    case MXOP__SUP_REQUEST__BODY_MAP: rc = map(req->map, fds, nfds); break;
    case MXOP__SUP_REQUEST__BODY_UNMAP:
        rc = mxop__region_remove(req->unmap->region, msg, sizeof(msg));
        break;
    case MXOP__SUP_REQUEST__BODY_PING:
        /* Answered by the serving loop itself: that it runs is the answer. */
        rc = 0;
        break;
    default:
        mxop__fmt(msg, sizeof(msg), "supervisor request %llu carries no load, map, unmap or ping",
                  (unsigned long long)req->id);
        rc = MXOP_EPROTOCOL;
        break;
    }
    close_fds(fds, nfds);
    reply->status = rc;
    if (rc != 0 && msg[0] == '\0')
        mxop__fmt(msg, sizeof(msg), "supervisor request %llu failed", (unsigned long long)req->id);
    reply->message = rc != 0 ? msg : "";
}

void mxop__sup_reply_done(Mxop__SupReply *reply)
{
    if (reply->n_ops > 0) {
        free(reply->ops[0]);
        free(reply->ops);
    }
    reply->n_ops = 0;
    reply->ops = NULL;
}
