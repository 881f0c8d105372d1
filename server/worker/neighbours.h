/*
 * server/worker/neighbours.h - system calls that name a process act on the
 * worker itself only, where it shares the host's pid namespace
 * (neighbours.c has the list and why).
 */
#ifndef MXOP_SERVER_WORKER_NEIGHBOURS_H
#define MXOP_SERVER_WORKER_NEIGHBOURS_H

#include <stddef.h>

/**
 * Unless the calling worker is pid 1 of a pid namespace of its own, loads a
 * seccomp filter (on every thread) refusing with EPERM the calls that
 * change another process's priority, scheduling, CPUs, I/O class, limits
 * or memory placement (not when `own_uid`: no other process has the
 * worker's uid, and the kernel refuses them), and, with `strict`, those
 * that read them, signal it or open it, unless their pid is 0 or the
 * worker's own.  Needs no_new_privs.  Returns 0, or MXOP_EINTERNAL with a
 * sentence in err.
 */
int mxop__neighbours_apply(int strict, int own_uid, char *err, size_t errlen);

#endif /* MXOP_SERVER_WORKER_NEIGHBOURS_H */
