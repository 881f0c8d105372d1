/*
 * server/daemon/core/options.h - mxop-serverd's options (options.c): the usage
 * text, the defaults and the parser shared by the start and SIGHUP.
 */
#ifndef MXOP_SERVER_DAEMON_OPTIONS_H
#define MXOP_SERVER_DAEMON_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/daemon/core/config.h"
#include "server/daemon/core/daemon.h"

/*
 * Parses the merged arguments (the config file's, then the command line's;
 * origin[i] names where argument i came from, "FILE:LINE", or NULL) into
 * cfg, with their defaults.  Returns 0, or an exit status (2 for bad usage,
 * or 0 with *done set after --help).  Errors go to stderr with the usage.
 */
int mxop__options_parse(int argc, char **argv, char *const *origin, mxop__config_t *cfg,
                        int *log_level, bool *done);

/* SIGHUP's parse (an mxop__config_parse_fn): into a fresh cfg, nothing else changed. */
int mxop__options_reparse(const mxop__cfgargs_t *na, mxop__config_t *nc, int *level,
                          const char **allowlist, char *err, size_t errlen);

/* Fixes the default connection cap from the descriptor limit before main raises it. */
void mxop__options_fix_defaults(void);

#endif
