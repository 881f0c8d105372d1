/*
 * server/daemon/core/plugin_path.c - resolving a client's library path.
 *
 * A client names a library relative to the plugin directory.  The name is
 * never trusted: it is checked lexically (no absolute paths, no ".." that
 * climbs out, no NUL bytes), then resolved with realpath() so that symlinks
 * are followed, and the result must still lie inside the directory and be a
 * regular file.  Only that resolved path reaches the worker.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"

/* True if walking the components of `rel` ever climbs above its start. */
static bool escapes_lexically(const char *rel)
{
    long depth = 0;
    const char *p = rel;
    while (*p != '\0') {
        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        const char *q = p;
        while (*q != '\0' && *q != '/')
            q++;
        size_t n = (size_t)(q - p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0)
                return true;
        } else if (!(n == 1 && p[0] == '.')) {
            depth++;
        }
        p = q;
    }
    return false;
}

int mxop__plugin_resolve(const char *dir_real, const char *name, size_t name_len, char *out,
                         size_t outlen, char *err, size_t errlen)
{
    if (name_len == 0 || name == NULL || name[0] == '\0') {
        mxop__fmt(err, errlen, "library path is empty");
        return MXOP_EINVAL;
    }
    if (memchr(name, '\0', name_len) != NULL) {
        mxop__fmt(err, errlen, "library path '%s' contains a NUL byte", name);
        return MXOP_EINVAL;
    }
    if (name[0] == '/') {
        mxop__fmt(err, errlen,
                  "library path '%s' is absolute; give a path relative to the plugin directory %s",
                  name, dir_real);
        return MXOP_ELIB_OUTSIDE;
    }
    if (escapes_lexically(name)) {
        mxop__fmt(err, errlen, "library path '%s' climbs out of the plugin directory %s", name,
                  dir_real);
        return MXOP_ELIB_OUTSIDE;
    }

    char joined[PATH_MAX];
    size_t dlen = strlen(dir_real);
    if (dlen + 1 + name_len + 1 > sizeof(joined)) {
        mxop__fmt(err, errlen, "library path '%.64s...' is too long", name);
        return MXOP_EINVAL;
    }
    memcpy(joined, dir_real, dlen);
    joined[dlen] = '/';
    memcpy(joined + dlen + 1, name, name_len + 1);

    char resolved[PATH_MAX];
    if (realpath(joined, resolved) == NULL) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
            mxop__fmt(err, errlen, "library '%s' not found in plugin directory %s", name, dir_real);
            return MXOP_ELIB_NOT_FOUND;
        }
        mxop__fmt(err, errlen, "library '%s' cannot be resolved in plugin directory %s: %s", name,
                  dir_real, strerror(e));
        return MXOP_ELIB_NOT_FOUND;
    }

    /* The directory itself (".", "sub/..") is not a library either. */
    if (strcmp(resolved, dir_real) == 0) {
        mxop__fmt(err, errlen, "library '%s' is the plugin directory %s itself, not a file", name,
                  dir_real);
        return MXOP_ELIB_INVALID;
    }
    /* "/" as plugin directory would otherwise need "//" as prefix. */
    bool root = dlen == 1 && dir_real[0] == '/';
    if (!root && (strncmp(resolved, dir_real, dlen) != 0 || resolved[dlen] != '/')) {
        mxop__fmt(err, errlen, "library '%s' resolves to %s, outside the plugin directory %s", name,
                  resolved, dir_real);
        return MXOP_ELIB_OUTSIDE;
    }

    struct stat st;
    if (stat(resolved, &st) != 0) {
        mxop__fmt(err, errlen, "library '%s' (%s) cannot be inspected: %s", name, resolved,
                  strerror(errno));
        return MXOP_ELIB_NOT_FOUND;
    }
    if (!S_ISREG(st.st_mode)) {
        mxop__fmt(err, errlen, "library '%s' (%s) is not a regular file", name, resolved);
        return MXOP_ELIB_INVALID;
    }
    size_t rlen = strlen(resolved);
    if (rlen + 1 > outlen) {
        mxop__fmt(err, errlen, "library '%s' resolves to a path too long to handle", name);
        return MXOP_EINVAL;
    }
    memcpy(out, resolved, rlen + 1);
    return 0;
}
