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

/**
 * The namespace profile strict workers get (`--ns-profile` of the worker,
 * server/worker/namespaces.h): "none", "cpu" or "gpu", as decided by
 * mxop__layers_check ("none" before it and under basic).
 */
const char *mxop__layers_ns_profile(void);

/*
 * Whether workers start in a pid namespace of their own (spawn.c): strict
 * as root with the cpu profile; never basic (it keeps the host's /proc),
 * never the gpu profile (legacy CUDA IPC handles do not open across pid
 * namespaces) and never without root (CLONE_NEWPID needs CAP_SYS_ADMIN in
 * the daemon's user namespace).  False before mxop__layers_check.
 */
bool mxop__layers_pid_ns(void);

/** The layers as mxop__layers_check logged them ("not checked yet" before). */
const char *mxop__layers_describe(void);

#endif /* MXOP_SERVER_DAEMON_LAYERS_H */
