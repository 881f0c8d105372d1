/*
 * server/worker/integrity.c - the file checked is the file loaded.
 *
 * With an allowlist (--allowlist FILE, common/allowlist.h) the worker opens
 * the library once, computes the SHA-256 of what that descriptor reads,
 * compares it with the digest listed for the library's name (its path
 * relative to the plugin directory), and hands the loader that same
 * descriptor as /proc/self/fd/N.  A file swapped in the plugin directory
 * between check and load is never the one loaded: the descriptor keeps the
 * inode that was checked.  (Its content could still change if someone may
 * write to it in place: the daemon warns about, or with
 * --strict-plugin-dir refuses, a plugin directory or library writable by
 * anyone but its owner.)
 *
 * The allowlist is read at every load, so an edited file applies from the
 * next load on without restarting the daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/allowlist.h"
#include "common/util.h"
#include "mxop/errors.h"
#include "server/worker/sandbox.h"
#include "server/worker/worker.h"

/* The library's name in the allowlist: its path below the plugin directory. */
static const char *listed_name(const char *path)
{
    const char *dir = mxop__sandbox_plugin_dir();
    size_t n = dir != NULL ? strlen(dir) : 0;
    if (n > 0 && strncmp(path, dir, n) == 0 && path[n] == '/')
        return path + n + 1;
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

int mxop__integrity_open(const char *path, const char *lname, int *fd_out, char *msg, size_t msglen)
{
    *fd_out = -1;
    const char *list = mxop__sandbox_allowlist();
    if (list == NULL || list[0] == '\0')
        return 0;
    const char *name = listed_name(path);
    char *text = NULL;
    char why[256];
    int rc = mxop__allowlist_read(list, &text, why, sizeof(why));
    if (rc != 0) {
        mxop__fmt(msg, msglen, "library '%s' refused: %s", lname, why);
        return MXOP_EDENIED;
    }
    char expected[65];
    int line = 0;
    rc = mxop__allowlist_find(text, name, expected, &line, why, sizeof(why));
    free(text);
    if (rc < 0) {
        mxop__fmt(msg, msglen, "library '%s' refused: %s: %s", lname, list, why);
        return MXOP_EDENIED;
    }
    if (rc == 0) {
        mxop__fmt(msg, msglen, "library '%s' refused: '%s' is not in the allowlist %s", lname, name,
                  list);
        return MXOP_EDENIED;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mxop__fmt(msg, msglen, "library '%s' cannot be opened for its digest: %s", lname,
                  fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return MXOP_ELIB_INVALID;
    }
    char actual[65];
    rc = mxop__sha256_fd(fd, actual);
    if (rc != 0) {
        mxop__fmt(msg, msglen, "library '%s': reading it for its digest: %s", lname, strerror(-rc));
        close(fd);
        return MXOP_ELIB_INVALID;
    }
    if (strcmp(actual, expected) != 0) {
        mxop__fmt(msg, msglen,
                  "library '%s' refused: its SHA-256 is %s, the allowlist %s (line %d) expects %s",
                  lname, actual, list, line, expected);
        close(fd);
        return MXOP_EDENIED;
    }
    *fd_out = fd;
    return 0;
}
