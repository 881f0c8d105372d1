/*
 * server/daemon/core/daemon.h - the internal structures of mxop-serverd.
 *
 * The daemon is one libuv loop.  Its objects:
 *
 *   mxop__daemon_t   the configuration, the listening socket, the watchdog,
 *                    the lists of client connections and workers.
 *   mxop__conn_t     a framed, non-blocking Unix stream socket (uv_poll_t,
 *                    SCM_RIGHTS both ways, a write queue).  Used for client
 *                    connections and for each worker's supervisor channel.
 *   mxop__client_t   one accepted control connection: credentials, the
 *                    handshake state, and at most one session.
 *   mxop__session_t  what a client opened: its worker and spare, loaded
 *                    libraries, ops, regions (each worker holds its own
 *                    queue of supervisor requests in flight).  Lives exactly as long as its client.
 * Its files and their shared declarations: session.h. mxop__worker_t   one spawned worker process
 * (one generation of a session's worker), a handle with its own states (worker.h, worker.c).
 * Outlives its session until the process has been reaped.
 *
 * Ownership: the daemon owns clients and workers (intrusive lists); a
 * client owns its session; a session points at its current worker and its
 * spare; a worker knows its owner only as the opaque pointer its callbacks
 * (mxop__worker_cbs_t) are given, until it is detached.  Handle memory is freed only in libuv close
 * callbacks.
 */
#ifndef MXOP_SERVER_DAEMON_H
#define MXOP_SERVER_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "common.pb-c.h"
#include "control.pb-c.h"
#include "wire/frame.h"
#include "server/daemon/core/lease_pages.h"
#include "server/daemon/worker/spawn.h"
#include "shm/status_page.h"
#include "supervisor.pb-c.h"

/* The control protocol versions this daemon speaks. */
#define MXOP__DAEMON_PROTO_MIN 1u
#define MXOP__DAEMON_PROTO_MAX 1u

/* The most regions one session may hold by default (--session-max-regions). */
#define MXOP__SESSION_MAX_REGIONS 4096
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
/* A library that crashes its worker while loading this often is refused (MXOP_EQUARANTINED). */
#define MXOP__QUARANTINE_CRASHES 3
/* The most libraries the quarantine remembers (the oldest unquarantined entry makes room). */
#define MXOP__QUARANTINE_MAX 256
/*
 * A warm spare is started this long after it is needed (at session open, after
 * a crash), so that its start does not compete for the CPU with the calls
 * that follow.
 */
#define MXOP__SPARE_DELAY_MS 100
/*
 * A worker not exec'd this long after its clone (stopped, starved) is
 * killed, and its start counts as failed (worker_proc.c).
 */
#define MXOP__START_TIMEOUT_MS 5000
/*
 * A worker asked to retire (a hot reload) that has not exited this long
 * after the Retire, or after the end of the call it was running then, is
 * killed; requests sent after the Retire go to its replacement all the
 * same (deadline.c, session_fsm.c).
 */
#define MXOP__RETIRE_TIMEOUT_MS 2000
/* The watchdog's period. */
#define MXOP__WATCHDOG_MS 20
/* Descriptors a connection may hold that no frame has claimed yet. */
#define MXOP__CONN_MAX_QUEUED_FDS 64
/* The most --allow-uid options. */
#define MXOP__MAX_ALLOW_UIDS 64
/* Bytes of the protobuf-c unpacking arena of each connection. */
#define MXOP__CONN_ARENA 16384
/* Bytes of a detail message. */
#define MXOP__MSG_MAX 512

/* ------------------------------------------------------------------------ */
/* A minimal intrusive doubly-linked list (circular, with a head node). */

typedef struct mxop__list {
    struct mxop__list *prev;
    struct mxop__list *next;
} mxop__list_t;

static inline void mxop__list_init(mxop__list_t *h)
{
    h->prev = h;
    h->next = h;
}

static inline int mxop__list_empty(const mxop__list_t *h)
{
    return h->next == h;
}

static inline void mxop__list_push(mxop__list_t *h, mxop__list_t *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}

static inline void mxop__list_remove(mxop__list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n;
    n->next = n;
}

#define MXOP__CONTAINER_OF(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))

typedef struct mxop__daemon mxop__daemon_t;
typedef struct mxop__conn mxop__conn_t;
typedef struct mxop__client mxop__client_t;
typedef struct mxop__session mxop__session_t;
typedef struct mxop__worker mxop__worker_t;

/* ------------------------------------------------------------------------ */
/* conn.c: framed non-blocking sockets. */

/*
 * A complete frame arrived.  `payload` (len bytes) is valid only during the
 * call.  The callback may take descriptors (mxop__conn_take_fd), send, and
 * close the connection.
 */
typedef void (*mxop__conn_frame_cb)(mxop__conn_t *c, uint16_t kind, const uint8_t *payload,
                                    uint32_t len);
/*
 * Reading ended: `code` is 0 for an orderly EOF, MXOP_EDISCONNECTED for a
 * reset, or the framing error (MXOP_EPROTOCOL, MXOP_EVERSION,
 * MXOP_EFRAME_TOO_LARGE) with `msg` saying what was wrong.  The owner must
 * close the connection (now or later); no further frames are delivered.
 */
typedef void (*mxop__conn_error_cb)(mxop__conn_t *c, int code, const char *msg);
/* The connection's handle is closed and its fd too: the owner may free it. */
typedef void (*mxop__conn_closed_cb)(mxop__conn_t *c);

typedef struct mxop__wq mxop__wq_t; /* one queued outgoing frame (conn.c) */

typedef struct mxop__qfd {
    int fd;
    uint64_t lo; /* stream offset of the first byte of the read that brought it */
    uint64_t hi; /* stream offset just past that read */
} mxop__qfd_t;

struct mxop__conn {
    uv_poll_t poll;
    int fd;
    void *data; /* the owner (client or worker) */
    mxop__daemon_t *d;
    uint16_t accept_kind; /* the only frame kind this peer may send */
    mxop__conn_frame_cb on_frame;
    mxop__conn_error_cb on_error;
    mxop__conn_closed_cb on_closed;

    /* Receiving: bytes not yet consumed, and where rx[0] sits in the stream. */
    uint8_t *rx;
    size_t rx_len;
    size_t rx_cap;
    uint64_t rx_base;
    /* The frame being dispatched: its stream extent, for descriptor matching. */
    uint64_t cur_start;
    uint64_t cur_end;
    mxop__qfd_t fdq[MXOP__CONN_MAX_QUEUED_FDS];
    int fdq_len;

    /* Sending. */
    mxop__wq_t *wq_head;
    mxop__wq_t *wq_tail;
    size_t wq_bytes;

    mxop__pbarena_t arena; /* reset before each unpack */
    int events;            /* UV_READABLE / UV_WRITABLE currently polled */
    bool reading;          /* false once EOF or an error ended reading */
    bool closing;
};

/*
 * Starts serving `fd` (taken: non-blocking, close-on-exec) on the daemon's
 * loop.  On failure the fd is still the caller's to close.
 * Returns 0, MXOP_ENOMEM or MXOP_EINTERNAL.
 */
int mxop__conn_init(mxop__daemon_t *d, mxop__conn_t *c, int fd, uint16_t accept_kind,
                    mxop__conn_frame_cb on_frame, mxop__conn_error_cb on_error,
                    mxop__conn_closed_cb on_closed, void *data);
/*
 * Packs `msg` into a frame of `kind` and sends it, queueing what the socket
 * does not take now.  `fds` (nfds of them, borrowed: duplicated here) ride
 * on the frame's first byte.  Returns 0, MXOP_EFRAME_TOO_LARGE, MXOP_ENOMEM,
 * MXOP_EDISCONNECTED (the connection is closing or the peer is gone).
 */
int mxop__conn_send(mxop__conn_t *c, uint16_t kind, const ProtobufCMessage *msg, const int *fds,
                    int nfds);
/* During a frame callback: how many descriptors came with this frame. */
int mxop__conn_frame_nfds(const mxop__conn_t *c);
/* During a frame callback: the oldest descriptor of this frame (taken), or -1. */
int mxop__conn_take_fd(mxop__conn_t *c);
/* Reads and dispatches everything the socket holds right now (used at worker exit). */
void mxop__conn_drain(mxop__conn_t *c);
/*
 * Stops reading, writes what can be written without blocking, and closes.
 * on_closed runs later, from the loop.  Idempotent.
 */
void mxop__conn_close(mxop__conn_t *c);

/* ------------------------------------------------------------------------ */
/* The daemon. */

typedef struct mxop__config {
    const char *socket_path; /* borrowed from argv */
    char *plugin_dir;        /* realpath, malloc'd */
    char *worker_path;       /* malloc'd */
    uid_t allow_uids[MXOP__MAX_ALLOW_UIDS];
    int n_allow_uids;
    uint64_t max_timeout_ms;
    uint64_t init_timeout_ms; /* a library's load (mxop_plugin_init), by the daemon's clock */

    /* Admission and quotas (docs/protocol.md, "Limits"); 0 turns a limit off where noted. */
    uint64_t max_conns;             /* client connections at once (default from RLIMIT_NOFILE) */
    uint64_t handshake_timeout_ms;  /* from accept to Hello */
    uint64_t idle_timeout_ms;       /* from accept to OpenSession; 0: none */
    uint64_t max_buffered_mb;       /* partial frames held, all connections together */
    uint64_t session_max_regions;   /* regions of one session */
    uint64_t session_max_region_mb; /* bytes of regions of one session; 0: none */
    uint64_t session_max_libs;      /* libraries of one session */

    /* Supervision: liveness probes of idle workers, per-session quotas. */
    uint64_t probe_interval_ms;  /* an idle live worker is probed this long after its last answer */
    uint64_t probe_timeout_ms;   /* no answer within this: it is stopped or deadlocked, replaced */
    uint64_t session_max_states; /* op states one session may hold (enforced by its worker) */

    /* The workers' sandbox (server/worker/sandbox.h, docs/isolation.md). */
    const char *sandbox;       /* "none", "basic" or "strict" */
    uint64_t worker_memory_mb; /* memory ops may use in a worker; 0: no limit */
    uint64_t worker_max_fds;   /* RLIMIT_NOFILE of a worker */
    bool has_worker_uid;       /* run workers as this user (the daemon runs as root) */
    uid_t worker_uid;
    gid_t worker_gid;
    bool warm_spare; /* keep a started spare worker per session */

    /* Least privilege: one uid per worker (workeruid.c), a root daemon with no --worker-uid. */
    bool worker_uid_range;  /* each worker gets a uid of its own from the range below */
    bool worker_uids_given; /* --worker-uids FIRST:COUNT */
    uid_t worker_uid_first; /* the range: FIRST .. FIRST + COUNT - 1 */
    uint32_t worker_uid_count;

    /* Administrators and hot reload (admin.c, reload.c; docs/security.md, docs/operations.md). */
    uid_t admin_uids[MXOP__MAX_ALLOW_UIDS]; /* --admin-uid: may send daemon-wide requests */
    int n_admin_uids;
    bool watch; /* --watch on: reload a loaded library whose file changed (checked each second) */
    /* Introspection (introspect.c, cli): the Prometheus textfile and its period. */
    const char *metrics_path; /* --metrics-file, borrowed from argv; NULL: none */
    uint64_t metrics_interval_ms;
    /* The service (config.c, drain.c): the config file and the drain at SIGTERM. */
    const char *config_path;   /* --config FILE, or NULL */
    uint64_t drain_timeout_ms; /* how long calls in flight may finish after SIGTERM */
    /* Who reaches the socket (listener.c, docs/operations.md "Permissions"), where logs go. */
    unsigned socket_mode; /* --socket-mode, default 0600 */
    bool has_socket_gid;  /* --socket-group: the socket's group */
    gid_t socket_gid;
    gid_t allow_gids[MXOP__MAX_ALLOW_UIDS]; /* --allow-gid: clients in these groups */
    int n_allow_gids;
    const char *log_file; /* --log-file PATH (borrowed), or NULL: stderr */
    bool take_over;       /* --take-over: the running daemon's socket */
} mxop__config_t;

/* One library that crashed a worker while it was loading (quarantine.c). */
typedef struct mxop__quarantine {
    char *path; /* resolved */
    dev_t dev;  /* the file's identity when it crashed: a rebuilt file starts afresh */
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    int crashes;
    uint64_t seq; /* when last touched, to choose what to forget */
} mxop__quarantine_t;

struct mxop__daemon {
    uv_loop_t *loop;
    mxop__config_t cfg;
    uid_t euid;
    pid_t pid;
    int64_t start_ns;

    /* The spin-lease pages of the client uids (lease_pages.c, shm/lease_page.h). */
    mxop__lease_pages_t leases;

    /* listener.c */
    int listen_fd;
    int reserve_fd; /* spare descriptor, given up to accept and drop at EMFILE */
    uv_poll_t listen_poll;
    bool listening;
    dev_t sock_dev; /* identity of the socket file, so shutdown removes only ours */
    ino_t sock_ino;
    bool sock_created;

    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sigusr1; /* reopens --log-file (after logrotate moved it) */
    uv_timer_t watchdog; /* watchdog.c */

    mxop__list_t clients; /* mxop__client_t.link */
    uint64_t n_clients;
    uint64_t rx_bytes; /* receive buffers of all connections (conn.c) */
    /* Refusals of new connections, logged once per second with a count (accept.c). */
    int64_t refuse_log_ns;
    uint64_t refused_quiet;
    mxop__list_t workers; /* mxop__worker_t.link */
    mxop__quarantine_t quarantine[MXOP__QUARANTINE_MAX];
    size_t n_quarantine;
    uint64_t quarantine_seq;
    uint32_t n_sessions;
    uint64_t next_session_id;
    uint64_t next_client_id;
    bool shutting_down;

    /* Hot reload (reload.c): Reload requests waiting for their sessions, the watch's clock. */
    struct mxop__reload_wait *reload_waits;
    int64_t watch_last_ns;
    /* Introspection (introspect.c, cli): the timer that writes --metrics-file. */
    uv_timer_t metrics_timer;
    bool metrics_on;
    /* The service (drain.c): SIGHUP and the drain before shutdown. */
    uv_signal_t sighup;
    bool draining;             /* stopped accepting; waiting for calls in flight */
    int64_t drain_deadline_ns; /* mxop__now_ns() past which the drain gives up */
    char drain_why[96];        /* what began it, for the final shutdown's log line */
    bool sock_activated;       /* the listening socket came from the service manager (LISTEN_FDS) */
};

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

/*
 * A library's version (libver.c): the identity of the file the daemon read
 * for a worker and the SHA-256 of what it read, with when.
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

typedef struct mxop__lib {
    char *path;               /* resolved */
    char *name;               /* as the client gave it */
    mxop__libver_t ver;       /* what the live worker loaded (reload.c reports it) */
    mxop__libver_t spare_ver; /* what the warm spare loaded: becomes ver when it is promoted */
} mxop__lib_t;

/* The size of a CUDA IPC handle (cudaIpcMemHandle_t) a device region carries. */
#define MXOP__CUDA_IPC_BYTES 64

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

/* A session's timer, allocated apart so that it can outlive the session until closed. */
typedef struct mxop__stimer {
    uv_timer_t timer;
    mxop__session_t *s; /* NULL once the session is gone */
} mxop__stimer_t;

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

/* ------------------------------------------------------------------------ */
/* listener.c */

/*
 * Creates the control socket at cfg.socket_path (owner-only, bound under a
 * temporary name then renamed into place), or takes the one the service
 * manager passed; accept.c then accepts on it.  Under --take-over it makes
 * nothing: the caller asks the running daemon for its socket (handover.c)
 * and gives it to mxop__listener_adopt.  Returns 0, or MXOP_EIO /
 * MXOP_EINVAL with a sentence in err.
 */
int mxop__listener_start(mxop__daemon_t *d, char *err, size_t errlen);
/*
 * Takes the socket a running daemon handed over (fd, or a negative code
 * passed through); accepting starts at the commit.  0, or a negative code
 * with a sentence in err.
 */
int mxop__listener_adopt(mxop__daemon_t *d, int fd, char *err, size_t errlen);
/* Stops accepting, closes the socket and removes its file (if still ours). */
void mxop__listener_stop(mxop__daemon_t *d);
/*
 * The hand-over (handover.c): the old daemon stops accepting and closes its
 * copy of the listening socket, leaving the file to its successor; the new
 * one owns the file from its commit on.
 */
void mxop__listener_release(mxop__daemon_t *d);
void mxop__listener_resume(mxop__daemon_t *d);

/* ------------------------------------------------------------------------ */
/* accept.c */

/* Starts accepting clients on the listening socket (once it is this daemon's to serve). */
void mxop__accept_start(mxop__daemon_t *d);
/* Logs how many refusals the last second's rate limit kept quiet (each watchdog tick). */
void mxop__accept_tick(mxop__daemon_t *d, int64_t now_ns);

/* ------------------------------------------------------------------------ */
/* drain.c */

/*
 * Begins the shutdown (SIGTERM, SIGINT, a Shutdown request): stops
 * accepting, then lets the calls in flight finish for up to
 * --drain-timeout-ms.  Returns true when the daemon is to stop now
 * (nothing in flight): the caller that can, calls mxop__daemon_stop;
 * otherwise the next tick does.  Idempotent (false when already begun).
 */
bool mxop__drain_begin(mxop__daemon_t *d, const char *why);
/*
 * At each watchdog tick: true when the daemon is to stop now (a drain with
 * no call in flight left, or at its bound); begins the drain of a daemon
 * that handed its socket over once its last client has gone.
 */
bool mxop__drain_tick(mxop__daemon_t *d);
/* How many calls and supervisor requests are in flight in all sessions. */
int mxop__drain_in_flight(mxop__daemon_t *d);

/* ------------------------------------------------------------------------ */
/* shutdown.c */

/*
 * The final shutdown: kills the workers, closes every handle but the
 * tick's (the caller stops that: mxop__watchdog_stop).  Idempotent.
 */
void mxop__daemon_stop(mxop__daemon_t *d, const char *why);

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
/* worker_proc.c (the worker itself: worker.h), and worker.c's sweep */

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
/* watchdog.c */

/* Makes the daemon the child subreaper and starts the periodic tick. */
int mxop__watchdog_start(mxop__daemon_t *d);
void mxop__watchdog_stop(mxop__daemon_t *d);

/* ------------------------------------------------------------------------ */
/* plugin_path.c */

/*
 * Resolves a client-given library path (name_len bytes, may hold NULs to
 * refuse) against the plugin directory `dir_real` (a realpath).  On success
 * the resolved path is in out[outlen].  Returns 0, MXOP_EINVAL (empty, NUL
 * byte, too long), MXOP_ELIB_OUTSIDE (absolute or escaping),
 * MXOP_ELIB_NOT_FOUND, MXOP_ELIB_INVALID (not a regular file), with a
 * sentence in err.
 */
int mxop__plugin_resolve(const char *dir_real, const char *name, size_t name_len, char *out,
                         size_t outlen, char *err, size_t errlen);

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
/* quarantine.c */

/*
 * MXOP_EQUARANTINED with a sentence in err when the library at `path` (a
 * resolved path) is quarantined, else 0.
 */
int mxop__quarantine_check(mxop__daemon_t *d, const char *path, char *err, size_t errlen);
/* Records that the library at `path` crashed a worker while loading; returns its count. */
int mxop__quarantine_crash(mxop__daemon_t *d, const char *path);
/* Forgets everything (at exit). */
void mxop__quarantine_free(mxop__daemon_t *d);

#endif /* MXOP_SERVER_DAEMON_H */
