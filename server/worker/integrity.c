/*
 * server/worker/integrity.c - the file checked is the file loaded.
 *
 * The worker never opens a library by its path: the daemon opens it (it
 * may read the plugin directory; the worker, under an unprivileged uid and
 * a Landlock view without that directory, may not) and sends the
 * descriptor with the WorkerLoad.  Here that descriptor's content is
 * copied into a sealed memfd, whose digest is checked against the one the
 * daemon took from the allowlist, and the loader is handed that memfd as
 * /proc/self/fd/N.
 *
 * Why a copy, and not the received descriptor itself: the dynamic loader
 * needs a path, and opening /proc/self/fd/N of a regular file reopens the
 * file at its real path, which Landlock checks against the plugin
 * directory the worker no longer may read.  A memfd lives on no path a
 * rule could cover and reopens freely.  The copy also makes the check
 * exact: once sealed (no write, no resize), nothing, not even someone who
 * may write the library in place, can change what was checked before the
 * loader maps it.
 *
 * The descriptor (the memfd) stays open while the library is loaded, so
 * that its /proc/self/fd name never names another file to the dynamic
 * loader, which recognises an object it already has by that name.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sha256.h"
#include "common/util.h"
#include "mxop/errors.h"
#include "server/worker/worker.h"

/* Copies all of `src` (read with pread, so its offset is irrelevant) into `dst`. */
static int copy_all(int src, int dst)
{
    static char buf[64 * 1024];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(src, buf, sizeof(buf), off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return 0;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(dst, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return -errno;
            done += w;
        }
        off += n;
    }
}

int mxop__integrity_load_fd(int fd, const char *lname, const char *expect, const char *where,
                            int *fd_out, char *msg, size_t msglen)
{
    *fd_out = -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mxop__fmt(msg, msglen, "library '%s': the descriptor the daemon sent is not a regular file",
                  lname);
        close(fd);
        return MXOP_ELIB_INVALID;
    }
    int mfd = memfd_create("mxop-lib", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0) {
        mxop__fmt(msg, msglen, "library '%s': memfd_create for its private copy: %s", lname,
                  strerror(errno));
        close(fd);
        return MXOP_ELIB_INVALID;
    }
    int rc = copy_all(fd, mfd);
    close(fd);
    if (rc != 0) {
        mxop__fmt(msg, msglen, "library '%s': copying it into memory: %s", lname, strerror(-rc));
        close(mfd);
        return rc == -ENOMEM || rc == -ENOSPC ? MXOP_ENOMEM : MXOP_ELIB_INVALID;
    }
    /* Sealed before the digest: the bytes checked are the bytes mapped. */
    if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        mxop__fmt(msg, msglen, "library '%s': sealing its private copy: %s", lname,
                  strerror(errno));
        close(mfd);
        return MXOP_ELIB_INVALID;
    }
    if (expect != NULL && expect[0] != '\0') {
        char actual[65];
        rc = mxop__sha256_fd(mfd, actual);
        if (rc != 0) {
            mxop__fmt(msg, msglen, "library '%s': reading it for its digest: %s", lname,
                      strerror(-rc));
            close(mfd);
            return MXOP_ELIB_INVALID;
        }
        if (strcmp(actual, expect) != 0) {
            mxop__fmt(msg, msglen,
                      "library '%s' refused: its SHA-256 is %s, the allowlist %s expects %s", lname,
                      actual, where != NULL && where[0] != '\0' ? where : "", expect);
            close(mfd);
            return MXOP_EDENIED;
        }
    }
    *fd_out = mfd;
    return 0;
}
