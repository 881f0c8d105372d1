/*
 * client/client_internal.h - the state of one libmxop client, shared by the
 * files of client/.  Not installed.
 *
 * Locking: every public function takes c->lock on entry and releases it on
 * return; the mxop__ functions declared here expect the caller to hold it
 * and never take it themselves, so they may call each other freely.
 */
#ifndef MXOP_CLIENT_INTERNAL_H
#define MXOP_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "client/lease.h"
#include "client/session_state.h"
#include "client/shared_heap.h"
#include "mxop/client.h"
#include "wire/ctlchan.h"
#include "wire/frame.h"
#include "shm/mailbox.h"
#include "wire/rxbuf.h"
#include "wire/sockspin.h"

#include "common.pb-c.h"
#include "control.pb-c.h"
#include "data.pb-c.h"

#define MXOP__ERR_MAX 512

/* The most attributes one call may carry (key/value pairs). */
#define MXOP__MAX_ATTRS 64

/* How long the client waits, beyond a call's deadline, for its result. */
#define MXOP__CALL_GRACE_MS 5000

/* How long the client waits for the daemon's WorkerEvent after the data
 * channel closed under a call. */
#define MXOP__EVENT_WAIT_MS 10000

/*
 * The largest result frame a worker may send.  A CallResult holds at most
 * MXOP_MAX_TENSORS inferred dtypes and shapes (a few KiB) and a message the
 * worker bounds at 1 KiB; a header claiming more is a forged length, refused
 * at once rather than waited for (call.c).
 */
#define MXOP__RESULT_MAX (64u * 1024)

/* Sibling sessions of one client's pool at most (pool.c). */
#define MXOP__POOL_MAX 15

struct mxop__pool;
struct mxop__reconn;

/* Defaults of mxop_connect_opts_t. */
#define MXOP__DEFAULT_TIMEOUT_MS 30000
#define MXOP__DEFAULT_CONNECT_TIMEOUT_MS 10000
/* The data path of a session that does not choose (MXOP_DATA_PATH overrides it). */
#define MXOP__DEFAULT_DATA_PATH MXOP_DATA_PATH_SHM

/* Arena chunks: at least 16 MiB, else the request rounded up to 2 MiB. */
#define MXOP__ARENA_CHUNK_MIN ((size_t)16 << 20)
#define MXOP__ARENA_CHUNK_ROUND ((size_t)2 << 20)
#define MXOP__ARENA_ALIGN 64

/* What a region of the table is for; only user regions may be released. */
enum mxop__region_kind {
    MXOP__REGION_USER = 0,   /* mxop_region_create / mxop_region_register_fd */
    MXOP__REGION_ARENA = 1,  /* a chunk of the array arena */
    MXOP__REGION_STAGE = 2,  /* the staging area of heap arrays */
    MXOP__REGION_SHARED = 3, /* a shared-heap block (shared_heap.c owns its fd and mapping) */
};

typedef struct mxop__region {
    uint32_t id;   /* the id the engine holds */
    uint32_t wire; /* the daemon's id for it now (differs from id after a reconnection) */
    int fd;        /* ours to close, or -1 (register_fd borrows the caller's) */
    void *base;    /* our read-write mapping, or NULL; a device region: the allocation's base */
    size_t size;
    int owned; /* 1: base was mapped here and is unmapped at release */
    int kind;  /* enum mxop__region_kind */
    /* A device region (client/cuda.c): GPU memory named by its CUDA IPC handle. */
    int cuda;
    int32_t device;
    uint8_t ipc[64];
    /* Scratch mode (docs/security.md): the client's writable mapping, through which outputs are
     * copied into place (base, or a mapping of its own for a region registered without one). */
    uint8_t *cmap;
    int cmap_owned; /* 1: cmap is a mapping of its own, unmapped at release */
    int read_only;  /* mxop_region_set_read_only: no call may write it */
    /* Its registrations with the pool's siblings (their client, their id), released with it;
     * NULL until the first (regions.c). */
    struct mxop__region_copy *copies;
    int ncopies;
} mxop__region_t;

/*
 * The bytes of one region as this process maps them, [lo, hi), for
 * finding the region a heap array's pointer lies in (region_lookup.c).
 */
typedef struct mxop__span {
    uintptr_t lo, hi;
    uint32_t id;
    int shared; /* a shared-heap block: shared_heap.c says whether a call may use it */
} mxop__span_t;

/* One piece of an arena chunk: the pieces tile the chunk in offset order. */
typedef struct mxop__seg {
    uint64_t off;
    uint64_t size;
    int used;
} mxop__seg_t;

typedef struct mxop__chunk {
    uint32_t region;
    uint8_t *base;
    uint64_t size;
    mxop__seg_t *segs;
    size_t nsegs, capsegs;
} mxop__chunk_t;

struct mxop_op {
    mxop_client_t *client; /* the client that handed this op out */
    uint32_t index;        /* OpInfo.index: Invoke.op */
    int present;           /* listed in the session's latest OpList */
    char *name;
    char *description;
    char *library;
    int32_t num_inputs;
    int32_t min_inputs;
    int32_t num_outputs;
    uint64_t mutated_inputs;
    int has_backward;
    int stateful;
    Mxop__OpInfo decls; /* only the fields of opinfo_ext.h used: flags, dynamic_outputs, attrs */
};

/* Preallocated protobuf-c structures of the data plane: a call of up to
 * MXOP_MAX_TENSORS inputs and outputs and MXOP__MAX_ATTRS attributes is
 * built in these without touching malloc. */
typedef struct mxop__callbufs {
    Mxop__Call call;
    Mxop__Invoke invoke;
    Mxop__Infer infer;
    Mxop__StateCreate state_create;
    Mxop__StateDestroy state_destroy;
    Mxop__TensorDesc in_desc[MXOP_MAX_TENSORS];
    Mxop__TensorDesc out_desc[MXOP_MAX_TENSORS];
    Mxop__TensorDesc *in_ptr[MXOP_MAX_TENSORS];
    Mxop__TensorDesc *out_ptr[MXOP_MAX_TENSORS];
    Mxop__Attr attrs[MXOP__MAX_ATTRS];
    Mxop__Attr *attr_ptr[MXOP__MAX_ATTRS];
    Mxop__Shape shapes[MXOP_MAX_TENSORS];
    Mxop__Shape *shape_ptr[MXOP_MAX_TENSORS];
    int32_t dtypes[MXOP_MAX_TENSORS];
    /* Where each heap array of the call sits in the staging region. */
    uint64_t in_stage[MXOP_MAX_TENSORS];
    uint64_t out_stage[MXOP_MAX_TENSORS];
    uint64_t in_span[MXOP_MAX_TENSORS];
    uint64_t out_span[MXOP_MAX_TENSORS];
    /* The call's arrays with those in shared-heap blocks described by region (invoke.c). */
    mxop_array_t in_ref[MXOP_MAX_TENSORS];
    mxop_array_t out_ref[MXOP_MAX_TENSORS];
} mxop__callbufs_t;

struct mxop_client {
    pthread_mutex_t lock;

    /* The control connection to mxop-serverd; its replies are decoded into pba. */
    mxop__ctlchan_t ctl;
    /* The session's state, its reason and the data channel: written by session_state.c alone. */
    mxop__sess_t sess;
    mxop__framebuf_t data_fb; /* calls on the way out */
    mxop__rxbuf_t data_rx;    /* results coming in on the data socket */
    int64_t rcvtimeo_ms;      /* SO_RCVTIMEO set on sess.data_fd, 0: not yet */
    /* The socket path's busy-poll before a blocking recv (wire/sockspin.h). */
    mxop__sockspin_t data_spin;
    mxop__pbarena_t pba;

    /* The shared-memory data path (call.c). */
    int data_path; /* MXOP_DATA_PATH_SOCKET or MXOP_DATA_PATH_SHM, as chosen */
    /* The session's call page (shm/call_page.h), mapped from the OpenSession reply; or NULL. */
    struct mxop__call_page *call_page;
    /* Its uid's spin lease (client/lease.c), also from the OpenSession reply. */
    mxop__lease_t lease;
    mxop__mbox_t mbox; /* the current worker's, while sess.chan is MXOP__CHAN_MBOX */
    uint8_t *mbox_buf; /* a result copied out of the mailbox (NULL on the socket path) */

    uint64_t next_call_id;
    int32_t timeout_ms;         /* default call deadline */
    int32_t connect_timeout_ms; /* hello and session set-up */

    /* The last WorkerEvent handled, for the call it ended. */
    int ev_code;
    uint64_t ev_call_id;
    int ev_has_op;
    char ev_msg[MXOP__ERR_MAX];

    char err[MXOP__ERR_MAX];

    /* Ops: an array that only grows, so handles stay valid until close. */
    mxop_op_t **ops;
    size_t nops, capops;
    /* The libraries loaded, each name once, in load order (op_table.c): what
     * a reconnection and the pool's siblings load again.  Changed under
     * c->lock and libs_lock; the pool reads it under libs_lock alone. */
    char **libs;
    size_t nlibs, caplibs;
    pthread_mutex_t libs_lock;

    mxop__region_t *regions;
    size_t nregions, capregions;
    /* The mapped regions by address (region_lookup.c), changed with the table under both
     * locks: read under either. */
    mxop__span_t *spans;
    size_t nspans, capspans;

    mxop__chunk_t *chunks;
    size_t nchunks, capchunks;

    /* The staging region of heap arrays (0: none yet). */
    uint32_t stage_region;
    uint8_t *stage_base;
    size_t stage_size;

    /* Scratch mode (OpenSessionReply/OpList.confined): the worker holds the session's regions
     * read-only; outputs and mutated inputs go through the staging region, registered as the
     * session's scratch region, and are copied into place after a successful call. */
    int confined;
    uint64_t scratch_bytes; /* copied through the scratch region (mxop_stats_v2) */
    /* WorkerEvent.idle_cpu: why the worker was replaced between calls, for the next call. */
    char idle_note[MXOP__ERR_MAX];

    mxop_stats_t stats;
    uint64_t session;
    uint32_t generation;
    uint32_t worker_pid;

    mxop__callbufs_t cb;

    /* The pool of sibling sessions (pool.c), or NULL.  regions_lock is
     * taken, besides c->lock, by every change of the region table, so
     * that the pool may read the table while another thread's call holds
     * c->lock. */
    struct mxop__pool *pool;
    pthread_mutex_t regions_lock;
    /* Guards the arena's chunks and blocks (arena.c), inside c->lock when
     * both are taken; with a pool, allocations that fit and frees take it
     * alone. */
    pthread_mutex_t arena_lock;

    /* Reconnection to the same socket path when the daemon goes away (reconnect.c). */
    struct mxop__reconn *rcn;

    /* The shared heap's name for this client (shared_heap.c, under its lock), 0: none yet. */
    uint64_t heap_id;
};

/* ---- errors (error.c) ---- */

/** Writes the detail of a failure into c->err and returns `code`. */
int mxop__fail(mxop_client_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** This thread's last failure on c was a sibling session's call (pool.c), with `msg`. */
void mxop__error_of_sibling(const mxop_client_t *c, const char *msg);

/** Forgets this thread's sibling error (a call on the client itself succeeded or failed). */
void mxop__error_forget_sibling(void);

/* ---- the client and its one session, without a pool (session.c) ---- */

/**
 * Allocates a client with everything mxop_connect sets up before it
 * connects: no control socket, no session, no data channel yet.  Returns 0
 * with *out (freed by mxop__client_free), or MXOP_ENOMEM.
 */
int mxop__client_new(int data_path, int32_t timeout_ms, int32_t connect_timeout_ms,
                     mxop_client_t **out);

/**
 * A client with its session open on `path` (no pool): mxop_connect's work
 * after the options, and a pool's sibling.  `reconnect` is the option
 * (MXOP_RECONNECT_DEFAULT reads $MXOP_RECONNECT).  On failure `err` says why.
 */
int mxop__client_open(const char *path, const char *name, int data_path, int32_t timeout_ms,
                      int32_t connect_timeout_ms, int32_t reconnect, mxop_client_t **out, char *err,
                      size_t errlen);

/** Ends c's session (the daemon sees EOF) and waits briefly for the daemon to close it. */
void mxop__client_hang_up(mxop_client_t *c);

/** Frees c and everything it holds but its pool (mxop__pool_free first). */
void mxop__client_free(mxop_client_t *c);

/** Sets c's default deadline (MXOP_EINVAL unless > 0), not its siblings'. */
int mxop__client_set_timeout(mxop_client_t *c, int32_t timeout_ms);

/* ---- opening a session (session_open.c) ---- */

/**
 * Connects c (no control socket yet) to `path`, says Hello as `name`
 * (may be NULL), opens a session and attaches its data channel.  On
 * failure c->err says why and c->ctl may be connected (the caller closes it).
 */
int mxop__session_open(mxop_client_t *c, const char *path, const char *name);

/* ---- reconnection (reconnect.c) ---- */

/** Sets up what a reconnection needs (`on`: whether to reconnect). */
int mxop__reconnect_init(mxop_client_t *c, const char *path, const char *name, int on);
void mxop__reconnect_free(mxop_client_t *c);
int mxop__reconnect_enabled(const mxop_client_t *c);
/** Records an op state created, and forgets one destroyed (1: it was lost). */
void mxop__reconnect_note_state(mxop_client_t *c, uint64_t id, const mxop_op_t *op);
int mxop__reconnect_state_destroyed(mxop_client_t *c, uint64_t id);
/** MXOP_ESTATE_LOST (naming the op) for a state of a daemon that went away, else 0. */
int mxop__reconnect_check_state(mxop_client_t *c, uint64_t id);
/**
 * Before anything of a call or request is built: if the daemon went away
 * and reconnection is on, reconnects and restores the session.  Returns 0
 * (nothing to do, or done) or the error (c->err) that ends the attempt.
 */
int mxop__reconnect_if_gone(mxop_client_t *c);
/**
 * After a call failed with `rc`: if the daemon went away under it,
 * reconnects; then *again is set when the call may simply run again
 * (`rerun_safe`: it writes nothing that a half-run could have changed),
 * else returns an error saying the daemon went away and the client
 * reconnected.  Returns rc untouched when the daemon did not go away.
 */
int mxop__reconnect_after(mxop_client_t *c, int rc, const mxop_op_t *op, int rerun_safe,
                          int *again);

/* ---- control plane (control.c) ---- */

/* mxop__ctl_next's result when the frame was a WorkerEvent it handled. */
#define MXOP__CTL_EVENT 1

/**
 * Sends `req` (its id is set here) with `nfds` descriptors (borrowed) and
 * waits at most timeout_ms for its Reply, handling WorkerEvents that come
 * first.  On 0 *reply points into c->pba (valid until the next unpack);
 * `fd_out`, if not NULL, takes the descriptor the reply carried (-1: none).
 * A non-zero status is returned with the daemon's message in c->err.
 */
int mxop__ctl_request(mxop_client_t *c, Mxop__Request *req, const int *fds, int nfds,
                      int timeout_ms, Mxop__Reply **reply, int *fd_out);

/**
 * mxop__ctl_request in two halves, for a caller with work to do while the
 * daemon answers (client/regions.c): send sets req->id; await takes the
 * Reply to that id as mxop__ctl_request does.  Nothing else may use the
 * control connection in between.
 */
int mxop__ctl_send(mxop_client_t *c, Mxop__Request *req, const int *fds, int nfds);
int mxop__ctl_await(mxop_client_t *c, uint64_t id, int timeout_ms, Mxop__Reply **reply,
                    int *fd_out);

/** The timeout of control requests after connect. */
int mxop__ctl_timeout(const mxop_client_t *c);

/**
 * Reads one control frame, waiting until end_ns (CLOCK_MONOTONIC).  A WorkerEvent is
 * handled here and reported as MXOP__CTL_EVENT; any other Reply is returned
 * in *reply (with its descriptor in *fd_out, or closed when fd_out is
 * NULL).  Errors (EOF, a fatal Reply from the daemon) mark the control
 * connection dead.
 */
int mxop__ctl_next(mxop_client_t *c, int64_t end_ns, Mxop__Reply **reply, int *fd_out);

/* ---- regions (regions.c) ---- */

/**
 * Region `id` of c as registered with sibling `sc` (its id there), or 0 if
 * not (yet); takes c->regions_lock only (another thread's call may hold c->lock).
 */
uint32_t mxop__region_copy_find(mxop_client_t *c, uint32_t id, mxop_client_t *sc);
/**
 * Records that region `id` of c is registered with sibling `sc` as `sid`,
 * released there when c drops it.  0, or -1 when c no longer has the region
 * or out of memory (the caller releases sid).  c->regions_lock only.
 */
int mxop__region_copy_add(mxop_client_t *c, uint32_t id, mxop_client_t *sc, uint32_t sid);
/* Registers fd's memory using `cmap`, another client's writable mapping of it (pool.c). */
int mxop__region_register_shared(mxop_client_t *c, int fd, size_t bytes, void *cmap,
                                 uint32_t *region);
mxop__region_t *mxop__region_find(mxop_client_t *c, uint32_t id);

/**
 * Creates, maps and registers a region of `bytes` of the given kind.
 * *out gets the table entry (valid until the table changes).
 */
int mxop__region_new(mxop_client_t *c, size_t bytes, int kind, mxop__region_t **out);

/** Unregisters a region with the daemon and drops it from the table. */
int mxop__region_drop(mxop_client_t *c, uint32_t id);

/** Drops a region from the table without telling the daemon (it could not be told). */
void mxop__region_forget(mxop_client_t *c, uint32_t id);

/**
 * Registers a shared-heap block (shared_heap.c): `fd` and the mapping
 * `base` of `size` bytes stay the heap's (borrowed until the region is
 * dropped or the client closed).  *id gets the region.
 */
int mxop__region_add_block(mxop_client_t *c, int fd, void *base, size_t size, uint32_t *id);

/** Makes room for one more region entry.  Returns 0 or MXOP_ENOMEM (reason in c->err). */
int mxop__region_reserve(mxop_client_t *c);

/** Registers every region again with a new daemon (after a reconnection). */
int mxop__regions_reregister(mxop_client_t *c);

/** The daemon's id of region `id` (the engine's), or id itself if unknown. */
uint32_t mxop__region_wire(mxop_client_t *c, uint32_t id);

/** Unmaps and closes every region (at close). */
void mxop__regions_free(mxop_client_t *c);

/* ---- which region a pointer lies in (region_lookup.c) ---- */

/**
 * Makes room for `cap` spans (c->regions_lock held), so that adding one
 * never allocates.  0, or -1 when out of memory.
 */
int mxop__lookup_reserve(mxop_client_t *c, size_t cap);

/** Notes entry e's mapping, if it has one a heap array may lie in (c->regions_lock held). */
void mxop__lookup_add(mxop_client_t *c, const mxop__region_t *e);

/** Forgets region id's mapping (c->regions_lock held). */
void mxop__lookup_remove(mxop_client_t *c, uint32_t id);

/** Frees the spans (at close, c->regions_lock held). */
void mxop__lookup_free(mxop_client_t *c);

/**
 * The region whose mapping holds [p, p + n) (n > 0), read under c->lock or
 * c->regions_lock: 1 with *id, *offset and *shared, else 0.  No allocation.
 */
int mxop__lookup_find(const mxop_client_t *c, const void *p, uint64_t n, uint32_t *id,
                      uint64_t *offset, int *shared);

/** Whether [p, p + n) meets any region's mapping (c->regions_lock held). */
int mxop__lookup_overlaps(const mxop_client_t *c, const void *p, uint64_t n);

/**
 * For a pool's sibling call (c->regions_lock taken here, not c->lock):
 * the region of c array `a` names, or, for a contiguous heap array, the
 * region of c its bytes lie in (not a shared-heap block: the sibling
 * resolves those itself).  1 with *id, *offset and *read_only (the
 * region's mark), else 0 (a heap array to stage).
 */
int mxop__lookup_for_sibling(mxop_client_t *c, const mxop_array_t *a, uint32_t *id,
                             uint64_t *offset, int *read_only);

/* ---- the pool of sibling sessions (pool.c) ---- */

/**
 * Sets up the pool of a client just connected (nothing when max_sessions
 * <= 1).  Its siblings are clients of their own, driven through the public
 * calls as an engine would drive them.
 */
int mxop__pool_init(mxop_client_t *c, const char *path, const char *name, int max_sessions);

/** Closes the siblings and frees the pool. */
void mxop__pool_free(mxop_client_t *c);

/** Gives the siblings (and those opened later) the client's new default deadline. */
void mxop__pool_set_timeout(mxop_client_t *c, int32_t timeout_ms);

/** Calls and errors of the siblings. */
void mxop__pool_stats(mxop_client_t *c, uint64_t *calls, uint64_t *errors);

/* ---- where arrays are allocated (outputs.c) ---- */

/**
 * While mxop_shared_outputs is on: an array of at least
 * mxop_shared_min_bytes() in a shared-heap block for c (region
 * MXOP_REGION_HEAP), returning 0; else -1 (off, too small, a bad argument,
 * no block), and the arena allocates.  Takes no lock of c's.
 */
int mxop__outputs_alloc(mxop_client_t *c, int32_t dtype, int32_t ndim, const int64_t *shape,
                        mxop_array_t *out);

/* ---- arena (arena.c) ---- */

void mxop__arena_free_all(mxop_client_t *c);

/* ---- data plane (invoke.c) ---- */

/** Initialises the preallocated call structures (once, at connect). */
void mxop__callbufs_init(mxop_client_t *c);

/**
 * A forward or backward on c itself, never a sibling (c->lock held by the
 * caller, and still held on return): mxop_forward's work once pool.c has
 * chosen the client, and a sibling's call.
 */
int mxop__invoke_locked(mxop_client_t *c, const mxop_op_t *op, int backward,
                        const mxop_call_t *call, const mxop_array_t *in, int n_in,
                        mxop_array_t *out, int n_out);

/* ---- data plane transport (call.c) ---- */

/**
 * Before a call: returns 0, or the error that keeps any call from being
 * made (no daemon, no worker).  No syscall while a worker serves (without
 * one, the daemon's pending events are read first): a worker that died while idle
 * is found by the call itself, which then goes to the replacement.
 */
int mxop__call_ready(mxop_client_t *c);

/**
 * Sends c->cb.call (its id is set here) and waits for its CallResult, at
 * most wait_ms plus MXOP__CALL_GRACE_MS.  `op` (may be NULL) names the call
 * in errors.  On 0 *res points into c->pba.  A non-zero status is returned
 * with the worker's message; a dead worker gives the daemon's WorkerEvent
 * code (MXOP_EWORKER_CRASHED, MXOP_ETIMEOUT, ...).
 */
int mxop__call_transact(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms,
                        Mxop__CallResult **res);

/** Attaches the mailbox now if one is wanted (at connect).  Returns 0. */
int mxop__data_attach_now(mxop_client_t *c);

/* ---- what a worker's answer may say (result.c) ---- */

/* mxop__result_take's answers besides 0 and an error. */
#define MXOP__RESULT_STALE 3   /* the result of a call given up on earlier: dropped */
#define MXOP__RESULT_GARBAGE 4 /* a frame no worker should send (c->err says which) */

/**
 * Turns a frame of `kind` with `len` payload bytes (borrowed), read from the
 * worker while call `id` waits, into the call's outcome: 0 with *res (in
 * c->pba), the worker's error (a known MXOP_E* code, its message cleaned
 * and naming `op` when op is not NULL), MXOP__RESULT_STALE or
 * MXOP__RESULT_GARBAGE.
 */
int mxop__result_take(mxop_client_t *c, const mxop_op_t *op, uint64_t id, uint16_t kind,
                      uint32_t len, const uint8_t *payload, Mxop__CallResult **res);

/** Whether `code` is one of the MXOP_E* codes of mxop/errors.h. */
int mxop__code_known(int code);

/**
 * Copies text a worker wrote (`src`, NUL-terminated, may be NULL) into
 * dst[cap] as printable UTF-8 (lines and tabs kept): other control
 * characters and bytes that are not UTF-8 become \xNN, and a text cut to
 * fit ends in "..." on a character's boundary.
 */
void mxop__text_clean(char *dst, size_t cap, const char *src);

/* ---- the op table and the libraries loaded (op_table.c) ---- */

/** Replaces the op table with an OpList from the daemon. */
int mxop__ops_update(mxop_client_t *c, const Mxop__OpList *list);

void mxop__ops_free(mxop_client_t *c);

/** Records a library loaded (c->lock held); a name loaded again is not added twice. */
void mxop__library_note(mxop_client_t *c, const char *name);
/** How many libraries c loaded (each once); c->lock held. */
size_t mxop__library_count(mxop_client_t *c);
/** The name of the i-th library c loaded (load order), or NULL; c->lock held. */
const char *mxop__library_at(mxop_client_t *c, size_t i);
/**
 * Copies the i-th library's name into buf (cut to len - 1 bytes) without
 * c->lock (another thread's call may hold it): 1, or 0 past the last.
 */
int mxop__library_copy(mxop_client_t *c, size_t i, char *buf, size_t len);

#endif /* MXOP_CLIENT_INTERNAL_H */
