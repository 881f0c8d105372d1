/*
 * server/worker/namespaces.h - the worker's own namespaces and minimal
 * root filesystem (namespaces.c; docs/security.md, "Namespaces").
 *
 * The daemon chooses a profile and passes it on the worker's command line
 * (`--ns-profile none|cpu|gpu`, sandbox.c takes it):
 *
 *   none  no namespaces of the worker's own (basic keeps new ipc and uts
 *         namespaces as root, and the network namespace that --uid always
 *         gave); strict then relies on Landlock alone (the daemon's
 *         --sandbox-fallback decided that this is acceptable).
 *   cpu   new mount, ipc, network and uts namespaces (and a user namespace
 *         when the worker does not start as root), a minimal root
 *         filesystem on a tmpfs (namespaces.c lists what is in it) and a
 *         private, size-limited /tmp.
 *   gpu   cpu, plus the CUDA driver's device nodes (/dev/nvidia*) and
 *         driver paths bound in; it keeps the host pid namespace (legacy
 *         CUDA IPC handles do not open across pid namespaces).
 */
#ifndef MXOP_SERVER_WORKER_NAMESPACES_H
#define MXOP_SERVER_WORKER_NAMESPACES_H

#include <stddef.h>

enum mxop__ns_profile {
    MXOP__NS_NONE = 0,
    MXOP__NS_CPU = 1,
    MXOP__NS_GPU = 2,
};

/** Parses a profile name; returns 0 and sets *out, or -1. */
int mxop__ns_profile_parse(const char *name, int *out);

/**
 * Gives the calling (single-threaded, still privileged) worker the
 * namespaces of `profile` and, for cpu and gpu, pivots into the minimal
 * root.  `run_uid`/`run_gid` are the ids the worker will run as (-1: its
 * own); they own the private /tmp.  No library path is bound in: libraries
 * arrive as descriptors (server/daemon/session/libfd.c).  `basic` asks only
 * for the ipc and uts namespaces (root only, best effort).
 * Returns 0, or a negative MXOP_E* code with a sentence in err.
 */
int mxop__ns_apply(int profile, int basic, long run_uid, long run_gid, char *err, size_t errlen);

/**
 * 1 once mxop__ns_apply built the minimal root: /tmp is the worker's own
 * tmpfs, which Landlock (landlock.c) then lets it write.
 */
int mxop__ns_private_tmp(void);

#endif /* MXOP_SERVER_WORKER_NAMESPACES_H */
