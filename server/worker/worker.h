/*
 * server/worker/worker.h - the private header of mxop-worker.
 *
 * The worker is one process per client session.  It serves two channels
 * (fd 3: the daemon's supervisor requests, fd 4: the client's calls), loads
 * op libraries, maps the session's regions and runs ops on them.  Everything
 * here is single-threaded: one request is handled at a time, so the tables
 * below are plain globals owned by their files, reached through the
 * functions declared here.  What another component may use of the op
 * runtime (the op table, a call's prologue, checks and inference) is
 * declared in runtime.h, which this header includes.
 */
#ifndef MXOP_SERVER_WORKER_WORKER_H
#define MXOP_SERVER_WORKER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mxop/op.h"
#include "server/worker/runtime.h"
#include "shm/status_page.h"

#include "common.pb-c.h"
#include "data.pb-c.h"
#include "supervisor.pb-c.h"

/* Descriptions longer than this are cut, so that op lists stay small. */
#define MXOP__W_DESC_MAX 1024

/* The most entries a list attribute may have when the worker checks it. */
#define MXOP__W_MAX_LIST 256

/* The most ops one session may hold, across all its libraries. */
#define MXOP__W_MAX_OPS 4096

/* ------------------------------------------------------------------------ */
/* The context handed to every plugin callback (host.c). */

enum mxop__ctx_mode {
    MXOP__CTX_IDLE = 0, /* between calls: nothing may be registered */
    MXOP__CTX_INIT = 1, /* inside mxop_plugin_init */
    MXOP__CTX_CALL = 2, /* inside an op callback */
};

/* An extra workspace block handed out when the main buffer was too small. */
struct mxop__ws_block {
    struct mxop__ws_block *next;
};

struct mxop_ctx {
    int mode; /* enum mxop__ctx_mode */

    /* The first error recorded with set_error (0: none) and its message. */
    int err_code;
    int has_msg;
    char msg[MXOP__W_MSG_MAX];

    /* The call's attributes, borrowed from mxop__call_attrs_read (or inproc's caller). */
    int n_attrs;
    const char *attr_keys[MXOP__W_MAX_ATTRS];
    const char *attr_vals[MXOP__W_MAX_ATTRS];

    /*
     * Workspace: a grow-only 64-byte-aligned buffer, handed out bump-style
     * within a call.  What does not fit goes into extra blocks, freed at
     * the next call, when the main buffer grows to the high-water mark.
     */
    uint8_t *ws;
    size_t ws_cap;
    size_t ws_used;
    size_t ws_want; /* total asked for during the current call */
    struct mxop__ws_block *ws_extra;

    /* xoshiro256** state, and the second Box-Muller deviate if any. */
    uint64_t rng[4];
    int have_spare;
    double spare;
    uint64_t call_seed; /* what the generator was seeded with (host->rng_seed) */

    /* The op of the current call (NULL during init). */
    const struct mxop__worker_op *op;

    /* During a forward: its outputs, for alloc_output, and which dynamic
     * outputs have been given their shape (runner.c sets, host.c fills).
     * dyn_view is the library's copy of the outputs at its own stride
     * (tensor_view.c), or NULL when it has the worker's array. */
    mxop_tensor_t *dyn_out;
    int dyn_n;
    uint64_t dyn_set;
    void *dyn_view;
    uint32_t dyn_stride;

    /* During init: the library being registered, its tensor stride, and
     * its first failure. */
    uint32_t reg_lib;
    uint32_t reg_tensor_stride;
    int reg_code;
    char reg_msg[MXOP__W_MSG_MAX];
};

/* The host table given to every library. */
extern const mxop_host_t mxop__host;

/** Seeds the session's random sequence (main.c, once). */
void mxop__ctx_seed_session(uint64_t session, uint32_t generation);

/**
 * Prepares the context for a call of `op` with the given attributes
 * (borrowed until mxop__ctx_end; NULL: none) and seed (0: the session's
 * sequence).  Returns 0, or MXOP_EATTR (too many or repeated attributes)
 * with the reason in msg[msglen].
 */
int mxop__ctx_begin_call(const struct mxop__worker_op *op, const struct mxop__call_attrs *attrs,
                         uint64_t seed, char *msg, size_t msglen);

/**
 * Forgets an error a callback recorded but did not return, so that it is
 * not reported as the reason for a later callback's failure.
 */
static inline void mxop__ctx_clear_error(void)
{
    mxop__ctx.err_code = 0;
    mxop__ctx.has_msg = 0;
    mxop__ctx.msg[0] = '\0';
}

/** Back to idle after a call or an init; forgets attributes and errors. */
void mxop__ctx_end(void);

/** Frees the workspace (at exit). */
void mxop__ctx_free(void);

/* ------------------------------------------------------------------------ */
/* Ops and libraries (ops.c, plugin_loader.c). */

/* ------------------------------------------------------------------------ */
/* A call's tensors at the stride of the op's library (tensor_view.c). */

/* The tensor size a library of ABI 1 or 2 was built with: the frozen members. */
#define MXOP__TENSOR_SIZE_V1 (offsetof(mxop_tensor_t, size) + sizeof(size_t))

/* The largest tensor_size a library may declare: more is garbage, not a newer ABI. */
#define MXOP__TENSOR_SIZE_MAX 1024u

/* After alloc_output changed out[i]: the library's copy gets the same shape. */
void mxop__tensor_view_sync(int i, const mxop_tensor_t *t);

/* ------------------------------------------------------------------------ */
/* Declared attributes (attrs.c). */

/**
 * Replaces op->def.attrs (the plugin's) with checked, owned copies.  On
 * failure the op has none, and msg says what was wrong.
 */
int mxop__attrs_copy(mxop__worker_op_t *op, char *msg, size_t msglen);
void mxop__attrs_free(mxop__worker_op_t *op);

/** MXOP_EATTR when the call's attributes break the op's declarations. */
int mxop__attrs_validate(const mxop__worker_op_t *op, int n, const char *const *keys,
                         const char *const *vals, char *msg, size_t msglen);

/** The declaration of `key`, or NULL (also for ops that declare nothing). */
const mxop_attr_decl_t *mxop__attr_decl_find(const mxop__worker_op_t *op, const char *key);

/** "int", "float list" ...; NULL for an unknown type. */
const char *mxop__attr_type_name(int32_t type);

/* Strict parsers; on failure *why completes "attribute 'k' = 'v' ...". */
int mxop__attr_parse_int(const char *v, int64_t *out, const char **why);
int mxop__attr_parse_float(const char *v, double *out, const char **why);
int mxop__attr_parse_bool(const char *v, int *out, const char **why);
int mxop__attr_parse_list(const char *v, int floats, int64_t *iv, double *dv, int cap, int *n,
                          const char **why);

typedef struct mxop__worker_lib {
    void *handle; /* dlopen handle */
    char *path;   /* owned */
    char *name;   /* owned; as the client named it */
    uint32_t first_op;
    uint32_t n_ops;
    char fd_path[48]; /* "/proc/self/fd/N" it was loaded as, or "" (loaded by path) */
} mxop__worker_lib_t;

/** The op with index `i`, or NULL. */
const mxop__worker_op_t *mxop__op_get(uint32_t i);
uint32_t mxop__op_count(void);

/** Appends a copy of `op` (description taken).  Returns 0 or MXOP_ENOMEM/ELIMIT. */
int mxop__op_append(mxop__worker_op_t *op);

/** Drops every op from index `n` on (a failed load's ops). */
void mxop__op_truncate(uint32_t n);

const mxop__worker_lib_t *mxop__lib_get(uint32_t i);
uint32_t mxop__lib_count(void);

/** Whether the op is stateful (state_create set). */
static inline int mxop__op_stateful(const mxop__worker_op_t *op)
{
    return op->def.state_create != NULL;
}

/** Whether the op has a backward for its kind (stateless or stateful). */
static inline int mxop__op_has_backward(const mxop__worker_op_t *op)
{
    if (mxop__op_stateful(op))
        return op->def.state_backward != NULL || op->def.state_backward_gpu != NULL;
    return op->def.backward != NULL || op->def.backward_gpu != NULL;
}

/** The path the library whose loader name is `fname` was loaded for, or NULL (signal-safe). */
const char *mxop__lib_path_of(const char *fname);

/** The host's register_op (plugin_loader.c). */
int mxop__register_op(mxop_ctx_t *ctx, const mxop_op_def_t *def);

/* ------------------------------------------------------------------------ */
/* Regions (regions.c). */

typedef struct mxop__region {
    uint32_t id; /* 0: free slot */
    uint8_t *ro; /* read-only mapping (a device region: its device pointer) */
    uint8_t *rw; /* read-write mapping (a device region: the same pointer); NULL: read-only */
    size_t size;
    int cuda;       /* 1: a device region, opened through CUDA IPC (cuda.c) */
    int32_t device; /* a device region's CUDA ordinal */
    int scratch;    /* 1: the client's scratch region, writable in scratch mode too */
} mxop__region_t;

/** The region with id `id`, or NULL.  No syscalls. */
const mxop__region_t *mxop__region_find(uint32_t id);

/**
 * Maps `fd` (borrowed; the caller closes it) as region `id` of `size`
 * bytes.  Returns 0, MXOP_EINVAL (id 0, size 0, duplicate id), MXOP_ESHM,
 * MXOP_ENOMEM, with the reason in msg.
 */
int mxop__region_add(uint32_t id, uint64_t size, int fd, char *msg, size_t msglen);

/* Flags of mxop__region_add_flags (WorkerMap.read_only, WorkerMap.scratch). */
#define MXOP__MAP_READ_ONLY 1u /* map the read-only view only (fd is a read-only reopen) */
#define MXOP__MAP_SCRATCH 2u   /* the client's scratch region */

/**
 * mxop__region_add with MXOP__MAP_* flags, and `reserved_from`
 * (WorkerMap.reserved_from): the client may still be reserving the bytes
 * before it, so nothing of them is faulted in ahead of a call that writes
 * there (server/worker/prefill.h).  Clamped to `size`.
 */
int mxop__region_add_flags(uint32_t id, uint64_t size, int fd, unsigned flags,
                           uint64_t reserved_from, char *msg, size_t msglen);

/**
 * Scratch mode, for good (WorkerLoad.confine): unmaps the writable view of
 * every region but the scratch regions and device regions, and maps every
 * later region read-only only unless it is a scratch region.  Called
 * before an untrusted library is loaded.
 */
void mxop__regions_confine(void);

/** Unmaps region `id`.  Returns 0 or MXOP_EUNKNOWN_REGION. */
int mxop__region_remove(uint32_t id, char *msg, size_t msglen);

/* ------------------------------------------------------------------------ */
/* Op states (states.c). */

/** Sets the generation whose ids this worker hands out. */
void mxop__states_init(uint32_t generation);
/* The most states the worker holds at once (the session's quota). */
void mxop__states_set_max(uint32_t n);
/* 0 when one more state may be created, else MXOP_ELIMIT naming the limit in msg. */
int mxop__states_room(char *msg, size_t msglen);

/**
 * Keeps `state` of op `op` under a fresh id.  Returns 0 or MXOP_ELIMIT /
 * MXOP_ENOMEM (the caller then destroys the state).
 */
int mxop__state_add(uint32_t op, void *state, uint64_t *id);

/**
 * Finds state `id`: 0 with *op and *state set, MXOP_ESTATE_LOST (an id of
 * an earlier generation) or MXOP_EUNKNOWN_STATE, with the reason in msg.
 */
int mxop__state_find(uint64_t id, uint32_t *op, void **state, char *msg, size_t msglen);

/** Forgets state `id` (which must exist). */
void mxop__state_remove(uint64_t id);

/** Calls state_destroy for every live state (at exit). */
void mxop__states_destroy_all(void);

/* ------------------------------------------------------------------------ */
/* The status page (status.c) and the fault handler (fault.c). */

/** Remembers the mapped status page. */
void mxop__status_set(mxop__status_page_t *page);

/** Publishes a call in flight (seqlock); deadline_ms 0: none. */
void mxop__status_begin(uint64_t call_id, const char *op, uint32_t deadline_ms);

/** Marks the worker idle. */
void mxop__status_end(void);
/* Names the library callback about to run (for a timeout's message), "" after. */
void mxop__status_callback(const char *name);
/* Notes the call's inputs (dtype, rank, first dimensions) for a crash's log line. */
void mxop__status_inputs(int n, const mxop_tensor_t *t);

/** The status page, for the fault handler (NULL before start-up). */
mxop__status_page_t *mxop__status_page(void);

/** Installs the SIGSEGV/SIGBUS handler on an alternate stack.  Returns 0 or -errno. */
int mxop__fault_install(void);

/* SHA-256 of a file (mxop__sha256_fd) is common/sha256.h: the daemon names versions by it too. */
#include "common/sha256.h"

/**
 * Takes `fd`, the library the daemon opened (always closed): copies it into
 * a sealed memfd and, when `expect` (64 hex digits, from the daemon's
 * allowlist, listed at `where`) is not empty, checks the copy's SHA-256.
 * Gives the memfd in *fd_out (to be loaded as /proc/self/fd/N and kept
 * open while the library is).  Returns 0, MXOP_EDENIED (a digest mismatch
 * naming both digests), MXOP_ENOMEM or MXOP_ELIB_INVALID.
 */
int mxop__integrity_load_fd(int fd, const char *lname, const char *expect, const char *where,
                            int *fd_out, char *msg, size_t msglen);

/**
 * Leaves a note for the daemon in the status page (code and sentence), as
 * the fault handler does for a fault: the daemon reports it when the worker
 * dies.  Not async-signal-safe; for the main flow.
 */
void mxop__fault_note(int code, const char *msg);

/* The transport's descriptors (transport.c), by slot. */
enum {
    MXOP__TRANSPORT_SUP = 0,
    MXOP__TRANSPORT_DATA = 1,
    MXOP__TRANSPORT_BELL_RX = 2,
    MXOP__TRANSPORT_BELL_TX = 3,
    MXOP__TRANSPORT_SLOTS = 4,
};

/** Remembers what `fd` is (device, inode), as the transport descriptor `slot`. */
void mxop__transport_track(int slot, int fd, const char *what);

/** Forgets a slot (its descriptor was closed by the worker itself). */
void mxop__transport_untrack(int slot);

#define MXOP__TRANSPORT_BELLS ((1u << MXOP__TRANSPORT_BELL_RX) | (1u << MXOP__TRANSPORT_BELL_TX))
#define MXOP__TRANSPORT_ALL ((1u << MXOP__TRANSPORT_SLOTS) - 1)

/**
 * Ends the worker, with a note naming the descriptor, when one of the
 * tracked descriptors in `mask` (bits 1 << slot) was closed or replaced.
 * `after` completes "the worker's transport was broken ..." (e.g. "by
 * the call just served").
 */
void mxop__transport_check(unsigned mask, const char *after);

/**
 * Kills and reaps every process descended from the worker (children.c):
 * the worker must be its children's subreaper.  Returns how many were
 * killed, the first one's pid in *first (0 when none).
 */
int mxop__children_sweep(pid_t *first);

/* One read-only input of the call in flight, for the fault handler. */
typedef struct mxop__fault_range {
    uintptr_t tensor; /* the tensor's bytes in the read-only mapping */
    size_t tensor_len;
    uintptr_t region; /* the whole read-only mapping of its region */
    size_t region_len;
    int input; /* the input's index in the call */
} mxop__fault_range_t;

/**
 * Arms the handler for a call of `op` (name borrowed) with `n` read-only
 * inputs (borrowed; the array must stay until mxop__fault_disarm).
 */
void mxop__fault_arm(const char *op, int n, const mxop__fault_range_t *ranges);
void mxop__fault_disarm(void);

/* ------------------------------------------------------------------------ */
/* Request handlers. */

/**
 * Serves one supervisor request, filling `reply` (whose strings and ops
 * point into worker storage valid until the next request).  `fds` are the
 * descriptors that came with the frame (taken: closed here).
 */
void mxop__sup_handle(const Mxop__SupRequest *req, int *fds, int nfds, Mxop__SupReply *reply);

/** Frees what the last mxop__sup_handle reply pointed to. */
void mxop__sup_reply_done(Mxop__SupReply *reply);

/**
 * Serves one call, filling `res` (storage valid until the next call).  A
 * NUL inside an attribute is refused first (mxop__call_attrs_read).
 */
void mxop__run_call(const Mxop__Call *call, Mxop__CallResult *res);

/* ------------------------------------------------------------------------ */
/* The data channel: socket and shared-memory mailbox (datachan.c). */

/* mxop__data_serve's answer when the supervisor channel has something. */
#define MXOP__W_SUP_READY 1

struct mxop__pbarena;

/**
 * Sets up the data channel on `data` (the supervisor channel `sup` is
 * polled with it); calls are unpacked into `arena` (borrowed).  Returns 0
 * or MXOP_ENOMEM.
 */
int mxop__data_init(int sup, int data, struct mxop__pbarena *arena);

/**
 * Serves calls (socket and mailbox) until the supervisor channel is
 * readable: returns MXOP__W_SUP_READY, or MXOP_EIO when waiting failed.
 */
int mxop__data_serve(void);

/** Frees the data channel's buffers and mailbox (at exit). */
void mxop__data_free(void);

/* ------------------------------------------------------------------------ */
/* Call checks (checks.c).  Each returns 0 or a code with the reason in msg. */

/**
 * Checks descriptor `d` (`role` "input"/"output" number `index`) of a call
 * of `op` and fills `t` with its pointer into the read-only or (writable)
 * read-write mapping of its region, *reg with the region.
 * MXOP_EUNKNOWN_REGION, MXOP_EDTYPE, MXOP_EINVAL, MXOP_EBOUNDS.
 */
int mxop__check_desc(const Mxop__TensorDesc *d, const char *role, int index,
                     const mxop__worker_op_t *op, int writable, mxop_tensor_t *t,
                     const mxop__region_t **reg, char *msg, size_t msglen);

/** Checks a (dtype, shape) pair of Infer / StateCreate input `index`. */
int mxop__check_shape(int32_t dtype, const Mxop__Shape *s, int index, mxop_shape_t *out, char *msg,
                      size_t msglen);

/** "[2,3]" into buf. */
void mxop__fmt_shape(char *buf, size_t len, const mxop_shape_t *s);

/** "f32", "f64", ...; "dtype N" for others (into buf). */
const char *mxop__dtype_name(int32_t dtype, char *buf, size_t len);

/** Whether `code` is one of the negative MXOP_E* codes. */
int mxop__is_known_error(int code);

/* ------------------------------------------------------------------------ */
/* call_attrs.c */

/**
 * The attributes of `call` (an Invoke, Infer or StateCreate; others have
 * none) into *out, from the decoded message, before any other check of
 * the call.  Returns 0, or MXOP_EATTR with msg[msglen] naming the op and
 * the attribute when a key or value holds a NUL byte (which a C string
 * would cut off silently).
 */
int mxop__call_attrs_read(const Mxop__Call *call, mxop__call_attrs_t *out, char *msg,
                          size_t msglen);

#endif /* MXOP_SERVER_WORKER_WORKER_H */
