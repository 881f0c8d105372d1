/*
 * server/daemon/core/layers.h - which confinement layers workers get on this
 * machine, said once at start; strict refuses to run without its
 * filesystem view unless told to fall back (layers.c).
 */
#ifndef MXOP_SERVER_DAEMON_LAYERS_H
#define MXOP_SERVER_DAEMON_LAYERS_H

#include <stdbool.h>
#include <stddef.h>

/**
 * Takes `--sandbox-fallback on|off` and `--sandbox-profile auto|cpu|gpu`.  Returns 0, 1 when `opt`
 * is another option, or MXOP_EINVAL with a sentence in err.
 */
int mxop__layers_option(const char *opt, const char *val, char *err, size_t errlen);

/**
 * Logs the layers workers will get under `sandbox` (seccomp, Landlock ABI
 * and what of it, cgroup, uid).  Under strict without Landlock, returns
 * MXOP_EDENIED with a sentence in err unless --sandbox-fallback on.
 */
int mxop__layers_check(const char *sandbox, const char *workers_as, char *err, size_t errlen);

/** The layers as mxop__layers_check logged them ("not checked yet" before). */
const char *mxop__layers_describe(void);

#endif /* MXOP_SERVER_DAEMON_LAYERS_H */
