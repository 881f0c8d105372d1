/*
 * server/daemon/worker/spawn.h - starting a worker with clone3, optionally in a
 * pid namespace of its own, and watching its exit through a pidfd.
 */
#ifndef MXOP_SERVER_DAEMON_SPAWN_H
#define MXOP_SERVER_DAEMON_SPAWN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "shm/status_page.h"

/* pid 1 of a namespace says which signal ended it by its exit status (shm/status_page.h). */
#define MXOP__SPAWN_EXIT_SIGNAL MXOP__W_EXIT_SIGNAL

/* The most descriptors a child is given (fds 0..MXOP__SPAWN_FDS_MAX-1). */
#define MXOP__SPAWN_FDS_MAX 64

typedef struct mxop__spawn mxop__spawn_t;

/* Same meaning as uv_spawn's exit_cb: exit_status when it exited, term_signal when killed. */
typedef void (*mxop__spawn_exit_cb)(mxop__spawn_t *s, int64_t exit_status, int term_signal);
/* The start's outcome: 0 once the child has exec'd, or the negative errno of a failed exec. */
typedef void (*mxop__spawn_start_cb)(mxop__spawn_t *s, int status);

struct mxop__spawn {
    uv_poll_t poll;      /* on the pidfd; the handle whose address the close callback gets */
    uv_poll_t exec_poll; /* on exec_err, from the release until the exec's outcome is known */
    pid_t pid;           /* the host's pid of the child */
    int pidfd;
    int gate;     /* write end of the pipe the child waits on before exec; -1 once released */
    int exec_err; /* read end of the pipe the child reports a failed exec on; -1 once heard */
    bool new_pid_ns;
    bool exec_known; /* start_cb has run (or never will: closed) */
    int handles;     /* initialised handles whose close callback has not run yet */
    void *data;
    mxop__spawn_exit_cb exit_cb;
    mxop__spawn_start_cb start_cb;
    uv_close_cb close_cb;
};

/*
 * Starts `file` with `args` in a new session (setsid), with fds 0..nfds-1
 * of the child being fds[0..nfds-1] (-1: /dev/null; 3 <= nfds <=
 * MXOP__SPAWN_FDS_MAX), every other descriptor
 * close-on-exec, and in a new pid namespace when `new_pid_ns`.  The child
 * waits before exec until mxop__spawn_release().  0 or a negative errno;
 * on success the handles are initialised and must be closed with
 * mxop__spawn_close().  On failure the child is gone, but s->handles
 * handles may still be closing: then `s` must live until they are (set
 * s->close_cb to hear when; it gets &s->poll).
 */
int mxop__spawn_start(uv_loop_t *loop, mxop__spawn_t *s, const char *file, char *const args[],
                      const int *fds, int nfds, bool new_pid_ns, mxop__spawn_exit_cb cb);

/*
 * Lets the child exec (call it after putting the pid into its cgroup) and
 * returns at once: the loop never waits for a child, which may be stopped
 * (SIGSTOP, a tracer) or slow between clone and exec.  `cb` reports the
 * outcome from the loop: 0 once the exec has happened, or the negative
 * errno of a failed exec (the child then exits 127 and the exit callback
 * follows, always after `cb`).  A child that never gets there is the
 * caller's to kill (a start-up deadline); its exit callback then runs
 * after `cb` with -EINTR.  Returns 0, or a negative errno when the child
 * cannot be released (then `cb` never runs; the exit callback follows).
 */
int mxop__spawn_release(mxop__spawn_t *s, mxop__spawn_start_cb cb);

/*
 * Closes the handles (and the pidfd and pipes); `cb` gets &s->poll once
 * every handle is closed.  No callback runs after this.
 */
void mxop__spawn_close(mxop__spawn_t *s, uv_close_cb cb);

#endif
