/*
 * server/daemon/worker/worker.h - one worker process as a handle (worker.c).
 *
 * A worker is one generation of a session's worker (live or spare).  Its
 * state and every field below change only in worker.c, through its one
 * transition function; the rest of the daemon reads them through this
 * header and acts through the calls below.  The table of its states is
 * at the top of worker.c and in docs/architecture.md.
 *
 * This is the worker folder's one public header: what core and the
 * session use of its other files (worker_proc.c, cgroup.c, idle_cpu.c,
 * worker_output.c, workeruid.c) is declared here; spawn.h, cgroup.h,
 * procstat.h, worker_output.h and workeruid.h are its own files' alone
 * (spawn.h included here for the handle's type).
 */
#ifndef MXOP_SERVER_DAEMON_WORKER_H
#define MXOP_SERVER_DAEMON_WORKER_H

#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/spawn.h"
#include "shm/status_page.h"
#include "supervisor.pb-c.h"

/*
 * A worker not exec'd this long after its clone (stopped, starved) is
 * killed, and its start counts as failed (worker_proc.c).
 */
#define MXOP__START_TIMEOUT_MS 5000

/* The size of a CUDA IPC handle (cudaIpcMemHandle_t) a device region carries. */
#define MXOP__CUDA_IPC_BYTES 64

/*
 * A library's version (libver.c): the identity of the file the daemon read
 * for a worker and the SHA-256 of what it read, with when.  Declared here
 * because a LOAD on a worker's queue carries the one read for it.
 */
typedef struct mxop__libver {
    bool known; /* false when the file could not be read (the load itself may still work) */
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    char sha256[65];
    int64_t loaded_at_ms; /* CLOCK_REALTIME */
} mxop__libver_t;

enum mxop__pending_kind {
    MXOP__PENDING_LOAD,
    MXOP__PENDING_MAP,
    MXOP__PENDING_UNMAP,
    MXOP__PENDING_PING /* a liveness probe of the idle live worker (deadline.c); answers no one */
};

/* One supervisor request in flight, and what to answer when it completes. */
typedef struct mxop__pending {
    struct mxop__pending *next;
    uint64_t sup_id;
    uint64_t req_id; /* the client request to answer; unused for replays */
    int kind;
    bool replay; /* sent to a respawned worker: log failures, answer no one */
    char *path;  /* LOAD: resolved path (malloc'd) */
    char *name;  /* LOAD: the client's name for it (malloc'd) */
    uint32_t region;
    uint64_t size;
    int fd;    /* MAP of a new region: the region's fd until it is registered; LOAD: the
                  library's (libfd.c); else -1 */
    bool cuda; /* MAP of a device region: the handle below instead of an fd */
    int32_t device;
    uint8_t ipc[MXOP__CUDA_IPC_BYTES];
    mxop__libver_t ver; /* LOAD: the version read for this load (libver.c) */
    /* Memory integrity (memconfine.c): MAP of the client's scratch region. */
    bool scratch;
    /* MAP: the bytes before it the client was still reserving (RegisterRegion.reserved_from). */
    uint64_t reserved_from;
    /*
     * Least privilege (libfd.c): a LOAD's fd above is the library the
     * daemon opened; under an allowlist, the digest listed for it, where
     * (malloc'd, NULL without one), and whether its line says `trusted`.
     */
    char expect_sha256[65];
    char *allowlist_where;
    bool allow_trusted;
    char *open_error; /* a replayed LOAD the daemon could not open: why (malloc'd), else NULL */
} mxop__pending_t;

/*
 * What a worker's death looked like to the daemon: one report, made when
 * the process is reaped (worker.c), handed to its owner by the exit
 * callback, kept by the session (mxop__session_t.death) and sent to the
 * client as the WorkerEvent.  `code` is derived from what the daemon
 * observed (exit status, signal, its own clock); the worker's fault note
 * only refines it where the observation agrees.
 */
typedef struct mxop__worker_exit {
    int code;
    int term_signal;
    int exit_status;    /* -1 when a signal ended it */
    uint64_t call_id;   /* the call in flight when it died, or 0 */
    bool served;        /* it began at least one call */
    bool started;       /* it had exec'd mxop-worker (false: a failed start, no library's fault) */
    bool daemon_killed; /* the daemon killed it (a deadline, a stop, a broken channel, ...) */
    bool retiring;      /* it had been asked to retire (a hot reload) and was not killed */
    char op[MXOP__STATUS_OP_MAX]; /* the op in flight, or "" */
    /* "worker 12 running op 'x' (call 3) was killed by signal 11 (SIGSEGV)" */
    char message[MXOP__MSG_MAX];
    char how[256];                /* "was killed by signal 9 (SIGKILL)" or "exited with status 1" */
    char kill_msg[MXOP__MSG_MAX]; /* why the daemon killed it, or "" */
} mxop__worker_exit_t;

/*
 * How a worker reports to its owner, as libuv reports a process exit
 * through exit_cb: worker.c never reaches into the owner's state.
 * `owner` is the pointer given at spawn; neither callback runs once the
 * worker is detached.
 */
typedef struct mxop__worker_cbs {
    /* A SupReply arrived (valid only during the call). */
    void (*on_reply)(void *owner, mxop__worker_t *w, const Mxop__SupReply *r);
    /* The process was reaped; the worker is detached from then on. */
    void (*on_exit)(void *owner, mxop__worker_t *w, const mxop__worker_exit_t *e);
} mxop__worker_cbs_t;

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

/* ------------------------------------------------------------------------ */
/* worker_proc.c, and worker.c's sweep */

/* True if some live worker is `pid` or shares its session (an op's child). */
bool mxop__is_worker_process(mxop__daemon_t *d, pid_t pid);
/*
 * The workers' own checks at each watchdog tick: one not exec'd in time is
 * killed; about once a second, stopped workers and descendants that
 * escaped a dead worker's group.
 */
void mxop__workers_tick(mxop__daemon_t *d, int64_t now);
/* worker.c: kills and reaps the daemon's children that are not workers (escaped from a dead
 * one). */
void mxop__workers_sweep(mxop__daemon_t *d);

/* ------------------------------------------------------------------------ */
/* cgroup.c (the rest, for the worker's own files: cgroup.h) */

/** One phrase for the start-up log: the cgroup layout workers will get, or why none. */
const char *mxop__cgroup_describe(void);
/* --worker-cgroup auto|off: 0, or MXOP_EINVAL with a sentence in err. */
int mxop__cgroup_option(const char *val, char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* idle_cpu.c */

/* CPU time an idle worker may use, all its threads together, before it is replaced. */
#define MXOP__IDLE_CPU_MAX_MS 2000

/* How often a worker's CPU time is read (the watchdog ticks far more often). */
#define MXOP__IDLE_CPU_CHECK_MS 250

/**
 * Called by the watchdog for every live worker at every tick.  Returns 1
 * (with the reason in msg) when worker `pid` has used more than
 * MXOP__IDLE_CPU_MAX_MS of CPU since it was last seen running a call
 * (`busy`, or `call_id` changed since the last look), else 0.
 */
int mxop__idle_cpu_over(pid_t pid, bool busy, uint64_t call_id, char *msg, size_t msglen);

/* ------------------------------------------------------------------------ */
/* worker_output.c (the rest: worker_output.h) */

/**
 * The libraries session `session` has loaded, as the client named them
 * ("a.so,b.so"; escaped when logged), for the prefix of its workers' lines;
 * NULL forgets the session.  Returns 0 or MXOP_ENOMEM (the prefix then
 * names no library).
 */
int mxop__worker_output_set_libs(uint64_t session, const char *libs);

/* ------------------------------------------------------------------------ */
/* workeruid.c (the rest: workeruid.h) */

/*
 * The default range of one-per-worker uids (a root daemon, no --worker-uid):
 * 0x6d780000 ("mx" << 16), 4096 of them.  --worker-uids FIRST:COUNT moves it.
 */
#define MXOP__WORKER_UID_FIRST 1836580864u
#define MXOP__WORKER_UID_COUNT 4096u

/**
 * Takes the value of `--worker-uids FIRST:COUNT`.  Returns 0, or
 * MXOP_EINVAL with a sentence in err.
 */
int mxop__workeruid_range_option(mxop__config_t *cfg, const char *val, char *err, size_t errlen);
/**
 * Settles the workers' user once all options are read.  A daemon running
 * as root with no --worker-uid gives each worker a uid (and the gid of the
 * same number) of its own from the range (--worker-uids, else
 * MXOP__WORKER_UID_FIRST and COUNT), unless --sandbox none; the range must
 * hold no account the system knows (its ends are checked).  A --worker-uid
 * of 0 is refused unless --sandbox none.  Returns 0 or MXOP_EINVAL with a
 * sentence in err.
 */
int mxop__workeruid_settle(mxop__config_t *cfg, char *err, size_t errlen);
/** Whether `uid` is a workers' uid (of the range, or --worker-uid), never the daemon's own. */
bool mxop__workeruid_is_workers(const mxop__config_t *cfg, uid_t uid);
/** "uid U gid G (nobody, chosen by the daemon)" and the like, for the log and `mxop status`. */
void mxop__workeruid_describe(const mxop__config_t *cfg, char *out, size_t outlen);

#endif /* MXOP_SERVER_DAEMON_WORKER_H */
