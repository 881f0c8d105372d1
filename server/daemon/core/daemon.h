/*
 * server/daemon/core/daemon.h - the daemon's core, as the other two folders
 * see it: its one public header.
 *
 * mxop-serverd is three folders, each with one public header that the
 * other folders include, and private headers its own files alone include:
 *
 *   core/daemon.h      the loop and its objects (below), the log, the
 *                      options, what the allowlist and the layers say
 *   worker/worker.h    one worker process as a handle (includes this one)
 *   session/session.h  a client, its session and its slots (includes both)
 *
 * Headers include downward only: this one includes nothing of the other
 * two folders.  The objects of the loop:
 *
 *   mxop__daemon_t   the configuration, the listening socket, the watchdog,
 *                    the lists of client connections and workers.
 *   mxop__conn_t     a framed, non-blocking Unix stream socket (uv_poll_t,
 *                    SCM_RIGHTS both ways, a write queue).  Used for client
 *                    connections and for each worker's supervisor channel.
 *   mxop__client_t   one accepted control connection, and at most one
 *                    session (session.h).
 *   mxop__worker_t   one spawned worker process (worker.h).
 *
 * Ownership: the daemon owns clients and workers (intrusive lists); a
 * client owns its session; a session points at its current worker and its
 * spare; a worker knows its owner only as the opaque pointer its callbacks
 * (mxop__worker_cbs_t) are given, until it is detached.  Handle memory is
 * freed only in libuv close callbacks.
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

/* The control protocol versions this daemon speaks. */
#define MXOP__DAEMON_PROTO_MIN 1u
#define MXOP__DAEMON_PROTO_MAX 1u

/* The most regions one session may hold by default (--session-max-regions). */
#define MXOP__SESSION_MAX_REGIONS 4096
/* A library that crashes its worker while loading this often is refused (MXOP_EQUARANTINED). */
#define MXOP__QUARANTINE_CRASHES 3
/* The most libraries the quarantine remembers (the oldest unquarantined entry makes room). */
#define MXOP__QUARANTINE_MAX 256
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
typedef struct mxop__worker_exit mxop__worker_exit_t;

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

/* ------------------------------------------------------------------------ */
/*
 * log.c - the daemon's log: one line per event on stderr.
 *
 *     mxop-serverd[PID] LEVEL TIMESTAMP[ session=N][ op=NAME][ library=L][ worker=PID]: message
 *
 * or, with --log-format json, one JSON object a line: ts, level,
 * daemon_pid, and where known session, op, library, worker_pid; then msg.
 *
 * Only the daemon logs; the libraries it shares code with return errors.
 */

enum mxop__log_level {
    MXOP__LOG_DEBUG = 0,
    MXOP__LOG_INFO = 1,
    MXOP__LOG_WARN = 2,
    MXOP__LOG_ERROR = 3,
};

enum mxop__log_format { MXOP__LOG_TEXT = 0, MXOP__LOG_JSON = 1 };

/* Parses "text" or "json".  Returns 0 or MXOP_EINVAL. */
int mxop__log_parse_format(const char *s, int *format);
void mxop__log_set_format(int format);

/* What an event is about, where known (0, NULL or "" when not). */
typedef struct mxop__log_ctx {
    uint64_t session;
    const char *op;
    const char *library;
    int worker_pid;
} mxop__log_ctx_t;

/*
 * Sends the log to `path` (appended, created 0640) instead of stderr: the
 * file becomes fd 2.  mxop__log_reopen opens the same path again, after
 * logrotate moved the file (SIGUSR1).  Return 0, or MXOP_EIO with a
 * sentence in err (the log then stays where it was).
 */
int mxop__log_open_file(const char *path, char *err, size_t errlen);
int mxop__log_reopen(char *err, size_t errlen);

/* Parses "debug", "info", "warn" or "error".  Returns 0 or MXOP_EINVAL. */
int mxop__log_parse_level(const char *s, int *level);
void mxop__log_set_level(int level);
int mxop__log_enabled(int level);

/*
 * Writes one line: `session` 0 and `op` NULL or "" are left out.  Control
 * characters in the message are replaced so that an event stays one line.
 */
void mxop__log(int level, uint64_t session, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same with every field of `ctx`. */
void mxop__log_ev(int level, const mxop__log_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define MXOP__LOGD(session, op, ...) mxop__log(MXOP__LOG_DEBUG, (session), (op), __VA_ARGS__)
#define MXOP__LOGI(session, op, ...) mxop__log(MXOP__LOG_INFO, (session), (op), __VA_ARGS__)
#define MXOP__LOGW(session, op, ...) mxop__log(MXOP__LOG_WARN, (session), (op), __VA_ARGS__)
#define MXOP__LOGE(session, op, ...) mxop__log(MXOP__LOG_ERROR, (session), (op), __VA_ARGS__)

/* ------------------------------------------------------------------------ */
/* integrity.c (the rest, for core's own files: integrity.h) */

/** The allowlist's absolute path for the worker's --allowlist, or "" when none. */
const char *mxop__integrity_allowlist(void);
/**
 * Looks the library at `resolved` (inside `plugin_dir`) up in the
 * allowlist, read again now (edits apply at the next load).  Returns 0
 * when there is no allowlist; 1 when listed, with its digest in
 * expected[65], "FILE (line N)" in where and the line's `trusted` field in
 * *trusted; or MXOP_EDENIED (not listed, or the file unreadable or
 * malformed) with a sentence naming `lname` in err.
 */
int mxop__integrity_lookup(const char *plugin_dir, const char *resolved, const char *lname,
                           char expected[65], char *where, size_t wherelen, int *trusted, char *err,
                           size_t errlen);

/* ------------------------------------------------------------------------ */
/* introspect.c (metrics.c: introspect.h) */

/* Answers DaemonStatus: the daemon, its sandbox, the sessions the asker may see. */
void mxop__introspect_status(mxop__client_t *cl, const Mxop__Request *req);
/* Answers DaemonStats: counters per op and per session (and the Prometheus text if asked). */
void mxop__introspect_stats(mxop__client_t *cl, const Mxop__Request *req);
/* The live worker of `s` died: notes the restart reason and the op's fault, and logs it. */
void mxop__introspect_death(mxop__session_t *s, const mxop__worker_t *w,
                            const mxop__worker_exit_t *e);

/* ------------------------------------------------------------------------ */
/* layers.c (the rest, for core's own files: layers.h) */

/**
 * The namespace profile strict workers get (`--ns-profile` of the worker,
 * server/worker/namespaces.h): "none", "cpu" or "gpu", as decided by
 * mxop__layers_check ("none" before it and under basic).
 */
const char *mxop__layers_ns_profile(void);
/*
 * Whether workers start in a pid namespace of their own (spawn.c): strict
 * as root with the cpu profile; never basic (it keeps the host's /proc),
 * never the gpu profile (legacy CUDA IPC handles do not open across pid
 * namespaces) and never without root (CLONE_NEWPID needs CAP_SYS_ADMIN in
 * the daemon's user namespace).  False before mxop__layers_check.
 */
bool mxop__layers_pid_ns(void);

#endif /* MXOP_SERVER_DAEMON_H */
