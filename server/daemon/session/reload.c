/*
 * server/daemon/session/reload.c - hot reload: Reload requests, --watch, and the
 * versions a session runs (the waiting Reloads and their answers:
 * reload_wait.c).
 *
 * A Reload names a library as LoadLibrary does.  Every session that loaded
 * it gets EV_RELOAD (session_fsm.c): its worker retires between calls and
 * a replacement loads the file now at the path; new sessions load that
 * file anyway, since every worker opens the library by its path when it is
 * given it (nothing caches a descriptor of the old file).  The reply waits
 * until each of those sessions has left RETIRING (replaced, failed or
 * ended), so that a client who calls after the reply reaches the new
 * version.
 *
 * With --watch on, once a second the daemon compares the identity of each
 * loaded library's file (device, inode, size, mtime) with the version the
 * session runs, and reloads the sessions whose file changed, as a Reload
 * would (no one waits for a reply).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

#define WATCH_PERIOD_NS 1000000000LL

/*
 * Sends EV_RELOAD to every session running `path`; their ids go to
 * *ids (malloc'd, may be NULL when none).  Returns how many now retire.
 */
static size_t reload_sessions(mxop__daemon_t *d, const char *name, const char *path,
                              const mxop__libver_t *v, uint64_t **ids)
{
    char why[MXOP__MSG_MAX / 2];
    mxop__fmt(why, sizeof(why), "library '%s' (now %.16s..., %lld bytes)", name,
              v->known ? v->sha256 : "unknown", (long long)v->size);
    size_t n = 0, cap = 0;
    *ids = NULL;
    for (mxop__list_t *it = d->clients.next; it != &d->clients; it = it->next) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(it, mxop__client_t, link);
        mxop__session_t *s = cl->session;
        if (s == NULL || cl->conn.closing || mxop__libver_lib(s, path) == NULL)
            continue;
        if (!mxop__session_reload(s, why))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            uint64_t *g = realloc(*ids, nc * sizeof(**ids));
            if (g == NULL)
                continue; /* it retires all the same; the reply just does not wait for it */
            *ids = g;
            cap = nc;
        }
        (*ids)[n++] = s->id;
    }
    return n;
}

void mxop__ctl_reload(mxop__client_t *cl, const Mxop__Request *req)
{
    mxop__daemon_t *d = cl->d;
    char err[MXOP__MSG_MAX];
    if (!mxop__client_is_admin(d, cl)) {
        int rc = mxop__admin_refusal(d, cl, "Reload", err, sizeof(err));
        MXOP__LOGW(0, NULL, "client %llu: %s", (unsigned long long)cl->id, err);
        mxop__client_reply_error(cl, req->id, rc, err);
        return;
    }
    const char *name = req->reload->library != NULL ? req->reload->library : "";
    char resolved[PATH_MAX];
    int rc = mxop__plugin_resolve(d->cfg.plugin_dir, name, strlen(name), resolved, sizeof(resolved),
                                  err, sizeof(err));
    if (rc != 0) {
        mxop__reply_errorf(cl, req->id, rc, "Reload refused: %s", err);
        return;
    }
    struct mxop__reload_wait *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->name = strdup(name)) == NULL || (w->path = strdup(resolved)) == NULL) {
        if (w != NULL)
            mxop__reload_wait_free(w);
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for a reload");
        return;
    }
    rc = mxop__libver_read(resolved, &w->ver, err, sizeof(err));
    if (rc != 0) {
        mxop__reply_errorf(cl, req->id, rc, "Reload refused: %s", err);
        mxop__reload_wait_free(w);
        return;
    }
    w->client_id = cl->id;
    w->req_id = req->id;
    w->n_sessions = reload_sessions(d, name, resolved, &w->ver, &w->sessions);
    MXOP__LOGI(0, NULL,
               "reload of library '%s' (%s, sha256 %s) requested by client %llu (uid %u): %zu "
               "sessions replace their workers",
               name, resolved, w->ver.sha256, (unsigned long long)cl->id, (unsigned)cl->uid,
               w->n_sessions);
    mxop__reload_wait_add(d, w);
}

void mxop__ctl_session_libraries(mxop__client_t *cl, const Mxop__Request *req)
{
    mxop__session_t *s = cl->session;
    if (s == NULL) {
        mxop__client_reply_error(cl, req->id, MXOP_EPROTOCOL,
                                 "SessionLibraries needs a session: open a session first");
        return;
    }
    const mxop__lib_t *libs;
    size_t n = mxop__session_libs(s, &libs);
    Mxop__LibraryVersion *lv = n ? calloc(n, sizeof(*lv)) : NULL;
    Mxop__LibraryVersion **ptrs = n ? calloc(n, sizeof(*ptrs)) : NULL;
    if (n > 0 && (lv == NULL || ptrs == NULL)) {
        free(lv);
        free(ptrs);
        mxop__client_reply_error(cl, req->id, MXOP_ENOMEM, "out of memory for the library list");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        mxop__libver_pb(libs[i].name, libs[i].path, &libs[i].ver, &lv[i]);
        ptrs[i] = &lv[i];
    }
    Mxop__SessionLibrariesReply sl = MXOP__SESSION_LIBRARIES_REPLY__INIT;
    sl.session = s->id;
    sl.n_libraries = n;
    sl.libraries = ptrs;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = req->id;
    r.body_case = MXOP__REPLY__BODY_SESSION_LIBRARIES;
    r.session_libraries = &sl;
    mxop__reply_send(cl, &r, -1);
    free(lv);
    free(ptrs);
}

/* --watch: the first library of `s` whose file is no longer the one it runs, or NULL. */
static const mxop__lib_t *changed_lib(mxop__session_t *s, mxop__libver_t *now)
{
    /* A session mid-load or mid-replay has versions about to change: look next time. */
    if (!mxop__session_serving(s) || mxop__worker_queue(s->worker) != NULL)
        return NULL;
    for (size_t i = 0; i < s->n_libs; i++) {
        const mxop__lib_t *lib = &s->libs[i];
        struct stat st;
        /* A file missing for a moment (mid-rename) is not a change to act on. */
        if (!lib->ver.known || stat(lib->path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (mxop__libver_changed(&lib->ver, &st)) {
            mxop__libver_identity(&st, now);
            now->known = false;
            return lib;
        }
    }
    return NULL;
}

void mxop__reload_tick(mxop__daemon_t *d, int64_t now)
{
    if (!d->cfg.watch || d->shutting_down || now - d->watch_last_ns < WATCH_PERIOD_NS)
        return;
    d->watch_last_ns = now;
    for (mxop__list_t *it = d->clients.next; it != &d->clients; it = it->next) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(it, mxop__client_t, link);
        if (cl->session == NULL || cl->conn.closing)
            continue;
        mxop__libver_t v;
        const mxop__lib_t *lib = changed_lib(cl->session, &v);
        if (lib == NULL)
            continue;
        /* Copies: reloading may change the session's library table. */
        char name[256], path[PATH_MAX];
        mxop__fmt(name, sizeof(name), "%s", lib->name);
        mxop__fmt(path, sizeof(path), "%s", lib->path);
        char err[MXOP__MSG_MAX];
        if (mxop__libver_read(path, &v, err, sizeof(err)) != 0)
            continue;
        uint64_t *ids = NULL;
        size_t n = reload_sessions(d, name, path, &v, &ids);
        free(ids);
        MXOP__LOGI(0, NULL,
                   "--watch: library '%s' (%s) changed (sha256 %s): %zu sessions replace "
                   "their workers",
                   name, path, v.sha256, n);
    }
}
