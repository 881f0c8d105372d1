/*
 * mxop/client.h - the engine's API (libmxop).
 *
 * A client is one session with mxop-serverd: one control connection to the
 * daemon, one worker process the daemon spawned for it, and a direct data
 * channel to that worker.  Ops run in the worker; tensors live in shared
 * memory regions mapped by both sides and travel as (region, offset, dtype,
 * shape), never as bytes.
 *
 * Threads: every function on one client takes that client's lock, so a
 * client may be shared between threads; its calls then run one at a time,
 * unless the client has a pool of sessions (mxop_connect_opts_t.
 * max_sessions > 1): then a forward or backward made while another
 * thread's call holds the client goes to a sibling session of the pool
 * (opened on first need, with its own worker, the client's libraries and
 * its regions), so that several calls are in flight at once.
 *
 * Errors: every function returns 0 or a negative MXOP_E* code
 * (mxop_strerror names it); mxop_last_error() gives the detail of the last
 * failure on that client ("op 'segv' (crash.so): worker killed by SIGSEGV").
 * No call blocks forever: each returns within its deadline plus a grace
 * period of 5 s, whatever the worker does (hangs, stops, dies, forges what
 * it shares with the daemon) and across a restart of the worker: the
 * deadline covers the whole call, and the daemon kills a worker whose call
 * overruns it, then replaces it.  A dead daemon or worker is noticed and
 * reported.
 *
 * Includes only <stddef.h> and <stdint.h> (through types.h).
 */
#ifndef MXOP_CLIENT_H
#define MXOP_CLIENT_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The library's version. */
#define MXOP_VERSION_MAJOR 0
#define MXOP_VERSION_MINOR 1
#define MXOP_VERSION_PATCH 0
#define MXOP_VERSION_STRING "0.1.0"

/** The wire protocol versions this client speaks. */
#define MXOP_PROTOCOL_VERSION 1

/**
 * Region id meaning "data is a plain pointer": the call finds the region it
 * lies in (memory the client maps) or stages it through the arena.
 */
#define MXOP_REGION_HEAP 0u

typedef struct mxop_client mxop_client_t;

/** An op of a loaded library.  Borrowed from the client; valid until mxop_close. */
typedef struct mxop_op mxop_op_t;

/** The name of an error code ("MXOP_ETIMEOUT"), or "MXOP_E?" if unknown. */
const char *mxop_err_name(int code);

/** A fixed message for an error code; never NULL. */
const char *mxop_strerror(int code);

/**
 * The code of an error's name: "MXOP_EINVAL" or "INVAL" give MXOP_EINVAL
 * (-1001); an unknown name or NULL gives 0.  The inverse of mxop_err_name,
 * so that bindings take the numbers from here instead of a table of their own.
 */
int mxop_err_code(const char *name);

/**
 * The dtype named `name` (borrowed): its short name ("f32", "bf16") or its
 * framework name ("float32", "bfloat16": NumPy's dtype.name, PyTorch's
 * str(dtype) less "torch.").  Returns the code (enum mxop_dtype), or
 * MXOP_EINVAL for NULL or a name of no dtype.
 */
int32_t mxop_dtype_from_name(const char *name);

/**
 * What libmxop knows of dtype `code`: its short name, its framework name
 * (static strings) and its element size in bytes.  Any out-pointer may be
 * NULL.  Returns 0, or MXOP_EINVAL for a code of no dtype (the out-pointers
 * are then left alone).  Codes run from 0 to MXOP_DTYPE_COUNT - 1, so a
 * binding builds its maps by asking for each at load time.
 */
int mxop_dtype_info(int32_t code, const char **short_name, const char **framework_name,
                    size_t *size);

/**
 * How calls and results travel between the client and its worker.  The
 * socket path is always there; the shared-memory path adds a mailbox per
 * session (a small memfd both map) and keeps the socket for large frames
 * and for noticing a dead worker.  Both give the same results and errors.
 */
enum mxop_data_path {
    MXOP_DATA_PATH_DEFAULT = 0, /* $MXOP_DATA_PATH ("socket" or "shm") if set, else shm */
    MXOP_DATA_PATH_SOCKET = 1,  /* every call on the Unix socket */
    MXOP_DATA_PATH_SHM = 2,     /* calls in shared memory, spin then sleep on a bell */
};

/** Options for mxop_connect.  Zero-initialise, then set struct_size. */
typedef struct mxop_connect_opts {
    uint32_t struct_size;
    int32_t timeout_ms;         /* default deadline of a call; 0: 30000 */
    int32_t connect_timeout_ms; /* hello and session set-up; 0: 10000 */
    const char *client_name;    /* borrowed; shown in the daemon's log */
    /* Appended later: read only when struct_size covers it. */
    int32_t data_path; /* enum mxop_data_path */
    /*
     * Sessions this client may use at once; 0 or 1: one, as
     * before.  With N > 1, up to N - 1 sibling sessions are opened on
     * demand, each when a forward or backward finds every session busy
     * with another thread's call; a sibling loads the client's libraries
     * and registers its regions (arena, staging and user regions, from
     * their descriptors) before it runs a call.  Calls with an op state,
     * with strides or on device regions stay on the client's own session.
     * mxop_last_error gives a failed sibling call's detail in the thread
     * that made it; mxop_stats counts the siblings' calls and errors.
     */
    int32_t max_sessions;
    /*
     * What the client does when its daemon goes away (stopped after a
     * hand-over to a new daemon, restarted by its service manager): with
     * MXOP_RECONNECT_ON it connects again to the same socket path (retrying
     * with backoff for up to timeout_ms), opens a session, reloads the
     * libraries it had loaded and registers its regions again; op handles
     * and region ids stay valid.  A call cut short by the daemon going away
     * runs again when nothing of it can have stuck (no state, no mutated
     * input, no accumulated or in-place output), else fails once with
     * MXOP_EDISCONNECTED saying the client reconnected; op states answer
     * MXOP_ESTATE_LOST until created again.  MXOP_RECONNECT_DEFAULT (0): on,
     * unless the environment variable MXOP_RECONNECT is 0 (or off/no).
     * MXOP_RECONNECT_OFF: every call after the daemon went away returns
     * MXOP_EDISCONNECTED.
     */
    int32_t reconnect;
} mxop_connect_opts_t;

/* mxop_connect_opts_t.reconnect */
enum mxop_reconnect {
    MXOP_RECONNECT_DEFAULT = 0,
    MXOP_RECONNECT_ON = 1,
    MXOP_RECONNECT_OFF = 2,
};

/**
 * Connects to the daemon at `socket_path` (borrowed), or at $MXOP_SOCKET
 * when it is NULL, negotiates the protocol and opens a session (the daemon
 * spawns its worker).  `opts` may be NULL.  On success *out is a client to
 * be freed with mxop_close().
 *
 * Returns MXOP_EINVAL (no path and no $MXOP_SOCKET), MXOP_EDISCONNECTED (no
 * daemon listening), MXOP_EDENIED (peer credentials refused), MXOP_EVERSION,
 * MXOP_ETIMEOUT.  On failure *out is NULL; mxop_connect_error() has detail.
 */
int mxop_connect(const char *socket_path, const mxop_connect_opts_t *opts, mxop_client_t **out);

/** The detail of the last failed mxop_connect in this thread. */
const char *mxop_connect_error(void);

/**
 * Ends the session (worker, regions, states) and frees the client and every
 * array and op handle it gave out.  Accepts NULL.
 */
void mxop_close(mxop_client_t *c);

/**
 * The data path the session's calls take: MXOP_DATA_PATH_SHM while its
 * worker has a mailbox (or gets a fresh one at the next call, after a
 * restart), MXOP_DATA_PATH_SOCKET otherwise (chosen, or the mailbox could
 * not be set up).  MXOP_EINVAL for NULL.
 */
int mxop_data_path(mxop_client_t *c);

/** Detail of the last failed call on `c`; "" if none.  Valid until the next call. */
const char *mxop_last_error(const mxop_client_t *c);

/** Sets the client's default call deadline in milliseconds (> 0). */
int mxop_set_timeout(mxop_client_t *c, int32_t timeout_ms);

/* ------------------------------------------------------------------------
 * Libraries and ops
 * ------------------------------------------------------------------------ */

/**
 * Loads the library `name` (borrowed), a path relative to the daemon's
 * plugin directory (e.g. "relu.so"), into this session's worker.  Its ops
 * become visible to mxop_op_find.  Loading the same library twice is a no-op.
 *
 * Returns MXOP_ELIB_NOT_FOUND, MXOP_ELIB_OUTSIDE (resolves outside the plugin
 * directory), MXOP_EABI, MXOP_ELIB_INVALID (not a library, no entry point),
 * MXOP_ELIB_INIT, MXOP_EDUPLICATE (an op name already loaded),
 * MXOP_EWORKER_CRASHED (the library crashed its worker while loading),
 * MXOP_EQUARANTINED (it crashed workers while loading too often and is now
 * refused by this daemon until the file changes).
 */
int mxop_load_library(mxop_client_t *c, const char *name);

/** Finds a loaded op by name.  MXOP_EUNKNOWN_OP if there is none. */
int mxop_op_find(mxop_client_t *c, const char *name, const mxop_op_t **op);

/** Number of loaded ops, and the i-th of them (NULL when out of range). */
int mxop_op_count(mxop_client_t *c);
const mxop_op_t *mxop_op_at(mxop_client_t *c, int i);

/** An op's signature, as its library registered it.  Strings borrowed from the client. */
typedef struct mxop_op_info {
    const char *name;
    const char *description;
    const char *library;
    int32_t num_inputs; /* -1: variadic, at least min_inputs */
    int32_t min_inputs;
    int32_t num_outputs;
    uint64_t mutated_inputs;
    int has_backward;
    int stateful;
} mxop_op_info_t;

/** Fills *info for `op`. */
int mxop_op_info(const mxop_op_t *op, mxop_op_info_t *info);

/**
 * mxop_op_info_t with struct_size, so that it can grow, and what was added
 * since: zero-initialise, set struct_size = sizeof(mxop_op_info_v2_t), call
 * mxop_op_info_v2; members beyond the caller's struct_size are not written.
 */
typedef struct mxop_op_info_v2 {
    uint32_t struct_size;
    int32_t num_inputs; /* -1: variadic, at least min_inputs */
    int32_t min_inputs;
    int32_t num_outputs;
    const char *name;
    const char *description;
    const char *library;
    uint64_t mutated_inputs;
    int32_t has_backward;
    int32_t stateful;
    uint32_t flags;           /* enum mxop_op_flags */
    int32_t num_attrs;        /* declared attributes: mxop_op_attr */
    uint64_t dynamic_outputs; /* see mxop_op_dynamic_outputs */
} mxop_op_info_v2_t;

int mxop_op_info_v2(const mxop_op_t *op, mxop_op_info_v2_t *info);

/**
 * One attribute an op declares (mxop_attr_decl_t in op.h), for building
 * keyword signatures.  Zero-initialise, set struct_size, then call
 * mxop_op_attr; members beyond the caller's struct_size are not written.
 * Strings are borrowed from the client, valid until mxop_close or until a
 * reload of the op's library replaces the declarations.
 */
typedef struct mxop_attr_info {
    uint32_t struct_size;
    int32_t type; /* enum mxop_attr_type (types.h) */
    const char *name;
    int32_t required;          /* nonzero: every call must give it */
    const char *default_value; /* NULL when there is none */
    const char *doc;           /* "" when the op gave none */
} mxop_attr_info_t;

/** The op's flags (enum mxop_op_flags in types.h, e.g. MXOP_OP_STRIDED). */
uint32_t mxop_op_flags(const mxop_op_t *op);

/**
 * Outputs of `op` whose shape is known only after forward (bit j: output
 * j).  Allocate such an output with the shape mxop_infer gives (its
 * largest); mxop_forward then sets its ndim, shape and nbytes to the real
 * ones (the data stays where it was, at the start of the allocation).
 */
uint64_t mxop_op_dynamic_outputs(const mxop_op_t *op);

/** How many attributes `op` declares (0: it declares none, any pass). */
int mxop_op_attr_count(const mxop_op_t *op);

/** Fills *info with the i-th declared attribute; MXOP_EINVAL when out of range. */
int mxop_op_attr(const mxop_op_t *op, int i, mxop_attr_info_t *info);

/* ------------------------------------------------------------------------
 * Shared memory
 * ------------------------------------------------------------------------ */

/**
 * An n-d array as the engine sees it.  For arrays from mxop_array_alloc or
 * mxop_array_view, `data` points into a shared region (region != 0).  An
 * array the caller fills in by hand with region = MXOP_REGION_HEAP needs no
 * region id: when its bytes lie wholly inside memory the client maps itself
 * (its arena, a region of mxop_region_create, of mxop_region_register_fd
 * with a base, of mxop_region_register_fd_at, or a shared-heap block) the
 * call passes it by reference as (that region, offset), and outputs are
 * written in place; when they lie in ordinary memory it is staged: copied
 * into the arena before the call and, for outputs, back after it (counted
 * in the stats).  Contiguous row-major unless the call gives strides.
 */
typedef struct mxop_array {
    void *data;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[MXOP_MAX_DIMS];
    uint32_t region;
    uint64_t offset; /* bytes from the start of the region */
    size_t nbytes;
    int32_t req; /* as an output: enum mxop_req (default 0, write) */
} mxop_array_t;

/**
 * Allocates an array in the client's arena (shared memory, 64-byte
 * aligned, zero-filled on first use of its pages).  Free with mxop_array_free.
 * While mxop_shared_outputs is on, an array of at least
 * mxop_shared_min_bytes() comes from the shared heap instead (a block of
 * mxop_shared_alloc_output for c: region MXOP_REGION_HEAP, `data` at the
 * block's start; its bytes are what the block's last user left), and from
 * the arena when no block can be had.
 * Returns MXOP_EINVAL (bad dtype/shape), MXOP_ESHM (no shared memory left).
 */
int mxop_array_alloc(mxop_client_t *c, int32_t dtype, int32_t ndim, const int64_t *shape,
                     mxop_array_t *out);

/**
 * Frees an array of mxop_array_alloc (of either kind) and zeroes *a.
 * Accepts an array with data NULL.  An array from the shared heap needs no
 * session: c may be NULL or already closed for it (it is freed with
 * mxop_shared_free); an arena array needs its live client.  An array the
 * caller made by hand must not be passed: a heap array whose data is a
 * shared-heap block's start would free that block.
 */
void mxop_array_free(mxop_client_t *c, mxop_array_t *a);

/**
 * Creates a region of `bytes` in a new memfd, maps it here and registers it
 * with the session.  *region gets its id and *base its mapping (owned by the
 * client until mxop_region_release).
 */
int mxop_region_create(mxop_client_t *c, size_t bytes, uint32_t *region, void **base);

/**
 * Registers memory the engine already shares: `fd` (borrowed; duplicated)
 * must map at least `bytes` (a memfd or a /dev/shm file).  If base is not
 * NULL it gets a read-write mapping made here (freed at release).
 * Returns MXOP_EINVAL when the fd is smaller than `bytes` or not mappable.
 */
int mxop_region_register_fd(mxop_client_t *c, int fd, size_t bytes, uint32_t *region, void **base);

/**
 * As mxop_region_register_fd, for memory this process maps already:
 * `base` (borrowed) is where it maps the first `bytes` bytes of `fd`
 * (borrowed; duplicated when kept), read-write and MAP_SHARED.  libmxop
 * neither maps nor unmaps `base`; heap arrays whose bytes lie in
 * [base, base + bytes) then go to calls by reference (mxop_array_t).
 * Release the region (mxop_region_release) before unmapping `base` or
 * closing what maps it: until then a call may read and write there.
 * Returns MXOP_EINVAL (base or region NULL, bytes 0, an fd smaller than
 * bytes or not mappable, or a range that overlaps a region of c already).
 */
int mxop_region_register_fd_at(mxop_client_t *c, int fd, size_t bytes, void *base,
                               uint32_t *region);

/** Unregisters a region (the worker unmaps it).  MXOP_EUNKNOWN_REGION if unknown. */
int mxop_region_release(mxop_client_t *c, uint32_t region);

/**
 * Marks a region (read_only 1) as memory no call may write, or clears the
 * mark (0): from then on a call that passes an array of the region as an
 * output (other than req null) or as an input its op declares mutated is
 * refused before anything is sent, with MXOP_EREAD_ONLY naming the
 * argument and the region.  A guard against the engine's own mistakes
 * (model weights passed as an output); what an op library can write is
 * confined separately (docs/security.md).  Returns 0, MXOP_EUNKNOWN_REGION.
 */
int mxop_region_set_read_only(mxop_client_t *c, uint32_t region, int read_only);

/**
 * Whether [p, p + n) (n 0: the byte at p) lies wholly inside one region of
 * c that this process maps: an arena chunk, a region of
 * mxop_region_create, of mxop_region_register_fd with a base, of
 * mxop_region_register_fd_at, or a live shared-heap block once a call has
 * registered it with c (this does not register one).  Returns 1 with
 * *region and *offset (p's offset in it; either pointer may be NULL), 0
 * when not, MXOP_EINVAL for c or p NULL or a range past the address space.
 * Any thread; it does not wait for another thread's call.
 */
int mxop_region_lookup(mxop_client_t *c, const void *p, size_t n, uint32_t *region,
                       uint64_t *offset);

/*
 * GPU memory: device regions.
 *
 * A device region is one CUDA allocation of the engine (cudaMalloc, or a
 * caching allocator's block), shared with the session's worker through
 * CUDA IPC: the worker opens it once and ops read and write it in place,
 * with no copy.  Tensors in it are the usual (region, offset, dtype,
 * shape) arrays; mxop_array_view describes them (its `data` is then the
 * device pointer).  A call's tensors must all be in host memory or all on
 * one device; on a device the op's forward_gpu / backward_gpu run.
 *
 * Ordering (the engine's part): before mxop_forward / mxop_backward, the
 * engine synchronises the stream(s) whose work produces the inputs or
 * still uses the outputs (cudaStreamSynchronize; in PyTorch
 * torch.cuda.current_stream().synchronize()).  The worker runs the op on
 * a stream of its own and synchronises it before answering, so when the
 * call returns the outputs are complete and any stream may read them.
 *
 * Lifetime: release a device region before its memory is freed (cudaFree,
 * or a caching allocator emptying its cache): the worker holds it open,
 * and CUDA leaves freeing it while open undefined.  After a worker
 * restart the daemon gives the new worker the same handles.  The worker
 * numbers devices as the engine does, so both must see the same devices
 * (the same CUDA_VISIBLE_DEVICES).
 */

/**
 * Registers the CUDA allocation that contains `dev_ptr` (borrowed) as a
 * device region, or finds it registered already: any pointer of an
 * allocation gives the same region, so an engine may call this for every
 * tensor.  [dev_ptr, dev_ptr + bytes) must lie inside the allocation.
 * *region gets the region and *offset dev_ptr's offset in it, ready for
 * mxop_array_view.  Loads the CUDA driver (libcuda.so.1) at the first call;
 * libmxop itself links no CUDA library.
 *
 * Returns MXOP_ENO_DEVICE (no CUDA driver or device here, or none the
 * worker can use: the message says which), MXOP_EINVAL (dev_ptr is not
 * device memory, or is managed memory), MXOP_EBOUNDS (bytes run past the
 * allocation), MXOP_ECUDA (the allocation cannot be exported, or the
 * worker cannot open it: the CUDA error in the message).
 */
int mxop_region_register_cuda(mxop_client_t *c, const void *dev_ptr, size_t bytes, uint32_t *region,
                              uint64_t *offset);

/**
 * Registers a device region from a CUDA IPC handle the engine already has:
 * `handle` (borrowed, `handle_len` = 64 bytes: a cudaIpcMemHandle_t, as
 * cudaIpcGetMemHandle or PyTorch's storage._share_cuda_() give) of an
 * allocation of `bytes` on CUDA device `device`.  No CUDA call is made
 * here; the worker opens the handle.  The same handle and device again
 * give the same region.  Returns MXOP_EINVAL (a handle of another length,
 * device < 0, bytes 0), and the worker's MXOP_ENO_DEVICE / MXOP_ECUDA.
 */
int mxop_region_register_cuda_ipc(mxop_client_t *c, const void *handle, size_t handle_len,
                                  int32_t device, size_t bytes, uint32_t *region);

/**
 * Describes memory inside a registered region as an array, without
 * allocating: `offset` bytes into `region`.  Checked against the region's
 * size here (MXOP_EBOUNDS) and again in the worker.
 */
int mxop_array_view(mxop_client_t *c, uint32_t region, uint64_t offset, int32_t dtype, int32_t ndim,
                    const int64_t *shape, mxop_array_t *out);

/*
 * The shared heap: memory for a framework's allocator (PyTorch's CPU
 * allocator, NumPy's data handler) in mxop shared memory, so that the
 * tensors an engine already has go to calls by reference.  An array with
 * region MXOP_REGION_HEAP whose bytes lie in one live block is not staged:
 * the block is registered with the session at its first call there (one
 * region per block and session) and the worker reads and writes it in
 * place.  A worker sees only the blocks its session's calls passed; a
 * freed block that a worker has seen is never handed to
 * mxop_shared_alloc again (docs/security.md, "The shared heap").
 * A forked child keeps its blocks as private copies (its stores never
 * reach the parent), and its new blocks are its own.
 */

/**
 * Memory for a framework's allocator in mxop shared memory: one memfd
 * block per allocation (rounded to a size class), cached when freed.
 * Process-wide, thread-safe, usable before any connection.  NULL with
 * errno set when no block can be made (EINVAL for 0 bytes, EMFILE, ENOMEM:
 * callers fall back to malloc).  Page-aligned; free with mxop_shared_free.
 */
void *mxop_shared_alloc(size_t bytes);

/**
 * Frees a block of mxop_shared_alloc / mxop_shared_alloc_output; p NULL is
 * a no-op.  Returns 0, or MXOP_EINVAL for a pointer that is no block start
 * (nothing freed).  Any thread; it never waits for the daemon.
 */
int mxop_shared_free(void *p);

/** 1 when [p, p+n) lies inside one live block, else 0. */
int mxop_shared_contains(const void *p, size_t n);

/**
 * An output's memory for a call of session c: prefers a freed block that
 * is still registered with c alone (warm: its pages faulted in here and in
 * the worker, no registration), else as mxop_shared_alloc.
 */
void *mxop_shared_alloc_output(mxop_client_t *c, size_t bytes);

/**
 * Smallest allocation the hooks should send here (bytes; default 64 KiB,
 * env MXOP_ALLOCATOR_MIN_KB); smaller ones stay on the ordinary heap,
 * where staging them costs less than a region.
 */
size_t mxop_shared_min_bytes(void);

/**
 * Process-wide: whether mxop_array_alloc gives arrays of at least
 * mxop_shared_min_bytes() from the shared heap (on: nonzero), so that an
 * engine's outputs become its framework's tensors in warm blocks, or from
 * the client's arena (0, the default).  Atomic; any thread.  Arrays of
 * either kind free correctly with mxop_array_free whatever the setting is
 * then.  Returns the previous setting (1 or 0).
 */
int mxop_shared_outputs(int on);

/** The shared heap's counters (process-wide). */
typedef struct mxop_shared_stats {
    uint64_t blocks_live, bytes_live; /* handed out now */
    uint64_t blocks_cached,
        bytes_cached;       /* freed and kept for reuse (cap: MXOP_ALLOCATOR_CACHE_MB) */
    uint64_t registrations; /* blocks registered with a session, ever */
    uint64_t revocations;   /* registrations of freed blocks released, ever */
    uint64_t reused_warm;   /* mxop_shared_alloc_output answered by a warm block */
} mxop_shared_stats_t;

/** Fills *st (st NULL: nothing). */
void mxop_shared_stats(mxop_shared_stats_t *st);

/**
 * mxop_shared_stats_t with struct_size, so that it can grow, and what was
 * added since: zero-initialise, set struct_size =
 * sizeof(mxop_shared_stats_v2_t), call mxop_shared_stats_v2; members
 * beyond the caller's struct_size are not written.  Returns 0, or
 * MXOP_EINVAL for st NULL or a struct_size that holds no member.
 */
typedef struct mxop_shared_stats_v2 {
    uint32_t struct_size;
    uint64_t blocks_live, bytes_live;     /* handed out now */
    uint64_t blocks_cached, bytes_cached; /* freed and kept for reuse */
    uint64_t registrations;               /* blocks registered with a session, ever */
    uint64_t revocations;                 /* registrations of freed blocks released, ever */
    uint64_t reused_warm;                 /* mxop_shared_alloc_output answered by a warm block */
    uint64_t outputs; /* arrays mxop_array_alloc gave from the heap (mxop_shared_outputs), ever */
} mxop_shared_stats_v2_t;

int mxop_shared_stats_v2(mxop_shared_stats_v2_t *st);

/* ------------------------------------------------------------------------
 * Calls
 * ------------------------------------------------------------------------ */

/** Per-call options.  Zero-initialise, set struct_size; NULL means defaults. */
typedef struct mxop_call {
    uint32_t struct_size;
    const char *const *attrs; /* borrowed; NULL or {"key", "value", ..., NULL} */
    uint64_t state;           /* for stateful ops: from mxop_state_create */
    int32_t timeout_ms;       /* 0: the client's default */
    uint64_t seed;            /* 0: the session's random sequence */

    /*
     * Appended after the first release (struct_size tells): strides, in elements, of the call's
     * arrays. NULL, or one pointer per array: NULL (contiguous row-major) or `ndim` strides
     * (negative ones allowed).  An op with MXOP_OP_STRIDED (mxop_op_flags) receives a shared-memory
     * array's non-negative strides as they are; for any other op, and for heap arrays, the client
     * copies a non-contiguous array into contiguous staging memory for the call (and, for outputs
     * and mutated inputs, back after it), counted in mxop_stats_t.staged_bytes.
     */
    const int64_t *const *in_strides;
    const int64_t *const *out_strides;
} mxop_call_t;

/**
 * Runs `op` forward: outputs computed from inputs, in the worker.
 * Both arrays are borrowed; outputs must already have the shapes and dtypes
 * the op infers (mxop_infer tells them).
 *
 * Returns MXOP_EARITY, MXOP_ESHAPE, MXOP_EDTYPE, MXOP_EATTR, MXOP_EBOUNDS,
 * MXOP_EUNKNOWN_REGION, MXOP_EOP_FAILED (the op's own error, message kept),
 * MXOP_EWORKER_CRASHED (the worker died: it has been restarted, the next
 * call runs on the new one), MXOP_ETIMEOUT (deadline passed: the worker was
 * killed and restarted), MXOP_ESTATE_LOST, MXOP_EDISCONNECTED.
 */
int mxop_forward(mxop_client_t *c, const mxop_op_t *op, const mxop_call_t *call,
                 const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out);

/**
 * Runs `op` backward.  in = [output gradients, forward inputs, forward
 * outputs], out = input gradients (each with its req: write or add).
 * MXOP_ENOT_SUPPORTED if the op has no backward.
 */
int mxop_backward(mxop_client_t *c, const mxop_op_t *op, const mxop_call_t *call,
                  const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out);

/**
 * Shape and type inference: from the inputs' dtypes and shapes (borrowed),
 * fills out_dtypes[n_out] and out_shapes[n_out] (caller-owned).  `n_out`
 * must equal the op's number of outputs.  `attrs` as in mxop_call_t.
 */
int mxop_infer(mxop_client_t *c, const mxop_op_t *op, const char *const *attrs, int n_in,
               const int32_t *in_dtypes, const mxop_shape_t *in_shapes, int n_out,
               int32_t *out_dtypes, mxop_shape_t *out_shapes);

/**
 * Creates an instance of a stateful op for inputs of these dtypes and shapes.
 * *state gets its id; pass it in mxop_call_t.state.  After a worker crash
 * the instance is gone: calls with it return MXOP_ESTATE_LOST until a new
 * one is created.  MXOP_ENOT_SUPPORTED if the op is not stateful.
 */
int mxop_state_create(mxop_client_t *c, const mxop_op_t *op, const char *const *attrs, int n_in,
                      const int32_t *in_dtypes, const mxop_shape_t *in_shapes, uint64_t *state);

/** Destroys an op instance (the op's state_destroy runs in the worker). */
int mxop_state_destroy(mxop_client_t *c, uint64_t state);

/* ------------------------------------------------------------------------
 * Statistics and administration
 * ------------------------------------------------------------------------ */

/** Counters of one client. */
typedef struct mxop_stats {
    uint64_t calls;           /* forward + backward calls sent */
    uint64_t errors;          /* calls that returned an error */
    uint64_t worker_restarts; /* workers of this session that died and were replaced */
    uint64_t staged_bytes;    /* bytes copied to and from heap arrays */
    uint64_t regions;         /* regions registered now */
    uint64_t region_bytes;    /* their total size */
    uint32_t worker_pid;      /* the current worker's pid */
    uint32_t daemon_sessions; /* sessions the daemon serves now */
} mxop_stats_t;

/** Fills *st (asks the daemon for its part). */
int mxop_stats(mxop_client_t *c, mxop_stats_t *st);

/**
 * mxop_stats_t with struct_size, so that it can grow: zero-initialise, set
 * struct_size = sizeof(mxop_stats_v2_t), call mxop_stats_v2; members beyond
 * the caller's struct_size are not written.  New members are appended here
 * only; mxop_stats_t stays as it is for the callers built against it.
 */
typedef struct mxop_stats_v2 {
    uint32_t struct_size;
    uint32_t worker_pid;      /* the current worker's pid */
    uint32_t daemon_sessions; /* sessions the daemon serves now */
    uint64_t calls;           /* forward + backward calls sent */
    uint64_t errors;          /* calls that returned an error */
    uint64_t worker_restarts; /* workers of this session that died and were replaced */
    uint64_t staged_bytes;    /* bytes copied to and from heap arrays (and strided gathers) */
    uint64_t regions;         /* regions registered now */
    uint64_t region_bytes;    /* their total size */
    /* Memory integrity (docs/security.md, "The engine's memory"). */
    uint64_t scratch_bytes; /* bytes copied through the scratch region in scratch mode */
    uint32_t confined;      /* 1: the session is in scratch mode (an untrusted library loaded) */
} mxop_stats_v2_t;

int mxop_stats_v2(mxop_client_t *c, mxop_stats_v2_t *st);

/** Asks the daemon to shut down (allowed for its own user).  The client is then unusable. */
int mxop_shutdown_daemon(mxop_client_t *c);

/**
 * Names, for the calling thread, a slot where each of its forward and
 * backward calls publishes the pid of the worker running it (on the
 * client's own session or on a sibling of its pool) while it is in flight,
 * and 0 otherwise; NULL stops.  Another thread may read it (an aligned
 * 32-bit value, stored atomically) to abandon the call by killing that
 * worker: the call returns MXOP_EWORKER_CRASHED and the session gets a
 * new worker.  The slot must outlive the thread's calls.
 */
void mxop_set_inflight_slot(int32_t *slot);

#ifdef __cplusplus
}
#endif

#endif /* MXOP_CLIENT_H */
