/*
 * tests/harness.h - starting and stopping a real mxop-serverd for a test.
 *
 * Every integration test runs the real daemon and worker: a private daemon
 * (common/daemon_launch.h) in a directory of its own, under $TMPDIR when it
 * is short enough, whose plugin directory holds copies of the example and
 * fixture plugins.  It dies with the test process, and one a test never
 * stopped (an early end, a failed assertion) is stopped at exit, so a test
 * leaves nothing running or on disk.
 */
#ifndef MXOP_TESTS_HARNESS_H
#define MXOP_TESTS_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "common/daemon_launch.h"
#include "mxop/client.h"

/* A private daemon (common/daemon_launch.h): pid, dir, sock (control socket), plugins. */
typedef mxop__launch_t mxt_daemon_t;

/** The build directory (MXOP_BUILD_DIR or the one the tests were built in). */
const char *mxt_build_dir(void);
/*
 * Runs mxop-serverd in the foreground with --socket DIR/s.sock --plugin-dir
 * PLUGINS and `extra` (NULL-terminated), for a start that must fail; returns
 * its exit status, and its stderr in err[errlen].
 */
/*
 * `calls` relu calls of 256 f32 on `c` (relu.so loaded), with values that
 * differ per caller `who` and per call, each output checked; NULL, or the
 * first failure written into why[len].  Asserts nothing: usable in forked
 * children and threads.
 */
const char *mxt_relu_calls(mxop_client_t *c, unsigned who, int calls, char *why, size_t len);
/*
 * A client calling relu on and on from a thread of its own (mxt_relu_caller
 * is the thread's function): rounds of mxt_relu_calls(c, who, calls) until
 * `stop` is set or a round fails (its reason in why, rounds counting the
 * good ones).
 */
typedef struct {
    mxop_client_t *c;
    unsigned who;
    int calls;
    volatile int stop;
    volatile int rounds;
    char why[512];
} mxt_relu_caller_t;
void *mxt_relu_caller(void *arg);
int mxt_daemon_exit_status(const char *dir, const char *plugins, const char *const *extra,
                           char *err, size_t errlen);

/** Starts a daemon; extra_args is NULL or a NULL-terminated list of further arguments. */
void mxt_daemon_start(mxt_daemon_t *d, const char *const *extra_args);

/** Starts a daemon again in the directory of one that was killed (same socket, same plugins). */
void mxt_daemon_restart(mxt_daemon_t *d, const char *const *extra_args);

/** SIGTERM, wait (asserting a clean exit 0 and that the socket is gone), remove the directory. */
void mxt_daemon_stop(mxt_daemon_t *d);

/** Kills the daemon with `sig` and reaps it (no cleanliness asserted). */
void mxt_daemon_kill(mxt_daemon_t *d, int sig);

/** 1 if the daemon process still runs. */
int mxt_daemon_alive(const mxt_daemon_t *d);

/** Connects a client to the daemon, asserting success. */
mxop_client_t *mxt_connect(const mxt_daemon_t *d);

/** Connects and loads each library of the NULL-terminated list, asserting success. */
mxop_client_t *mxt_connect_with(const mxt_daemon_t *d, const char *const *libs);

/** Finds an op, asserting success. */
const mxop_op_t *mxt_op(mxop_client_t *c, const char *name);

/** Number of open fds of a process, and how many of them are memfds. */
int mxt_fd_count(pid_t pid);
int mxt_memfd_count(pid_t pid);

/** The pids of the daemon's live children (workers), up to max; returns the count. */
int mxt_children(pid_t pid, pid_t *out, int max);

/** Number of live processes in session `sid` (a worker and what its ops started). */
int mxt_session_procs(pid_t sid);

/** The pid of the client's current worker (asks the daemon). */
pid_t mxt_worker_pid(mxop_client_t *c);

/**
 * The value after "key" in /proc/PID/FILE (e.g. "status", "Seccomp"), trimmed,
 * into out.  Returns 0, or -1 if the file or the key is not there.
 */
int mxt_proc_field(pid_t pid, const char *file, const char *key, char *out, size_t outlen);

/** Sleeps. */
void mxt_sleep_ms(int ms);

/** Waits until fn(arg) is true or timeout_ms passes; returns the last value. */
int mxt_wait_until(int (*fn)(void *), void *arg, int timeout_ms);

/* The daemon's descriptors (and memfds among them) with no worker alive. */
typedef struct mxt_baseline {
    pid_t pid;
    int fds;
    int memfds;
} mxt_baseline_t;

/* Waits (5 s) for the daemon's earlier workers to be gone, then counts. */
mxt_baseline_t mxt_baseline_take(const mxt_daemon_t *d);

/* Asserts that within 5 s the daemon has no child and its counts are back to `b`. */
void mxt_baseline_expect(const mxt_baseline_t *b);

/* Another session, untouched by whatever a test did: relu on 256 values, checked. */
void mxt_other_session_correct(const mxt_daemon_t *d);

/** Allocates an f64/f32 array and fills it with a deterministic pattern from `seed`. */
void mxt_array(mxop_client_t *c, int32_t dtype, int ndim, const int64_t *shape, unsigned seed,
               mxop_array_t *out);

/** Element i of an f32 or f64 array, as double; and setter. */
double mxt_get(const mxop_array_t *a, size_t i);
void mxt_set(mxop_array_t *a, size_t i, double v);
size_t mxt_elems(const mxop_array_t *a);

/** Asserts two arrays match element-wise within rtol/atol. */
void mxt_assert_close(const mxop_array_t *got, const double *want, size_t n, double rtol,
                      double atol);

#endif /* MXOP_TESTS_HARNESS_H */
