/*
 * server/daemon/session/libver.c - which version of a library a session runs.
 *
 * A library's version is the identity of its file (device, inode, size,
 * modification time) and the SHA-256 of its content, read by the daemon
 * when it hands the library to a worker: the new live worker, a replay
 * after a crash or a reload, or the warm spare.  Hot reload (reload.c)
 * reports it, and --watch compares the identity with the file now at the
 * path to find a library that changed.
 *
 * The daemon reads the version from the very descriptor it sends the
 * worker to load (libfd.c): the version shown is the file the worker runs,
 * even if the path is replaced meanwhile; with --watch, the next check
 * sees the identity at the path differ and reloads the session.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sha256.h"
#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/session/session.h"

static int64_t realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void mxop__libver_identity(const struct stat *st, mxop__libver_t *v)
{
    v->dev = st->st_dev;
    v->ino = st->st_ino;
    v->size = st->st_size;
    v->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

int mxop__libver_fd(int fd, const struct stat *st, mxop__libver_t *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof(*v));
    v->loaded_at_ms = realtime_ms();
    /* Identity and digest of the same descriptor: they describe one file. */
    mxop__libver_identity(st, v);
    int rc = mxop__sha256_fd(fd, v->sha256);
    if (rc != 0) {
        mxop__fmt(err, errlen, "library cannot be read for its digest: %s", strerror(-rc));
        v->sha256[0] = '\0';
        return MXOP_ELIB_INVALID;
    }
    v->known = true;
    return 0;
}

int mxop__libver_read(const char *path, mxop__libver_t *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof(*v));
    v->loaded_at_ms = realtime_ms();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mxop__fmt(err, errlen, "library %s cannot be read for its version: %s", path,
                  fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return MXOP_ELIB_INVALID;
    }
    int rc = mxop__libver_fd(fd, &st, v, err, errlen);
    close(fd);
    return rc;
}

bool mxop__libver_changed(const mxop__libver_t *v, const struct stat *st)
{
    mxop__libver_t now;
    mxop__libver_identity(st, &now);
    return !v->known || now.dev != v->dev || now.ino != v->ino || now.size != v->size ||
           now.mtime_ns != v->mtime_ns;
}

mxop__lib_t *mxop__libver_lib(mxop__session_t *s, const char *path)
{
    for (size_t i = 0; i < s->n_libs; i++)
        if (strcmp(s->libs[i].path, path) == 0)
            return &s->libs[i];
    return NULL;
}

size_t mxop__session_libs(const mxop__session_t *s, const mxop__lib_t **libs)
{
    *libs = s->libs;
    return s->n_libs;
}

void mxop__libver_pb(const char *name, const char *path, const mxop__libver_t *v,
                     Mxop__LibraryVersion *out)
{
    mxop__library_version__init(out);
    out->name = (char *)name;
    out->path = (char *)path;
    if (!v->known)
        return;
    out->dev = (uint64_t)v->dev;
    out->ino = (uint64_t)v->ino;
    out->size = (uint64_t)v->size;
    out->mtime_ns = v->mtime_ns;
    out->sha256 = (char *)v->sha256;
    out->loaded_at_ms = v->loaded_at_ms;
}

/*
 * A library given again to a new worker (a replay after a crash or a
 * reload) must register the same ops, at the same indices, with the same
 * signatures: the client calls ops by index, and a new file with other
 * ops would have its calls run the wrong op.
 */
int mxop__libver_same_ops(const mxop__session_t *s, const char *name, const Mxop__SupReply *r,
                          char *why, size_t whylen)
{
    size_t had = 0;
    for (size_t j = 0; j < s->n_ops; j++)
        had += s->ops[j].library != NULL && strcmp(s->ops[j].library, name) == 0;
    if (had != r->n_ops) {
        mxop__fmt(why, whylen, "library '%s' now registers %zu ops where the session has %zu", name,
                  r->n_ops, had);
        return MXOP_ELIB_INVALID;
    }
    for (size_t i = 0; i < r->n_ops; i++) {
        const Mxop__OpInfo *n = r->ops[i];
        const Mxop__OpInfo *o = NULL;
        for (size_t j = 0; j < s->n_ops && o == NULL; j++)
            if (s->ops[j].index == n->index)
                o = &s->ops[j];
        if (o == NULL || strcmp(o->name, n->name) != 0 || o->num_inputs != n->num_inputs ||
            o->min_inputs != n->min_inputs || o->num_outputs != n->num_outputs ||
            o->stateful != n->stateful || o->has_backward != n->has_backward ||
            o->mutated_inputs != n->mutated_inputs) {
            mxop__fmt(why, whylen,
                      "library '%s' now registers op '%s' at index %u, where the session has "
                      "%s%s%s with another signature",
                      name, n->name, (unsigned)n->index, o ? "op '" : "no op", o ? o->name : "",
                      o ? "'" : "");
            return MXOP_ELIB_INVALID;
        }
    }
    return 0;
}
