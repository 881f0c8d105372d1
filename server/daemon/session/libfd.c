/*
 * server/daemon/session/libfd.c - the daemon opens each library a worker loads.
 *
 * A worker runs under an unprivileged uid and, under strict, a Landlock
 * view without the plugin directory: it cannot open a library by its
 * path, and must not (a library that could read the plugin directory could
 * read every other library in it, and one that could open paths could be
 * handed another file between check and load).  So the daemon opens the
 * library, takes its version (identity and SHA-256, libver.c) from that
 * descriptor, checks it against the allowlist (integrity.c), and sends the
 * descriptor with every WorkerLoad: the first load, the replay into a
 * replacement worker or the spare, the reload.  The worker loads what that
 * descriptor reads (server/worker/integrity.c): the version `mxop status`
 * shows is the file the worker runs, even if the path is replaced a moment
 * later.
 *
 * The descriptor belongs to the pending entry and is closed with it, once
 * the worker has answered; a later replay opens the path again (the
 * file now at the path is what a replacement worker loads, as --watch and
 * Reload expect).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

int mxop__libfd_open(const mxop__daemon_t *d, mxop__pending_t *p, char *err, size_t errlen)
{
    const char *lname = p->name != NULL ? p->name : p->path;
    /*
     * O_NONBLOCK: a FIFO planted under the name must not stall the daemon's
     * loop in open(); it is refused below as not a regular file.  On a
     * regular file the flag changes nothing.
     */
    int fd = open(p->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        mxop__fmt(err, errlen, "library '%s' (%s) cannot be opened: %s%s", lname, p->path,
                  strerror(e), e == ELOOP ? " (a symbolic link is not followed)" : "");
        return e == ENOENT ? MXOP_ELIB_NOT_FOUND : MXOP_ELIB_INVALID;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mxop__fmt(err, errlen, "library '%s' (%s) is not a regular file", lname, p->path);
        close(fd);
        return MXOP_ELIB_INVALID;
    }
    int rc = mxop__libver_fd(fd, &st, &p->ver, err, errlen);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    char where[PATH_MAX + 32];
    int trusted = 0;
    rc = mxop__integrity_lookup(d->cfg.plugin_dir, p->path, lname, p->expect_sha256, where,
                                sizeof(where), &trusted, err, errlen);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (rc == 1 && strcmp(p->ver.sha256, p->expect_sha256) != 0) {
        mxop__fmt(err, errlen,
                  "library '%s' refused: its SHA-256 is %s, the allowlist %s expects %s", lname,
                  p->ver.sha256, where, p->expect_sha256);
        close(fd);
        return MXOP_EDENIED;
    }
    if (rc == 1 && (p->allowlist_where = strdup(where)) == NULL) {
        mxop__fmt(err, errlen, "out of memory loading library '%s'", lname);
        close(fd);
        return MXOP_ENOMEM;
    }
    p->allow_trusted = trusted != 0;
    p->fd = fd;
    return 0;
}
