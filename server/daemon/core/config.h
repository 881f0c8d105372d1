/*
 * server/daemon/core/config.h - the daemon's config file (--config FILE).
 *
 * The file holds the same options as the command line, one a line:
 *
 *     # a comment (a line whose first non-blank character is '#')
 *     plugin-dir = /usr/local/lib/mxop/plugins
 *     allow-uid = 1000
 *     allow-uid = alice
 *
 * A key is the long option's name without "--"; a repeatable option is
 * repeated.  Each line becomes the argument "--key=value", placed before
 * the command line's own arguments, so that the one parser (options.c)
 * checks both; an option the command line gives replaces every line of the
 * file with that key.  Each argument remembers where it came from, so that
 * an error names the file, the line and the key.
 */
#ifndef MXOP_SERVER_DAEMON_CONFIG_H
#define MXOP_SERVER_DAEMON_CONFIG_H

#include <stddef.h>

/* The merged arguments: argv[0], the file's lines, then the command line without --config. */
typedef struct mxop__cfgargs {
    int argc;
    char **argv;   /* malloc'd strings */
    char **origin; /* per argument: "FILE:LINE" (malloc'd) or NULL for the command line */
    char *path;    /* the config file (malloc'd), or NULL when none was given */
} mxop__cfgargs_t;

/*
 * Finds --config FILE (or --config=FILE) in argv, reads the file and merges
 * it with the rest of argv into *out.  Without --config, out holds argv as
 * it is.  Returns 0, or MXOP_EINVAL / MXOP_EIO / MXOP_ENOMEM with a
 * sentence in err naming the file and line.
 */
int mxop__config_merge(int argc, char **argv, mxop__cfgargs_t *out, char *err, size_t errlen);

/* Frees what mxop__config_merge allocated. */
void mxop__config_free(mxop__cfgargs_t *a);

/*
 * 1 when the option `key` ("--name") has different values in a and b
 * (all its values, in order, compared as text), else 0.
 */
int mxop__config_differs(const mxop__cfgargs_t *a, const mxop__cfgargs_t *b, const char *key);

/*
 * Calls fn(key, arg) once for every distinct option key ("--name") either
 * set holds, in order of first appearance (a's first).
 */
void mxop__config_each_key(const mxop__cfgargs_t *a, const mxop__cfgargs_t *b,
                           void (*fn)(const char *key, void *arg), void *arg);

struct mxop__config;
struct mxop__daemon;

/*
 * Parses merged arguments into a fresh configuration without touching
 * anything else (main.c): returns 0, or non-zero with a sentence in err
 * naming the file, line and key.  *allowlist is the --allowlist value, or
 * NULL.
 */
typedef int (*mxop__config_parse_fn)(const mxop__cfgargs_t *a, struct mxop__config *cfg,
                                     int *log_level, const char **allowlist, char *err,
                                     size_t errlen);

/*
 * SIGHUP: reads the config file again (merged with the command line argv
 * the daemon was started with), and applies all of it that may change at
 * run time - the admission limits and session quotas, the call and load
 * timeouts, the allowed uids, the allowlist, the log level, the drain
 * timeout - or, on any error, none of it (the error is logged).  A change
 * of any other option, from what the daemon started with (`started`), is
 * logged as ignored.
 */
void mxop__config_reload(struct mxop__daemon *d, const mxop__cfgargs_t *started, int argc,
                         char **argv, mxop__config_parse_fn parse);

#endif /* MXOP_SERVER_DAEMON_CONFIG_H */
