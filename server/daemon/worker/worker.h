/*
 * server/daemon/worker/worker.h - one worker process as a handle (worker.c).
 *
 * A worker is one generation of a session's worker (live or spare).  Its
 * state and every field below change only in worker.c, through its one
 * transition function; the rest of the daemon reads them through this
 * header and acts through the calls at the bottom.  The table of its
 * states is at the top of worker.c and in docs/architecture.md.
 */
#ifndef MXOP_SERVER_DAEMON_WORKER_H
#define MXOP_SERVER_DAEMON_WORKER_H

#include "server/daemon/core/daemon.h"

typedef enum mxop__worker_state {
    MXOP__WORKER_SPAWNING, /* cloned, not exec'd yet: killed if not exec'd by its start deadline */
    MXOP__WORKER_SERVING,  /* exec'd: serves requests on its supervisor channel */
    MXOP__WORKER_RETIRING, /* asked to exit between calls (a hot reload); serves until it does */
    MXOP__WORKER_KILLING,  /* the daemon killed it (its reason in kill) or let it go; not reaped */
    MXOP__WORKER_EXITED    /* reaped: its handles are closing, then it is freed */
} mxop__worker_state_t;

/*
 * Why the daemon killed a worker: code 0 (not killed, or killed with no
 * reason to report: detached), MXOP_ETIMEOUT (a deadline the daemon
 * enforced: for call `call_id` of `op`, 0 for a supervisor request), or
 * MXOP_EWORKER_CRASHED (a stop, a broken channel, a failed start, ...).
 * A timeout replaces any other reason; otherwise the first one stays.
 */
typedef struct mxop__kill_reason {
    int code;
    uint64_t call_id;
    char op[MXOP__STATUS_OP_MAX];
    char msg[MXOP__MSG_MAX];
} mxop__kill_reason_t;

struct mxop__worker {
    mxop__list_t link; /* d->workers */
    mxop__daemon_t *d;
    mxop__worker_state_t state;
    void *owner;                   /* the session, or NULL once detached or reaped */
    const mxop__worker_cbs_t *cbs; /* borrowed, static */
    uint64_t session_id;           /* kept for the log after detaching */
    uint32_t generation;
    pid_t pid;
    uid_t uid;                          /* the uid it runs as (workeruid.c) */
    mxop__spawn_t proc;                 /* clone3 + pidfd (spawn.c) */
    struct mxop__worker_output *output; /* its stdout/stderr reader, held until the exit */
    mxop__conn_t sup;
    bool sup_open;    /* the supervisor channel: open until broken, closed, or the exit */
    int open_handles; /* proc and sup; freed when both are closed */
    bool started;     /* exec'd (spawn.c's start callback); stays true once set */
    int64_t start_deadline_ns;
    mxop__status_page_t *page;
    mxop__kill_reason_t kill;
    int client_fd; /* its end of the data channel for the client, until taken; else -1 */
    /* The supervisor requests sent to it and not yet answered, oldest first. */
    mxop__pending_t *q_head;
    mxop__pending_t *q_tail;
};

/*
 * Spawns a worker for session `session_id` with `generation`, reporting to
 * `owner` through `cbs` (borrowed, must outlive the worker).  On success
 * *out is the worker (SPAWNING), holding the client's end of its data
 * channel (mxop__worker_take_client_fd).  Returns 0, MXOP_EINTERNAL or
 * MXOP_ENOMEM with a sentence in err; then no callback will ever run.
 */
int mxop__worker_spawn(mxop__daemon_t *d, uint64_t session_id, uint32_t generation,
                       const mxop__worker_cbs_t *cbs, void *owner, mxop__worker_t **out, char *err,
                       size_t errlen);
/* The client's end of the worker's data channel (taken: the caller closes it), or -1. */
int mxop__worker_take_client_fd(mxop__worker_t *w);
/*
 * Sends a SupRequest to the worker, with fd (borrowed) when fd >= 0; on
 * success `p` (may be NULL: no answer awaited) joins its queue.  Returns
 * 0, MXOP_EWORKER_CRASHED (no channel), MXOP_EFRAME_TOO_LARGE, MXOP_ENOMEM.
 */
int mxop__worker_send(mxop__worker_t *w, const Mxop__SupRequest *req, int fd, mxop__pending_t *p);
/* Sends the Retire request `req`: SERVING becomes RETIRING.  Returns as mxop__worker_send. */
int mxop__worker_retire(mxop__worker_t *w, const Mxop__SupRequest *req);
/* The oldest request it has not answered (the queue, through ->next), or NULL (also for NULL). */
const mxop__pending_t *mxop__worker_queue(const mxop__worker_t *w);
/* Removes and returns the request `sup_id` from its queue, or NULL (also for NULL). */
mxop__pending_t *mxop__worker_queue_take(mxop__worker_t *w, uint64_t sup_id);
/* Takes its whole queue (a NULL-terminated list through ->next); NULL for NULL. */
mxop__pending_t *mxop__worker_queue_take_all(mxop__worker_t *w);
/*
 * Detaches the worker from its owner and kills its process group (KILLING,
 * with no reason: nobody hears of its death).  Returns its queue, the
 * caller's to answer or free.
 */
mxop__pending_t *mxop__worker_detach_kill(mxop__worker_t *w);
/* Kills the worker's process group (KILLING); `why` goes into the report of its death. */
void mxop__worker_kill(mxop__worker_t *w, const char *why);
/*
 * Kills the worker for overrunning a deadline: its death reads
 * MXOP_ETIMEOUT with `why`, for call `call_id` (0: a supervisor request)
 * of op `op` (may be NULL).  Once per worker.
 */
void mxop__worker_kill_timeout(mxop__worker_t *w, uint64_t call_id, const char *op,
                               const char *why);

/* True while it may be sent requests: not reaped and its channel open. */
bool mxop__worker_reachable(const mxop__worker_t *w);
/* True until it is reaped. */
bool mxop__worker_alive(const mxop__worker_t *w);
/* True once the daemon killed it or let it go (KILLING or EXITED). */
bool mxop__worker_dying(const mxop__worker_t *w);

/* worker_note.c: appends the backtrace a worker's fault handler left in its page to `msg`. */
void mxop__note_add_backtrace(const mxop__status_page_t *page, char *msg, size_t msglen);
/* The inputs of the call the worker began last, its account ("[2,3] f32, [4] f32"), or "". */
void mxop__note_inputs(const mxop__status_page_t *page, char *out, size_t outlen);

/* worker_proc.c: true if the worker's process is stopped (SIGSTOP, traced): it cannot serve. */
bool mxop__worker_is_stopped(const mxop__worker_t *w);

#endif /* MXOP_SERVER_DAEMON_WORKER_H */
