/*
 * server/daemon/session/session.h - a client, its session and its slots:
 * what the files of one session share.
 *
 * A session is split by concern, one file each:
 *
 *   reply.c        encoding replies and worker events to the client
 *   tables.c       the session's libraries, ops, regions, and sending
 *                  supervisor requests (each waits on its worker's queue)
 *   ctl.c          the control protocol of one client (request handlers)
 *   ctl_validate.c checks of a request that need no session and no socket
 *   client.c       the client's connection (frames in, close)
 *   replay.c       giving a worker what the session has (replay, mirror to
 *                  the spare) and the worker's answers to it
 *   session_fsm.c  the live worker slot: its states and one transition
 *                  function (death, respawn with backoff, failure, end)
 *   spare.c        the warm spare slot: its states and one transition function
 *
 * Events flow up: worker.c reports a worker's replies and death only
 * through the callbacks the session gave at spawn (mxop__session_worker_cbs),
 * never by touching the session.
 *
 * This is the session folder's one public header (core's top files include
 * it: the tick, the drain, the shutdown, introspection, the options);
 * memconfine.h is the session's own files' alone.
 */
#ifndef MXOP_SERVER_DAEMON_SESSION_H
#define MXOP_SERVER_DAEMON_SESSION_H

#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/worker.h"

/* ------------------------------------------------------------------------ */
/* The client, its session, and the session's tables. */

/*
 * Restart policy (session_fsm.c).  A worker that dies outside any call or
 * request is respawned after a backoff that doubles with each consecutive
 * such death of a worker that never served a call (0, then 10, 20, 40 ...
 * ms, capped); a spawn that fails is retried with the same backoff; the
 * spare is re-armed with it.  None of them ever gives up: the cause may
 * clear.  A death inside a call is respawned at once: the client sets the
 * pace.
 */
#define MXOP__BACKOFF_FIRST_MS 10
#define MXOP__BACKOFF_MAX_MS 2000
/*
 * A warm spare is started this long after it is needed (at session open, after
 * a crash), so that its start does not compete for the CPU with the calls
 * that follow.
 */
#define MXOP__SPARE_DELAY_MS 100
/*
 * A worker asked to retire (a hot reload) that has not exited this long
 * after the Retire, or after the end of the call it was running then, is
 * killed; requests sent after the Retire go to its replacement all the
 * same (deadline.c, session_fsm.c).
 */
#define MXOP__RETIRE_TIMEOUT_MS 2000

/* One accepted control connection (client.c): credentials, the handshake state, a session. */
struct mxop__client {
    mxop__list_t link;
    mxop__daemon_t *d;
    mxop__conn_t conn;
    uint64_t id;          /* for the log */
    int64_t connected_ns; /* for the handshake and idle timeouts */
    uid_t uid;
    pid_t pid;
    bool hello_done;
    uint32_t version;
    char name[64]; /* Hello.client_name, sanitised */
    mxop__session_t *session;
};

typedef struct mxop__lib {
    char *path;               /* resolved */
    char *name;               /* as the client gave it */
    mxop__libver_t ver;       /* what the live worker loaded (reload.c reports it) */
    mxop__libver_t spare_ver; /* what the warm spare loaded: becomes ver when it is promoted */
} mxop__lib_t;

typedef struct mxop__region {
    uint32_t id;
    int fd; /* -1 for a device region */
    uint64_t size;
    bool cuda;      /* a device region: replayed from its IPC handle, not an fd */
    int32_t device; /* its CUDA ordinal */
    uint8_t ipc[MXOP__CUDA_IPC_BYTES];
    /* Memory integrity (memconfine.c): the client's scratch region, writable in scratch mode. */
    bool scratch;
    /* RegisterRegion.reserved_from, passed on to later workers' maps (replay.c). */
    uint64_t reserved_from;
} mxop__region_t;

/* A session's timer, allocated apart so that it can outlive the session until closed. */
typedef struct mxop__stimer {
    uv_timer_t timer;
    mxop__session_t *s; /* NULL once the session is gone */
} mxop__stimer_t;

/* Introspection (introspect.c, cli): how many restart reasons a session keeps. */
#define MXOP__RECENT_RESTARTS 8
/* ... and how many ops' crash and timeout counts (further ops count for the session only). */
#define MXOP__FAULT_OPS 32

/* One restart of a session's worker, as `mxop status` shows it: when, and its exit report. */
typedef struct mxop__restart_note {
    int64_t at_ns;
    mxop__worker_exit_t exit;
} mxop__restart_note_t;

/* The deaths the daemon saw during calls of one op (its own observation, not the client's). */
typedef struct mxop__op_fault {
    char op[MXOP__STATUS_OP_MAX];
    uint64_t crashes;
    uint64_t timeouts;
} mxop__op_fault_t;

/*
 * The session's live worker slot (session_fsm.c owns it; the table is at
 * the top of that file and in docs/architecture.md).
 */
typedef enum mxop__sess_state {
    MXOP__SESS_RUNNING,  /* s->worker serves */
    MXOP__SESS_WAITING,  /* no worker: a respawn (or a retry of a failed spawn) waits for its timer
                          */
    MXOP__SESS_RETIRING, /* a reload asked s->worker to exit between calls; it still serves */
    /*
     * A reload's replacement whose channel the client has not been given:
     * RELOAD_WAITING as WAITING (after the retirement, or the replacement
     * died unchecked); RELOAD_CHECKING as RUNNING while its replayed loads
     * are checked (the client's end of its channel in reload_fd);
     * RELOAD_RETIRING as RETIRING (another reload came meanwhile).
     */
    MXOP__SESS_RELOAD_WAITING,
    MXOP__SESS_RELOAD_CHECKING,
    MXOP__SESS_RELOAD_RETIRING,
    MXOP__SESS_FAILED, /* the session cannot be restored: worker-bound requests fail */
    MXOP__SESS_ENDED   /* the client is gone */
} mxop__sess_state_t;

/* The session's warm spare slot (spare.c owns it; its table is at the top of that file). */
typedef enum mxop__spare_state {
    MXOP__SPARE_NONE,      /* no spare and none planned (off, or the live worker is waiting) */
    MXOP__SPARE_SCHEDULED, /* spare_timer will start one */
    MXOP__SPARE_WARM,      /* s->spare runs and is given what the session has */
    MXOP__SPARE_OFF        /* never again: --warm-spare off, or the session failed or ended */
} mxop__spare_state_t;

/*
 * What a client opened: its worker and spare, loaded libraries, ops,
 * regions (each worker holds its own queue of supervisor requests in
 * flight).  Lives exactly as long as its client.
 */
struct mxop__session {
    mxop__daemon_t *d;
    mxop__client_t *client;
    uint64_t id;
    uint32_t generation;
    mxop__sess_state_t state; /* changed only by session_fsm.c's transition function */
    mxop__worker_t *worker;   /* the live worker: set exactly when mxop__session_has_worker */
    int dead_code;            /* MXOP__SESS_FAILED: what requests get */
    char dead_msg[MXOP__MSG_MAX];
    uint64_t restarts;
    int idle_deaths;    /* consecutive deaths outside calls of workers that served no call */
    int spawn_failures; /* consecutive failed spawns of a replacement */

    /*
     * The warm spare: a worker started ahead of need (generation + 1) and
     * given every library and region the session has, in the same order,
     * as soon as the live worker has them.  When the live worker dies, the
     * spare takes its place at once: nothing to start, nothing to replay.
     * Its requests in flight are on its own queue (all replays).
     */
    mxop__spare_state_t spare_state; /* changed only by spare.c's transition function */
    mxop__worker_t *spare;           /* set exactly in MXOP__SPARE_WARM */
    int spare_deaths; /* consecutive deaths or failures of spares: sets the backoff */
    mxop__stimer_t *respawn_timer;
    mxop__stimer_t *spare_timer;
    int64_t respawn_at;        /* MXOP__SESS_WAITING: when (mxop__now_ns) */
    mxop__worker_exit_t death; /* the last death: what the event says when it comes */

    mxop__lib_t *libs;
    size_t n_libs;
    size_t cap_libs;
    Mxop__OpInfo *ops; /* deep copies; strings malloc'd */
    size_t n_ops;
    size_t cap_ops;
    mxop__region_t *regions;
    size_t n_regions;
    size_t cap_regions;
    uint64_t region_bytes;
    uint32_t next_region;
    size_t n_pending_maps;      /* new regions being mapped (counted against the limit) */
    uint64_t pending_map_bytes; /* and their bytes */

    uint64_t next_sup_id;
    /*
     * Hot reload (session_fsm.c): supervisor requests sent to a retiring
     * worker after it was asked to retire, which it never read: they go to
     * its replacement.
     */
    mxop__pending_t *held;
    char retire_why[MXOP__MSG_MAX / 2]; /* RETIRING: the library being reloaded, for messages */
    /*
     * RETIRING (deadline.c): since when the worker has had no call of its
     * own to finish, and the call in flight at the Retire (the only one it
     * may still run; 0: none).  MXOP__RETIRE_TIMEOUT_MS after the first it
     * is killed.
     */
    int64_t retire_since_ns;
    uint64_t retire_call_id;
    uint64_t retire_sup_id; /* the Retire's id: requests before it are answered first */
    /*
     * RELOAD_CHECKING (and RELOAD_RETIRING from it): the client's end of the
     * replacement's channel, given once the replacement has loaded every
     * library again with the same ops (replay.c checks each); else -1.
     */
    int reload_fd;

    /* deadline.c: the calls the client publishes, and what the watchdog saw of them. */
    struct mxop__call_page *call_page; /* mapped read-write by the daemon and the client only */
    uint64_t cp_seen_id;               /* the call in flight at the last tick */
    int64_t cp_seen_ns;                /* when the daemon first saw it (its own clock) */
    uint64_t cp_killed_id;             /* the last call whose overrun killed a worker */
    uint64_t head_sup_id[2];           /* the request at the head of each worker's queue ... */
    int64_t head_since_ns[2];          /* ... and since when (live, spare) */
    /* deadline.c: liveness probes of the idle live worker. */
    int64_t probe_ok_ns;    /* the last sign of life: its spawn, a call, an answer to a probe */
    int64_t probe_quiet_ns; /* since when the probe in flight has had no call beside it */
    uint64_t probe_sup_id;  /* the probe in flight, or 0 */
    pid_t probe_pid;        /* the live worker these are about */

    /* introspect.c (cli): when it opened, its last restarts, the deaths seen per op. */
    int64_t opened_ns;
    mxop__restart_note_t recent[MXOP__RECENT_RESTARTS];
    uint64_t n_recent; /* restarts noted; the newest is recent[(n_recent - 1) % N] */
    mxop__op_fault_t faults[MXOP__FAULT_OPS];
    size_t n_faults;
    uint64_t crashes;  /* deaths of the live worker other than timeouts, in a call or not */
    uint64_t timeouts; /* deaths by a deadline the daemon enforced */

    /*
     * Memory integrity (memconfine.c): set for good when the session loads
     * a library the operator did not mark trusted under --sandbox strict.
     * From then on its workers hold engine regions read-only only, and the
     * client sends outputs through its scratch region.
     */
    bool mem_confined;
    /* deadline.c: the live worker was killed for CPU used with no call in flight;
     * the next WorkerEvent says so, and the client fails its next call with the reason. */
    bool idle_cpu_killed;
};

/* ------------------------------------------------------------------------ */
/* reply.c */

/* Sends a Reply to the client (nothing if it is gone); `fd` rides along when >= 0 (borrowed). */
void mxop__reply_send(mxop__client_t *cl, Mxop__Reply *r, int fd);
/* The same with `nfds` descriptors (borrowed) on the frame. */
void mxop__reply_send_fds(mxop__client_t *cl, Mxop__Reply *r, const int *fds, int nfds);
/* Sends an error Reply (id, code, message) to a client. */
void mxop__client_reply_error(mxop__client_t *cl, uint64_t id, int code, const char *msg);
void mxop__reply_errorf(mxop__client_t *cl, uint64_t id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void mxop__reply_ok(mxop__client_t *cl, uint64_t id);
/* The session's op list as the answer to request `id`. */
void mxop__reply_ops(mxop__session_t *s, uint64_t id);
/* A WorkerEvent (id 0) about the session's worker; `client_fd` (borrowed) when restarted. */
void mxop__reply_event(mxop__session_t *s, const mxop__worker_exit_t *e, const char *message,
                       bool restarted, int client_fd);

/* ------------------------------------------------------------------------ */
/* tables.c */

enum mxop__pending_fifo { MXOP__FIFO_LIVE, MXOP__FIFO_SPARE };

const mxop__lib_t *mxop__session_find_lib(const mxop__session_t *s, const char *path);
/* Appends a loaded library and its ops.  On failure nothing is added (MXOP_ENOMEM). */
int mxop__session_add_lib(mxop__session_t *s, const char *path, const char *name,
                          const Mxop__SupReply *r);
ssize_t mxop__session_find_region(const mxop__session_t *s, uint32_t id);
/* Appends a region (taking its fd).  MXOP_ENOMEM leaves the session unchanged. */
int mxop__session_add_region(mxop__session_t *s, const mxop__region_t *r);
/* Gives a new region of the session its id (never 0, never one held). */
uint32_t mxop__session_new_region_id(mxop__session_t *s);
mxop__pending_t *mxop__pending_new(mxop__session_t *s, int kind, uint64_t req_id, bool replay);
void mxop__pending_free(mxop__pending_t *p);
/* Frees a NULL-terminated list of entries (through ->next). */
void mxop__pending_free_list(mxop__pending_t *p);
/*
 * Sends the SupRequest for a pending entry to the live worker (or the
 * spare), on whose queue it waits for its answer (worker.h); `fd` rides
 * with it (borrowed) when >= 0.  On failure the entry is still the
 * caller's.
 */
int mxop__pending_send(mxop__session_t *s, mxop__pending_t *p, int fd, enum mxop__pending_fifo q);
/*
 * A client's request for the live worker: sent as mxop__pending_send does,
 * or, when the live worker is dying (its channel gone, its exit not yet
 * reaped), held for its replacement (s->held), which gets it after the
 * session's libraries and regions.  Returns 0 when sent or held; on failure
 * the entry is still the caller's.
 */
int mxop__pending_send_client(mxop__session_t *s, mxop__pending_t *p, int fd);
/* Frees the session's memory and descriptors (the workers are already detached). */
void mxop__session_free(mxop__session_t *s);

/* ------------------------------------------------------------------------ */
/* deadline.c */

/* Creates and maps the session's call page; *fd_out (taken) is for the client. */
int mxop__call_page_create(mxop__session_t *s, int *fd_out, char *err, size_t errlen);
void mxop__call_page_free(mxop__session_t *s);

/* ------------------------------------------------------------------------ */
/* ctl.c */

/* What the connection does after a request: stays, or closes once the reply is out. */
typedef enum { MXOP__CTL_KEEP = 0, MXOP__CTL_CLOSE = 1 } mxop__ctl_verdict_t;

/*
 * Serves one decoded request of a client (`payload` is its wire form, for
 * checks).  The caller (client.c) closes the connection on MXOP__CTL_CLOSE:
 * a first request that is not Hello, or a Hello with no common version.
 */
mxop__ctl_verdict_t mxop__ctl_handle(mxop__client_t *cl, const Mxop__Request *req,
                                     const uint8_t *payload, uint32_t len);

/* ------------------------------------------------------------------------ */
/* ctl_validate.c */

/* What one control request may ask for (all fields are limits; see docs/protocol.md). */
typedef struct mxop__limits {
    uint32_t max_fields; /* protobuf fields in one request, nested ones counted */
    uint32_t max_depth;  /* nesting of messages in one request */
} mxop__limits_t;

/* The limits a daemon without options applies. */
#define MXOP__LIMITS_DEFAULT                                                                       \
    {                                                                                              \
        .max_fields = 4096, .max_depth = 8                                                         \
    }

/*
 * Checks one control request without sockets or session state.  With `req`
 * NULL, only its wire form (`payload`, `len` bytes): malformed fields, more
 * fields (known or unknown, nested ones counted) or deeper nesting than
 * `lim` allows (NULL: MXOP__LIMITS_DEFAULT).  Run this before decoding.
 * With `req` (the decoded `payload`), also: a NUL byte inside any string
 * field (which the decoded string would hide), an id of 0, and the form of
 * each body (sizes, handle lengths, ordinals).  Returns 0, or
 * MXOP_EPROTOCOL, MXOP_ELIMIT, MXOP_EINVAL or MXOP_EUNKNOWN_REGION with a
 * sentence naming the field in msg.
 */
int mxop__ctl_validate(const uint8_t *payload, size_t len, const mxop__limits_t *lim,
                       const Mxop__Request *req, char *msg, size_t msglen);
/* The name of a request body ("LoadLibrary"), for messages. */
const char *mxop__ctl_body_name(int body_case);

/* ------------------------------------------------------------------------ */
/* replay.c */

/* Gives a new worker (or the spare) every library, in order, and every region; false if cut short.
 */
bool mxop__replay_to(mxop__session_t *s, enum mxop__pending_fifo q);
/* The device regions a promoted spare did not get while it waited. */
bool mxop__replay_device_regions(mxop__session_t *s);
/*
 * Mirrors what the live worker now has onto the spare (nothing without
 * one): 0, or -1 with the reason in why (the spare could not be sent it;
 * the caller tells spare.c, MXOP__SPARE_EV_FAILED).
 */
int mxop__mirror_load(mxop__session_t *s, const mxop__lib_t *lib, char *why, size_t whylen);
int mxop__mirror_map(mxop__session_t *s, const mxop__region_t *r, char *why, size_t whylen);
int mxop__mirror_unmap(mxop__session_t *s, uint32_t region, char *why, size_t whylen);
/*
 * What a worker's answer means for its session, beyond the request it
 * completes: replay.c says so, session_fsm.c acts on it (replay.c calls
 * neither the session's state machine nor the spare's).
 */
typedef struct mxop__replay_verdict {
    bool replayed;     /* a replayed request was answered: the replacement may be complete */
    bool unrestorable; /* the session's ops cannot be restored, for `why` */
    bool spare_failed; /* the spare could not be given or could not take something: `spare_why` */
    char why[MXOP__MSG_MAX];
    char spare_why[MXOP__MSG_MAX];
} mxop__replay_verdict_t;
/* A SupReply of the live worker: completes the pending entry it answers. */
void mxop__replay_live_reply(mxop__session_t *s, const Mxop__SupReply *r,
                             mxop__replay_verdict_t *v);
/* A SupReply of the spare. */
void mxop__replay_spare_reply(mxop__session_t *s, const Mxop__SupReply *r,
                              mxop__replay_verdict_t *v);
/*
 * Answers every request of `queue` (taken from the dead worker; freed
 * here).  `load_note` (may be "") is added to the answer of the load that
 * was running, which gets `code` when it is MXOP_ETIMEOUT (its load
 * overran), else MXOP_EWORKER_CRASHED.
 */
void mxop__replay_fail_pending(mxop__session_t *s, mxop__pending_t *queue, int code,
                               const char *message, const char *load_note);

/* ------------------------------------------------------------------------ */
/* session_fsm.c */

/* How every worker of a session (live or spare) reports to it. */
extern const mxop__worker_cbs_t mxop__session_worker_cbs;
/* Creates a session for `cl` with its first worker; answers OpenSession `req_id`. */
void mxop__session_open(mxop__client_t *cl, uint64_t req_id);
/* 0 when the session has a live worker to forward to, else the code and a message. */
int mxop__session_need_worker(mxop__session_t *s, char *err, size_t errlen);
/*
 * The session's state, as the other files read it (session_fsm.c alone
 * writes it).  Reads of the state, here, so that the files below the
 * session's state machine (spare, replay, tables) and the reload above it
 * read it without calling into session_fsm.c.
 */
/* s->worker is set (RUNNING, RETIRING, RELOAD_CHECKING, RELOAD_RETIRING). */
static inline bool mxop__session_has_worker(const mxop__session_t *s)
{
    return s->state == MXOP__SESS_RUNNING || s->state == MXOP__SESS_RETIRING ||
           s->state == MXOP__SESS_RELOAD_CHECKING || s->state == MXOP__SESS_RELOAD_RETIRING;
}
/* Its live worker serves and was not asked to retire (RUNNING, RELOAD_CHECKING). */
static inline bool mxop__session_serving(const mxop__session_t *s)
{
    return s->state == MXOP__SESS_RUNNING || s->state == MXOP__SESS_RELOAD_CHECKING;
}
/* Its live worker was asked to retire (RETIRING, RELOAD_RETIRING). */
static inline bool mxop__session_retiring(const mxop__session_t *s)
{
    return s->state == MXOP__SESS_RETIRING || s->state == MXOP__SESS_RELOAD_RETIRING;
}
/*
 * True in the states of a reload's replacement whose channel the client
 * has not been given yet (RELOAD_*): the next worker's channel is held
 * until its replayed loads are checked.
 */
static inline bool mxop__session_reload_held(const mxop__session_t *s)
{
    return s->state == MXOP__SESS_RELOAD_WAITING || s->state == MXOP__SESS_RELOAD_CHECKING ||
           s->state == MXOP__SESS_RELOAD_RETIRING;
}
/* A reload of it is not complete: retiring, or its replacement not handed to the client. */
static inline bool mxop__session_reload_pending(const mxop__session_t *s)
{
    return s->state == MXOP__SESS_RETIRING || mxop__session_reload_held(s);
}
/* It is ending: ENDED, its client gone or going, or the daemon shutting down. */
bool mxop__session_ending(const mxop__session_t *s);
/* The client is gone or going: stop the workers now; memory goes when the connection closes. */
void mxop__session_end(mxop__session_t *s);
mxop__stimer_t *mxop__stimer_new(mxop__session_t *s);
void mxop__stimer_free(mxop__stimer_t *t);

/* ------------------------------------------------------------------------ */
/* backoff.c */

/* 0 for the first failure in a row, then doubling from MXOP__BACKOFF_FIRST_MS, capped. */
uint64_t mxop__backoff_ms(int failures);

/* ------------------------------------------------------------------------ */
/* spare.c */

/* Events of the spare slot (the table at the top of spare.c). */
typedef enum mxop__spare_event {
    MXOP__SPARE_EV_WANTED,   /* the live worker runs (session open, after a respawn) */
    MXOP__SPARE_EV_TIMER,    /* spare_timer fired */
    MXOP__SPARE_EV_FAILED,   /* the spare could not follow the session (send, reply, replay) */
    MXOP__SPARE_EV_DIED,     /* the spare's process was reaped */
    MXOP__SPARE_EV_PROMOTED, /* it became the live worker */
    MXOP__SPARE_EV_DROP,     /* the live worker died with no usable spare: forget it for now */
    MXOP__SPARE_EV_STOP      /* the session failed or ended: never again */
} mxop__spare_event_t;

/* The spare slot's one transition function; `why` explains FAILED and DIED (may be NULL). */
void mxop__spare_event(mxop__session_t *s, mxop__spare_event_t ev, const char *why);
/*
 * Takes the warm spare out of the slot to become the live worker, with its
 * client fd (taken); its requests in flight stay on its queue.  NULL when
 * there is no spare able to serve (then nothing changed).
 */
mxop__worker_t *mxop__spare_take(mxop__session_t *s, int *client_fd);

/* ------------------------------------------------------------------------ */
/* libver.c: the version of each library a session runs (hot reload). */

struct stat;
/* Reads `path`'s identity and SHA-256 into *v (v->known false, a sentence in err, on failure). */
int mxop__libver_read(const char *path, mxop__libver_t *v, char *err, size_t errlen);
/* The same from an open descriptor `fd` whose fstat is `st`. */
int mxop__libver_fd(int fd, const struct stat *st, mxop__libver_t *v, char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* libfd.c */

/*
 * Opens the LOAD entry p's library (p->path), takes its version into
 * p->ver from that descriptor and checks it against the allowlist; the
 * descriptor goes into p->fd, sent with the WorkerLoad and closed with p.
 * Returns 0, or MXOP_ELIB_NOT_FOUND, MXOP_ELIB_INVALID (not a regular
 * file, a symbolic link, unreadable), MXOP_EDENIED (allowlist: not listed,
 * or a digest mismatch naming both digests) or MXOP_ENOMEM with a sentence.
 */
int mxop__libfd_open(const mxop__daemon_t *d, mxop__pending_t *p, char *err, size_t errlen);
/* The identity fields of *v from a stat. */
void mxop__libver_identity(const struct stat *st, mxop__libver_t *v);
/* True if the file `st` describes is not the one *v was read from (or *v is unknown). */
bool mxop__libver_changed(const mxop__libver_t *v, const struct stat *st);
/* The session's library at resolved `path`, or NULL. */
mxop__lib_t *mxop__libver_lib(mxop__session_t *s, const char *path);
/*
 * The session's libraries in load order (for `mxop status`): each has its
 * name, path and ver (identity, sha256, loaded_at_ms).  Returns the count;
 * *libs is valid until the session changes.
 */
size_t mxop__session_libs(const mxop__session_t *s, const mxop__lib_t **libs);
/*
 * 0 if a replayed load's reply (`r`, library `name`) registers the ops the
 * session has for it, at the same indices and with the same signatures;
 * else MXOP_ELIB_INVALID with a sentence in why.
 */
int mxop__libver_same_ops(const mxop__session_t *s, const char *name, const Mxop__SupReply *r,
                          char *why, size_t whylen);
/* Fills a LibraryVersion (strings borrowed from the arguments). */
void mxop__libver_pb(const char *name, const char *path, const mxop__libver_t *v,
                     Mxop__LibraryVersion *out);

/* ------------------------------------------------------------------------ */
/* reload.c */

/* Reload (administrators only): replaces the workers of every session using a library. */
void mxop__ctl_reload(mxop__client_t *cl, const Mxop__Request *req);
/* SessionLibraries: the versions the client's session runs. */
void mxop__ctl_session_libraries(mxop__client_t *cl, const Mxop__Request *req);

/* ------------------------------------------------------------------------ */
/* reload_wait.c */

/*
 * One Reload request waiting for its sessions to run their new workers:
 * each is RETIRING or in a RELOAD_* state (its replacement loading the
 * libraries again), until the client has the replacement's channel or the
 * session failed or ended (mxop__session_reload_pending).
 */
struct mxop__reload_wait {
    struct mxop__reload_wait *next;
    uint64_t client_id;
    uint64_t req_id;
    uint64_t *sessions;
    size_t n_sessions;
    char *name;
    char *path;
    mxop__libver_t ver;
};

/* A session left RETIRING (replaced, failed or ended): answers the Reloads now complete. */
void mxop__reload_settled(mxop__daemon_t *d);
/* Adds a Reload to wait for its sessions (answered now if none has a reload pending). */
void mxop__reload_wait_add(mxop__daemon_t *d, struct mxop__reload_wait *w);
void mxop__reload_wait_free(struct mxop__reload_wait *w);

/* ------------------------------------------------------------------------ */
/* session_fsm.c, hot reload */

/*
 * The session's library changed (EV_RELOAD): the live worker is asked to
 * exit between calls and its replacement loads the file now at the path;
 * the warm spare is discarded.  True if the session now waits for that
 * (RETIRING), false if it had nothing to replace (no worker yet, failed,
 * ended: its next worker loads the new file anyway).
 */
bool mxop__session_reload(mxop__session_t *s, const char *why);

/* ------------------------------------------------------------------------ */
/* replay.c, hot reload */

/*
 * The requests held from a retired worker (s->held): sent to the new live
 * worker when `send`, else answered as lost with the worker (`code`, `msg`).
 */
void mxop__replay_held(mxop__session_t *s, bool send, int code, const char *msg);

/* ------------------------------------------------------------------------ */
/* deadline.c */

/*
 * One watchdog tick over every session: kills a worker whose call, as the
 * client published it, is past its deadline or the daemon's maximum, or
 * whose supervisor request (a library's load) has run longer than
 * --init-timeout-ms.
 */
void mxop__deadlines_tick(mxop__daemon_t *d);

/* ------------------------------------------------------------------------ */
/* client.c */

/*
 * Ends connections that overstay: no Hello within --handshake-timeout-ms,
 * no session within --idle-timeout-ms (an error frame naming the limit,
 * then the close).
 */
void mxop__clients_tick(mxop__daemon_t *d, int64_t now);
/* Takes an accepted, credential-checked connection fd and serves it. */
void mxop__client_start(mxop__daemon_t *d, int fd, uid_t uid, pid_t pid);
/* Ends a client: closes its connection and ends its session. */
void mxop__client_close(mxop__client_t *cl);

/* ------------------------------------------------------------------------ */
/* admin.c */

/*
 * True if the client may send daemon-wide requests (Shutdown, Reload): its
 * uid is the daemon's, root, or an --admin-uid.  A worker's descendants
 * never get this far (listener.c refuses them as clients).
 */
bool mxop__client_is_admin(const mxop__daemon_t *d, const mxop__client_t *cl);
/* MXOP_EDENIED with a sentence naming the uid and how to allow it, for `what` ("Shutdown"). */
int mxop__admin_refusal(const mxop__daemon_t *d, const mxop__client_t *cl, const char *what,
                        char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* reload.c */

/* The --watch check, called at each watchdog tick (does its work once a second). */
void mxop__reload_tick(mxop__daemon_t *d, int64_t now);
/* Frees what waits for reloads (at exit). */
void mxop__reload_free(mxop__daemon_t *d);

/* ------------------------------------------------------------------------ */
/* memconfine.c (the rest, for the session's own files: memconfine.h) */

/**
 * Takes `--trusted-library NAME` (repeatable: a library's path relative to
 * the plugin directory, as LoadLibrary names it).  Returns 0, 1 when `opt`
 * is not this option, or MXOP_EINVAL with a sentence in err.
 */
int mxop__memconfine_option(const char *opt, const char *val, char *err, size_t errlen);

#endif /* MXOP_SERVER_DAEMON_SESSION_H */
