/*
 * server/daemon/core/integrity.c - which op libraries may load.
 *
 * The daemon checks the allowlist's syntax at start, so that a typo stops
 * the daemon instead of every load, and reads it again at every load
 * (editing it is how it is reloaded): it opens the library itself
 * (libfd.c), compares the digest of that descriptor with the listed one,
 * and sends the worker the descriptor with the listed digest, which the
 * worker checks again on the sealed copy it loads
 * (server/worker/integrity.c).  The worker never reads the allowlist.
 *
 * A library is only as trustworthy as the directory it sits in: one that
 * someone other than its owner may write can be replaced or changed in
 * place between two loads.  The daemon says so at start, and refuses to
 * start with --strict-plugin-dir on.
 */
#include "server/daemon/core/integrity.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/allowlist.h"
#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"

static char allowlist_path[PATH_MAX];
static bool strict_dir;

const char *mxop__integrity_allowlist(void)
{
    return allowlist_path;
}

int mxop__integrity_option(const char *opt, const char *val, char *err, size_t errlen)
{
    if (strcmp(opt, "--strict-plugin-dir") == 0) {
        if (strcmp(val, "on") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "1") == 0)
            strict_dir = true;
        else if (strcmp(val, "off") == 0 || strcmp(val, "no") == 0 || strcmp(val, "0") == 0)
            strict_dir = false;
        else {
            mxop__fmt(err, errlen, "--strict-plugin-dir must be on or off, not '%s'", val);
            return MXOP_EINVAL;
        }
        return 0;
    }
    if (strcmp(opt, "--allowlist") != 0)
        return 1;
    if (allowlist_path[0] != '\0') {
        mxop__fmt(err, errlen, "--allowlist given twice");
        return MXOP_EINVAL;
    }
    char real[PATH_MAX];
    if (realpath(val, real) == NULL) {
        mxop__fmt(err, errlen, "allowlist '%s': %s", val, strerror(errno));
        return MXOP_EINVAL;
    }
    char *text = NULL;
    char why[256];
    char digest[65];
    int line;
    if (mxop__allowlist_read(real, &text, why, sizeof(why)) != 0 ||
        mxop__allowlist_find(text, NULL, digest, &line, NULL, why, sizeof(why)) < 0) {
        free(text);
        mxop__fmt(err, errlen, "%s: %s", real, why);
        return MXOP_EINVAL;
    }
    free(text);
    mxop__fmt(allowlist_path, sizeof(allowlist_path), "%s", real);
    return 0;
}

/* 1 when `path` is writable by group or others (st already filled). */
static int loose(const struct stat *st)
{
    return (st->st_mode & (S_IWGRP | S_IWOTH)) != 0;
}

int mxop__integrity_check_plugin_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    char first[PATH_MAX + 64] = "";
    int n = 0;
    if (stat(dir, &st) == 0 && loose(&st)) {
        mxop__fmt(first, sizeof(first), "the plugin directory %s (mode %03o)", dir,
                  (unsigned)(st.st_mode & 0777));
        n++;
        MXOP__LOGW(0, NULL,
                   "%s is writable by others than its owner: a library in it can be "
                   "replaced",
                   first);
    }
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX + 8];
        mxop__fmt(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || !loose(&st))
            continue;
        if (n++ == 0)
            mxop__fmt(first, sizeof(first), "library %s (mode %03o)", path,
                      (unsigned)(st.st_mode & 0777));
        MXOP__LOGW(0, NULL, "library %s (mode %03o) is writable by others than its owner", path,
                   (unsigned)(st.st_mode & 0777));
    }
    if (d != NULL)
        closedir(d);
    if (n > 0 && strict_dir) {
        mxop__fmt(err, errlen,
                  "%s is writable by others than its owner (and %d more); refused with "
                  "--strict-plugin-dir on",
                  first, n - 1);
        return MXOP_EDENIED;
    }
    return 0;
}

int mxop__integrity_reload_allowlist(const char *val, char *err, size_t errlen)
{
    char old[PATH_MAX];
    mxop__fmt(old, sizeof(old), "%s", allowlist_path);
    allowlist_path[0] = '\0';
    if (val == NULL)
        return 0;
    int rc = mxop__integrity_option("--allowlist", val, err, errlen);
    if (rc != 0)
        mxop__fmt(allowlist_path, sizeof(allowlist_path), "%s", old);
    return rc;
}

int mxop__integrity_lookup(const char *plugin_dir, const char *resolved, const char *lname,
                           char expected[65], char *where, size_t wherelen, int *trusted, char *err,
                           size_t errlen)
{
    expected[0] = '\0';
    where[0] = '\0';
    *trusted = 0;
    if (allowlist_path[0] == '\0')
        return 0;
    /* The library's name in the allowlist: its path below the plugin directory. */
    const char *name = resolved;
    size_t n = strlen(plugin_dir);
    while (n > 1 && plugin_dir[n - 1] == '/')
        n--;
    if (strncmp(resolved, plugin_dir, n) == 0 && resolved[n] == '/')
        name = resolved + n + 1;
    char *text = NULL;
    char why[256];
    int line = 0;
    int rc = mxop__allowlist_read(allowlist_path, &text, why, sizeof(why));
    if (rc == 0)
        rc = mxop__allowlist_find(text, name, expected, &line, trusted, why, sizeof(why));
    free(text);
    if (rc < 0) {
        mxop__fmt(err, errlen, "library '%s' refused: %s: %s", lname, allowlist_path, why);
        return MXOP_EDENIED;
    }
    if (rc == 0) {
        mxop__fmt(err, errlen, "library '%s' refused: '%s' is not in the allowlist %s", lname, name,
                  allowlist_path);
        return MXOP_EDENIED;
    }
    mxop__fmt(where, wherelen, "%s (line %d)", allowlist_path, line);
    return 1;
}
