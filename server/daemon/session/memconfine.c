/*
 * server/daemon/session/memconfine.c - the engine's memory is the engine's.
 *
 * Under --sandbox strict a session that loads a library the operator did
 * not mark trusted (--trusted-library) goes to scratch mode for good: its
 * workers never hold a writable mapping or descriptor of an engine region.
 * The daemon gives them each region as a read-only reopen of its
 * descriptor, and seals memfds with F_SEAL_FUTURE_WRITE (with SHRINK and
 * GROW), because a memfd lives on an internal mount that Landlock does not
 * cover: without the seal an op could reopen /proc/self/fd/N read-write.
 * The seal leaves the client's existing mapping writable; it refuses new
 * writable mappings to everyone, for the life of the memory.  Outputs go
 * through the client's scratch region (RegisterRegion.scratch), the one
 * region the worker may write, and the client copies them into place
 * (client/scratch.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/session/memconfine.h"
#include "server/daemon/session/session.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define MAX_TRUSTED 64

static const char *trusted[MAX_TRUSTED];
static int n_trusted;

int mxop__memconfine_option(const char *opt, const char *val, char *err, size_t errlen)
{
    if (strcmp(opt, "--trusted-library") != 0)
        return 1;
    if (n_trusted == MAX_TRUSTED) {
        mxop__fmt(err, errlen, "at most %d --trusted-library options", MAX_TRUSTED);
        return MXOP_EINVAL;
    }
    trusted[n_trusted++] = val;
    return 0;
}

bool mxop__memconfine_trusted(const mxop__daemon_t *d, const char *resolved)
{
    if (strcmp(d->cfg.sandbox, "strict") != 0)
        return true;
    /* Each name is resolved as a LoadLibrary of it would be, so "./x.so" and "x.so" agree. */
    for (int i = 0; i < n_trusted; i++) {
        char path[PATH_MAX], why[256];
        if (mxop__plugin_resolve(d->cfg.plugin_dir, trusted[i], strlen(trusted[i]), path,
                                 sizeof(path), why, sizeof(why)) == 0 &&
            strcmp(path, resolved) == 0)
            return true;
    }
    return false;
}

/*
 * Makes a region's file unwritable through any new descriptor or mapping.
 * A memfd that takes seals is sealed against new writable mappings and
 * size changes.  A file that does not (a memfd made without
 * MFD_ALLOW_SEALING, a /dev/shm file, a regular file) loses its write
 * permission bits instead, so that a read-write reopen through
 * /proc/self/fd fails the permission check: strict workers have no
 * CAP_DAC_OVERRIDE, and their filter refuses chmod and xattr changes (a
 * worker of the same uid owns the file and could otherwise undo it).
 * Descriptors already open read-write (the client's) keep working.
 */
static int seal(int fd, char *err, size_t errlen)
{
    int have = fcntl(fd, F_GET_SEALS);
    int want = F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;
    if (have >= 0 && (have & want) == want)
        return 0;
    /* F_SEAL_SEAL too: nothing may change the seals afterwards. */
    if (have >= 0 && fcntl(fd, F_ADD_SEALS, want | F_SEAL_SEAL) == 0)
        return 0;
    int seal_errno = have >= 0 ? errno : 0;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        mxop__fmt(err, errlen, "a region's file cannot be inspected: %s", strerror(errno));
        return MXOP_ESHM;
    }
    if ((st.st_mode & 0222) == 0 || fchmod(fd, st.st_mode & 07555) == 0)
        return 0;
    mxop__fmt(err, errlen,
              "a region's file can be made read-only neither by seals (%s) nor by its mode (%s); "
              "a session running an untrusted library needs regions created by "
              "mxop_region_create, memfds made with MFD_ALLOW_SEALING, or files the daemon may "
              "chmod",
              seal_errno != 0 ? strerror(seal_errno) : "it takes none", strerror(errno));
    return MXOP_ESHM;
}

int mxop__memconfine_ro_fd(int fd, char *err, size_t errlen)
{
    if (seal(fd, err, errlen) != 0)
        return -1;
    char path[48];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    if (ro < 0)
        mxop__fmt(err, errlen, "cannot reopen a region read-only for the worker: %s",
                  strerror(errno));
    return ro;
}

int mxop__memconfine_session(mxop__session_t *s, char *err, size_t errlen)
{
    if (s->mem_confined)
        return 0;
    for (size_t i = 0; i < s->n_regions; i++)
        if (!s->regions[i].cuda && !s->regions[i].scratch && s->regions[i].fd >= 0 &&
            seal(s->regions[i].fd, err, errlen) != 0)
            return MXOP_ESHM;
    for (const mxop__pending_t *p = mxop__worker_queue(s->worker); p != NULL; p = p->next)
        if (p->kind == MXOP__PENDING_MAP && !p->scratch && p->fd >= 0 &&
            seal(p->fd, err, errlen) != 0)
            return MXOP_ESHM;
    s->mem_confined = true;
    MXOP__LOGI(s->id, NULL,
               "scratch mode: the session loads an untrusted library; its workers hold its "
               "regions read-only, outputs go through the client's scratch region");
    return 0;
}

int mxop__memconfine_check_region(const mxop__session_t *s, int fd, bool scratch, char *err,
                                  size_t errlen)
{
    if (!s->mem_confined || scratch)
        return 0;
    int ro = mxop__memconfine_ro_fd(fd, err, errlen);
    if (ro < 0)
        return MXOP_ESHM;
    close(ro);
    return 0;
}
