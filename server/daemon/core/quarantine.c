/*
 * server/daemon/core/quarantine.c - libraries that keep crashing their workers
 * while they load.
 *
 * A library whose load crashes the worker is not retried for ever: every
 * such crash, in any session of this daemon, is counted against the
 * library's resolved path and file identity (device, inode, size, mtime),
 * and after MXOP__QUARANTINE_CRASHES of them the library is refused with
 * MXOP_EQUARANTINED.  A rebuilt file has another identity and starts with
 * a clean record; a daemon restart forgets everything.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"

typedef struct ident {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
} ident_t;

/* A file that cannot be stat'ed has the zero identity: counted by its path alone. */
static ident_t identify(const char *path)
{
    ident_t id;
    memset(&id, 0, sizeof(id));
    struct stat st;
    if (stat(path, &st) == 0) {
        id.dev = st.st_dev;
        id.ino = st.st_ino;
        id.size = st.st_size;
        id.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    }
    return id;
}

static bool same(const mxop__quarantine_t *q, const ident_t *id)
{
    return q->dev == id->dev && q->ino == id->ino && q->size == id->size &&
           q->mtime_ns == id->mtime_ns;
}

static mxop__quarantine_t *find(mxop__daemon_t *d, const char *path)
{
    for (size_t i = 0; i < d->n_quarantine; i++)
        if (strcmp(d->quarantine[i].path, path) == 0)
            return &d->quarantine[i];
    return NULL;
}

int mxop__quarantine_check(mxop__daemon_t *d, const char *path, char *err, size_t errlen)
{
    mxop__quarantine_t *q = find(d, path);
    if (q == NULL || q->crashes < MXOP__QUARANTINE_CRASHES)
        return 0;
    ident_t id = identify(path);
    if (!same(q, &id))
        return 0; /* the file changed since: it gets its chances again when it crashes */
    mxop__fmt(err, errlen,
              "library %s crashed its worker %d times while loading and is quarantined; "
              "it is refused until the file changes or the daemon restarts",
              path, q->crashes);
    return MXOP_EQUARANTINED;
}

int mxop__quarantine_crash(mxop__daemon_t *d, const char *path)
{
    ident_t id = identify(path);
    mxop__quarantine_t *q = find(d, path);
    if (q != NULL && !same(q, &id)) {
        /* Another file at the same path: its record starts afresh. */
        q->dev = id.dev;
        q->ino = id.ino;
        q->size = id.size;
        q->mtime_ns = id.mtime_ns;
        q->crashes = 0;
    }
    if (q == NULL) {
        if (d->n_quarantine == MXOP__QUARANTINE_MAX) {
            /* Full: forget the least recently touched entry, a quarantined one only if all are. */
            size_t victim = 0;
            bool victim_q = true;
            for (size_t i = 0; i < d->n_quarantine; i++) {
                bool iq = d->quarantine[i].crashes >= MXOP__QUARANTINE_CRASHES;
                if ((victim_q && !iq) ||
                    (victim_q == iq && d->quarantine[i].seq < d->quarantine[victim].seq)) {
                    victim = i;
                    victim_q = iq;
                }
            }
            free(d->quarantine[victim].path);
            d->quarantine[victim] = d->quarantine[--d->n_quarantine];
        }
        char *copy = strdup(path);
        if (copy == NULL)
            return 0;
        q = &d->quarantine[d->n_quarantine++];
        memset(q, 0, sizeof(*q));
        q->path = copy;
        q->dev = id.dev;
        q->ino = id.ino;
        q->size = id.size;
        q->mtime_ns = id.mtime_ns;
    }
    q->crashes++;
    q->seq = ++d->quarantine_seq;
    if (q->crashes == MXOP__QUARANTINE_CRASHES)
        MXOP__LOGW(0, NULL,
                   "library %s crashed its worker %d times while loading: quarantined (refused "
                   "until the file changes or the daemon restarts)",
                   path, q->crashes);
    return q->crashes;
}

void mxop__quarantine_free(mxop__daemon_t *d)
{
    for (size_t i = 0; i < d->n_quarantine; i++)
        free(d->quarantine[i].path);
    d->n_quarantine = 0;
}
