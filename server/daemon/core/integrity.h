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

/**
 * SIGHUP (config.c, main.c): replaces the allowlist with `val` (checked as
 * at start), or drops it when val is NULL.  On an error the old one stays.
 * Workers started from now on get the new path; each load reads the file
 * again.  Returns 0 or MXOP_EINVAL with a sentence in err.
 */
int mxop__integrity_reload_allowlist(const char *val, char *err, size_t errlen);

#endif /* MXOP_SERVER_DAEMON_INTEGRITY_H */
