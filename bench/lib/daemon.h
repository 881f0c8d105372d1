/*
 * bench/lib/daemon.h - a private mxop-serverd for one benchmark run.
 *
 * The daemon (common/daemon_launch.h) runs in a fresh directory under /tmp
 * (its socket and a plugin directory holding copies of the build's op
 * libraries and the crash fixture), dies with the benchmark, and is stopped
 * and its directory removed at exit, on SIGINT/SIGTERM/SIGHUP too, so a run
 * that fails leaves nothing behind.  Its workers die with it (they set
 * their own death signal on the daemon).
 */
#ifndef MXOP_BENCH_LIB_DAEMON_H
#define MXOP_BENCH_LIB_DAEMON_H

#include <stddef.h>
#include <sys/types.h>

#include "common/daemon_launch.h"

/* pid, dir, sock (the control socket), plugins (the plugin directory). */
typedef mxop__launch_t mxb_daemon_t;

/**
 * Starts build/bin/mxop-serverd (`build` borrowed) and waits until its
 * socket answers.  Only one daemon at a time.  Returns 0, or -1 with the
 * reason in err[errlen] (nothing is left running or on disk then).
 */
int mxb_daemon_start(mxb_daemon_t *d, const char *build, char *err, size_t errlen);

/** Stops the daemon (SIGTERM, then SIGKILL after 10 s) and removes its directory. */
void mxb_daemon_stop(mxb_daemon_t *d);

/**
 * Marks a child process of the benchmark (an echo peer, a client) to be
 * killed with the daemon when the benchmark ends abnormally.
 */
void mxb_daemon_track_child(pid_t pid);
void mxb_daemon_untrack_child(pid_t pid);

/** The plugin directory's copy of a library ("relu.so"), into buf. */
const char *mxb_daemon_plugin(const mxb_daemon_t *d, const char *lib, char *buf, size_t len);

#endif /* MXOP_BENCH_LIB_DAEMON_H */
