/*
 * server/daemon/core/integrity.h - which op libraries may load: the allowlist
 * and the plugin directory's permissions (integrity.c).
 */
#ifndef MXOP_SERVER_DAEMON_INTEGRITY_H
#define MXOP_SERVER_DAEMON_INTEGRITY_H

#include <stddef.h>

/**
 * Takes `--allowlist FILE` (checked now: readable, every line well-formed)
 * or `--strict-plugin-dir on|off`.  Returns 0, 1 when `opt` is neither, or
 * MXOP_EINVAL with a sentence in err.
 */
int mxop__integrity_option(const char *opt, const char *val, char *err, size_t errlen);

/**
 * Looks at the plugin directory and the files in it: one writable by
 * anyone but its owner (group or other write permission) is logged as a
 * warning, or, with --strict-plugin-dir on, refused.  Returns 0 or
 * MXOP_EDENIED with a sentence naming the first such path.
 */
int mxop__integrity_check_plugin_dir(const char *dir, char *err, size_t errlen);

/** The allowlist's absolute path for the worker's --allowlist, or "" when none. */
const char *mxop__integrity_allowlist(void);

/**
 * SIGHUP (config.c, main.c): replaces the allowlist with `val` (checked as
 * at start), or drops it when val is NULL.  On an error the old one stays.
 * Workers started from now on get the new path; each load reads the file
 * again.  Returns 0 or MXOP_EINVAL with a sentence in err.
 */
int mxop__integrity_reload_allowlist(const char *val, char *err, size_t errlen);

/**
 * Looks the library at `resolved` (inside `plugin_dir`) up in the
 * allowlist, read again now (edits apply at the next load).  Returns 0
 * when there is no allowlist; 1 when listed, with its digest in
 * expected[65], "FILE (line N)" in where and the line's `trusted` field in
 * *trusted; or MXOP_EDENIED (not listed, or the file unreadable or
 * malformed) with a sentence naming `lname` in err.
 */
int mxop__integrity_lookup(const char *plugin_dir, const char *resolved, const char *lname,
                           char expected[65], char *where, size_t wherelen, int *trusted, char *err,
                           size_t errlen);

#endif /* MXOP_SERVER_DAEMON_INTEGRITY_H */
