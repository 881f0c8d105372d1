/*
 * common/daemon_launch.h - a private mxop-serverd: one that a single
 * process starts for itself, in a temporary directory of its own, and that
 * ends with that process.
 *
 * The tests (tests/harness.c), the benchmarks (bench/lib/daemon.c), the
 * `mxop` command's `run` and `verify` (tools/mxop/run_session.c) and the
 * MXNet proxy without MXOP_SOCKET (mxnet_proxy/daemon.c) each need
 * a daemon nobody else reaches: a directory (mode 0700) holding its control
 * socket and a plugin directory with copies of the op libraries (copies,
 * not links: the daemon refuses a library whose real path leaves its plugin
 * directory).  It gets no descriptor of its owner's but stdout and stderr
 * (stdin is /dev/null).  It is told to die with its parent (PR_SET_PDEATHSIG,
 * SIGTERM), so a process that dies however it dies leaves nothing running;
 * the daemon ends its workers itself.  A daemon still running when its
 * owner exits is stopped and its directory removed by an atexit handler;
 * mxop__launch_cleanup_now does the same from a fatal-signal handler.
 *
 * The Python package starts its daemons itself (python/mxop/_daemon.py):
 * its child must be a subprocess.Popen that Python reaps, forked from a
 * thread that lives as long as the process (PR_SET_PDEATHSIG fires when the
 * forking thread ends), with its stderr forwarded to Python's logging and a
 * cleaner process for an owner killed without atexit.  It follows the same
 * layout and command line.  Nor is this in libmxop.so's exported API: the
 * names are internal (mxop__), linked from libmxop.a.
 */
#ifndef MXOP_COMMON_DAEMON_LAUNCH_H
#define MXOP_COMMON_DAEMON_LAUNCH_H

#include <stddef.h>
#include <sys/types.h>

/* How to start the daemon.  Every pointer is borrowed for the call only. */
typedef struct mxop__launch_opts {
    const char *serverd; /* the program to run: a path, or a name looked for on $PATH */
    const char *tmp_dir; /* where the private directory is made */
    const char *prefix;  /* the private directory's name: PREFIX-XXXXXX */
    /*
     * NULL-terminated: files, and directories whose every *.so, copied into
     * DIR/plugins (which is made empty when this is NULL).
     */
    const char *const *plugins;
    /* NULL-terminated arguments after --socket DIR/mxop.sock --plugin-dir DIR/plugins; or NULL. */
    const char *const *args;
    /* NULL-terminated NAME=VALUE that the daemon gets unless its environment has NAME; or NULL. */
    const char *const *env;
    /* The daemon's stderr goes to DIR/stderr_name; NULL: it shares this process's. */
    const char *stderr_name;
    /* How long to wait for the socket to accept connections; 0: 5 s. */
    int ready_ms;
} mxop__launch_opts_t;

/*
 * A private daemon.  The caller owns the memory and must keep it in place
 * from mxop__launch_start until mxop__launch_remove (or _close): the exit
 * and signal clean-ups find it by its address.  The fields are for reading.
 */
typedef struct mxop__launch {
    pid_t pid;         /* the daemon; 0 when none runs */
    char dir[256];     /* the private directory; "" when there is none */
    char sock[320];    /* its control socket, DIR/mxop.sock */
    char plugins[320]; /* its plugin directory, DIR/plugins */
    char log[320];     /* the daemon's stderr file; "" when it is inherited */
    pid_t owner;       /* the process that started it: only it stops it at exit */
} mxop__launch_t;

/*
 * Makes the private directory in opts->tmp_dir, copies the plugins, starts
 * opts->serverd there and waits until its socket accepts a connection.
 * Returns 0, or a negative MXOP_E* code with the reason in err[errlen]:
 * MXOP_EINVAL (an option, or a socket path too long for a Unix socket),
 * MXOP_EIO (the directory, a copy, the program, fork), MXOP_EINTERNAL (the
 * daemon exited at start), MXOP_ETIMEOUT (its socket did not answer within
 * opts->ready_ms; it is killed).  On failure nothing is left running or on
 * disk.
 */
int mxop__launch_start(mxop__launch_t *d, const mxop__launch_opts_t *opts, char *err,
                       size_t errlen);

/*
 * Starts the daemon again in the directory of one that ended (the same
 * socket path and plugins; opts' directory and plugin fields are ignored).
 * A killed daemon's socket file is still there: the wait is for one that
 * accepts.  Returns as mxop__launch_start; on failure the directory stays.
 */
int mxop__launch_restart(mxop__launch_t *d, const mxop__launch_opts_t *opts, char *err,
                         size_t errlen);

/*
 * SIGTERM, then waits up to timeout_ms for the daemon to exit and reaps it;
 * SIGKILL after that.  Returns 0 when it exited by itself (its wait status
 * in *status; 0 when it had been reaped elsewhere or none ran), 1 when it
 * had to be killed.  The directory stays.
 */
int mxop__launch_stop(mxop__launch_t *d, int timeout_ms, int *status);

/* Sends `sig` and reaps the daemon (no clean exit expected). */
void mxop__launch_kill(mxop__launch_t *d, int sig);

/* 1 while the daemon runs (a daemon that exited is reaped here). */
int mxop__launch_alive(const mxop__launch_t *d);

/* Removes the private directory and everything in it; the daemon must have ended. */
void mxop__launch_remove(mxop__launch_t *d);

/* mxop__launch_stop, then mxop__launch_remove; returns what the stop returned. */
int mxop__launch_close(mxop__launch_t *d, int timeout_ms, int *status);

/*
 * For a fatal-signal handler: ends every private daemon this process
 * started (SIGTERM, waited for) and removes their directories.  Only
 * async-signal-safe calls.
 */
void mxop__launch_cleanup_now(void);

/*
 * Installs handlers for SIGINT, SIGTERM and SIGHUP that run
 * mxop__launch_cleanup_now, then die by the same signal: an interrupted
 * command leaves nothing behind.  For programs with no handlers of their own.
 */
void mxop__launch_cleanup_on_signals(void);

#endif /* MXOP_COMMON_DAEMON_LAUNCH_H */
