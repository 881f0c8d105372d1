/*
 * server/daemon/worker/worker_output.h - what a worker writes to stdout and stderr,
 * read by the daemon and logged safely (worker_output.c).
 */
#ifndef MXOP_SERVER_DAEMON_WORKER_OUTPUT_H
#define MXOP_SERVER_DAEMON_WORKER_OUTPUT_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

typedef struct mxop__worker_output mxop__worker_output_t;

/**
 * Makes the pipes for a worker's stdout and stderr and starts reading
 * them on `loop`.  fds[0], fds[1] get the write ends, for the worker's fds
 * 1 and 2; the caller closes them once the worker is started (or failed
 * to start).  The reader frees itself when every writer is gone.
 * Returns 0 or MXOP_EINTERNAL (the caller then keeps the daemon's own
 * stdout and stderr for the worker).
 */
int mxop__worker_output_start(uv_loop_t *loop, uint64_t session, int fds[2],
                              mxop__worker_output_t **out);

/** The worker's pid, for the prefix of its lines (0 until it is known). */
void mxop__worker_output_set_pid(mxop__worker_output_t *o, pid_t pid);

/*
 * Reads what the worker's pipes hold now and logs it, the partial last
 * lines too, so that a worker's last words come before its death in the
 * log; `last_err` gets its last stderr line, escaped ("" if none).  Called
 * when the worker's exit is seen.  `o` may be NULL.
 */
void mxop__worker_output_drain(mxop__worker_output_t *o, char *last_err, size_t len);

/*
 * The worker lets go of its reader (after the drain): the reader frees
 * itself once every writer has closed the pipes.  `o` may be NULL.
 */
void mxop__worker_output_release(mxop__worker_output_t *o);

/* Lines a worker may log a second (each stream), and the burst it may save up. */
#define MXOP__WORKER_OUTPUT_LINES_PER_S 20
#define MXOP__WORKER_OUTPUT_BURST 100
/* A longer line is cut there, and the rest counted as dropped. */
#define MXOP__WORKER_OUTPUT_LINE_MAX 512
/* How much of the last stderr line an exit report may carry (escaped, with its NUL). */
#define MXOP__WORKER_OUTPUT_LAST_MAX 160

#endif /* MXOP_SERVER_DAEMON_WORKER_OUTPUT_H */
