/*
 * mxnet_proxy/proxy.h - libmxop_mxnet.so, the proxy extension library:
 * MXNet loads it with mx.library.load, and every op of the mxop libraries
 * it is configured with becomes an MXNet op whose calls run in mxop's
 * sandboxed worker.
 *
 * The parts, each calling only the ones after it: entry.c (the C entry
 * points MXNet looks up by name), ops.c (the op table and each op callback
 * translated into libmxop calls), shared.c (MXNet's cpu_shared arrays as
 * regions), daemon.c (configuration, the daemon: $MXOP_SOCKET's or a
 * private one, the client and its lock), msgs.c (the per-thread messages
 * MXNet reads back after a failed callback), seed.cc (a seed drawn from
 * MXNet's random states).
 */
#ifndef MXOP_MXNET_PROXY_PROXY_H
#define MXOP_MXNET_PROXY_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "mxnet_proxy/abi.h"
#include "mxop/client.h"

/* The callbacks each op hands MXNet: one byte of its record per kind, the byte's address the
 * callback. */
enum mxop__px_kind {
    MXOP__PX_PARSE,
    MXOP__PX_TYPE,
    MXOP__PX_STYPE,
    MXOP__PX_SHAPE,
    MXOP__PX_MUTATE,
    MXOP__PX_FWD,
    MXOP__PX_BWD,
    MXOP__PX_CREATE,
    MXOP__PX_KINDS
};

/* One mxop op as MXNet sees it. */
typedef struct mxop__px_op {
    const mxop_op_t *op; /* the client's (stays valid across worker restarts) */
    char name[128];      /* the MXNet name: $MXOP_MXNET_PREFIX + the mxop name */
    const char *library;
    int num_in; /* -1: variadic (the "num_args" attribute, else min_in) */
    int min_in;
    int num_out;
    uint64_t mutated;
    int has_backward;
    int stateful;
    mxop__px_fn fwd[1], bwd[1], create[1]; /* the arrays _opRegGet hands out */
    char tag[MXOP__PX_KINDS];
    /* Inference is split in MXNet and whole in mxop: each half keeps the other's last answer. */
    int cache_n;
    int32_t cache_dtypes[MXOP_MAX_TENSORS];
    mxop_shape_t cache_shapes[MXOP_MAX_TENSORS];
    int have_dtypes, have_shapes;
} mxop__px_op_t;

/* ---- daemon.c ---- */

/**
 * Reads the configuration, connects to the daemon (starting a private one
 * when $MXOP_SOCKET is unset) and loads the configured libraries.  Returns
 * the client, or NULL with the reason recorded as a message (msgs.c).
 * Idempotent: a second call returns the same client.
 */
mxop_client_t *mxop__px_client_start(void);

/** Closes the session and stops the private daemon (also run at exit); idempotent. */
void mxop__px_client_stop(void);

/** $MXOP_MXNET_PREFIX or the config file's prefix ("" by default). */
const char *mxop__px_config_prefix(void);

/** The client and a lock held around every use of it (NULL after shutdown). */
mxop_client_t *mxop__px_client_lock(void);
void mxop__px_client_unlock(void);

/* ---- ops.c ---- */

/**
 * Builds the op table from the client's ops (the caller holds the client
 * lock); 0 or -1 with a message recorded.  Idempotent: MXNet keeps the
 * callbacks of the first table.  The table is freed at exit.
 */
int mxop__px_ops_build(mxop_client_t *c);
int mxop__px_ops_count(void);

mxop__px_op_t *mxop__px_op_at(int i);

/** The op whose callback of kind `kind` is `fn`, or NULL (a message is recorded). */
mxop__px_op_t *mxop__px_op_of(mxop__px_fn fn, enum mxop__px_kind kind);

/** A callback of op `o` for MXNet. */
mxop__px_fn mxop__px_fn_of(mxop__px_op_t *o, enum mxop__px_kind kind);

/* The callbacks behind the _opCall* entry points (argument lists as MXNet passes them). */
int mxop__px_parse_attrs(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                         int *num_in, int *num_out);
int mxop__px_mutate_inputs(mxop__px_fn fn, int **indices, int *size);
int mxop__px_infer_stype(mxop__px_fn fn, int *instypes, int num_in, int *outstypes, int num_out);
int mxop__px_infer_type(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                        int *intypes, int num_in, int *outtypes, int num_out);
int mxop__px_infer_shape(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                         unsigned int **inshapes, int *indims, int num_in,
                         unsigned int ***mod_inshapes, int **mod_indims, unsigned int ***outshapes,
                         int **outdims, int num_out);
int mxop__px_compute(mxop__px_op_t *o, int backward, const char *const *keys,
                     const char *const *vals, int num, const int64_t **inshapes, int *indims,
                     void **indata, int *intypes, const char **indev, int *instypes, int num_in,
                     const int64_t **outshapes, int *outdims, void **outdata, int *outtypes,
                     const char **outdev, int *outstypes, int num_out, void *rng_cpu);
int mxop__px_state_create(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                          const char *dev_type, unsigned int **inshapes, int *indims, int num_in,
                          const int *intypes, void **state_op);
int mxop__px_state_compute(int is_forward, void *state_op, const int64_t **inshapes, int *indims,
                           void **indata, int *intypes, const char **indev, int *instypes,
                           int num_in, const int64_t **outshapes, int *outdims, void **outdata,
                           int *outtypes, const char **outdev, int *outstypes, int num_out,
                           void *rng_cpu);
void mxop__px_state_destroy(void *state_op);

/* ---- shared.c ---- */

/* Arrays of at least this many bytes are looked up as cpu_shared memory. */
#define MXOP__PX_SHARED_MIN (256u * 1024u)

/**
 * Makes each array of `a` that lies in MXNet's cpu_shared memory a view of
 * a region of client `c` (registered once per file), so that it is not
 * staged; the others stay heap arrays.  The caller holds the client lock.
 */
void mxop__px_shared_map(mxop_client_t *c, mxop_array_t *a, int n);

/* ---- msgs.c: what MXNet reads with _msgSize / _msgGet after a callback ---- */

/** Forgets this thread's messages (at the start of each callback). */
void mxop__px_msgs_clear(void);

/** Records a message for this thread; returns MXOP__MX_FAIL. */
int mxop__px_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int mxop__px_msgs_count(void);
const char *mxop__px_msgs_get(int i);

/* ---- seed.cc ---- */

/** A nonzero 64-bit seed drawn from MXNet's CPU random states (1024 std::mt19937), or 0. */
uint64_t mxop__px_seed_from(void *rng_cpu_states);

#endif /* MXOP_MXNET_PROXY_PROXY_H */
