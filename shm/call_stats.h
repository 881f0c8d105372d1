/*
 * shm/call_stats.h - per-op counters of one session, kept by the client in
 * its call page (shm/call_page.h) for the daemon's `mxop stats`.
 *
 * The daemon does not see the calls that travel client <-> worker (the
 * mailbox, the data socket), so the client counts them: the engine is
 * trusted (shared/DESIGN.md), the worker is not, and this area lives in
 * the call page, which the worker never maps.  Nothing here comes from
 * memory a worker can write.  Crashes and timeouts are the daemon's own
 * observations and are kept by the daemon (server/daemon/core/introspect.c).
 *
 * One slot per op, indexed by the op's index in the session (OpInfo.index);
 * ops past MXOP__STATS_OPS are not counted.  Each field is written by one
 * client thread at a time (under the client's lock) with relaxed atomic
 * stores, so the daemon reads torn-free values without a seqlock: a reader
 * may see `calls` one ahead of the histogram, never garbage.
 *
 * Latency goes into log2 buckets of nanoseconds: bucket b holds durations
 * in [2^b, 2^(b+1)) ns (bucket 0 also holds 0), so a percentile read from
 * the buckets is exact to a factor of two.
 */
#ifndef MXOP_SHM_CALL_STATS_H
#define MXOP_SHM_CALL_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#define MXOP__STATS_OPS 128
#define MXOP__STATS_BUCKETS 48
/* Error codes -1001 .. -1063 have a counter each; any other code counts in slot 0. */
#define MXOP__STATS_CODES 64

typedef struct mxop__op_stats {
    _Atomic uint64_t calls;
    _Atomic uint64_t errors;
    _Atomic uint64_t staged_bytes;
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t max_ns;
    _Atomic uint64_t buckets[MXOP__STATS_BUCKETS];
    _Atomic uint64_t codes[MXOP__STATS_CODES];
} mxop__op_stats_t;

typedef struct mxop__call_stats {
    uint32_t magic; /* MXOP__CALL_STATS_MAGIC once the daemon created the page */
    uint32_t n_slots;
    mxop__op_stats_t ops[MXOP__STATS_OPS];
} mxop__call_stats_t;

#define MXOP__CALL_STATS_MAGIC 0x4D585354u /* "MXST" */

/* The bucket of a duration: floor(log2(ns)), 0 for 0 and 1 ns. */
static inline unsigned mxop__stats_bucket(uint64_t ns)
{
    unsigned b = ns > 1 ? 63u - (unsigned)__builtin_clzll(ns) : 0u;
    return b < MXOP__STATS_BUCKETS ? b : MXOP__STATS_BUCKETS - 1;
}

/* The slot of an error code (0: a code without its own counter). */
static inline unsigned mxop__stats_code_slot(int code)
{
    int k = -code - 1000;
    return k > 0 && k < MXOP__STATS_CODES ? (unsigned)k : 0u;
}

/* Relaxed increment by the only writer: a load and a store, no locked instruction. */
static inline void mxop__stats_add(_Atomic uint64_t *x, uint64_t v)
{
    atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/*
 * The client: one call of op `index` ended with `rc` after `ns`
 * nanoseconds, having staged `staged` bytes.  Called under the client's
 * lock (one writer at a time).
 */
static inline void mxop__stats_record(mxop__call_stats_t *st, uint32_t index, int rc, uint64_t ns,
                                      uint64_t staged)
{
    if (st == NULL || index >= MXOP__STATS_OPS)
        return;
    mxop__op_stats_t *o = &st->ops[index];
    mxop__stats_add(&o->calls, 1);
    if (rc < 0) {
        mxop__stats_add(&o->errors, 1);
        mxop__stats_add(&o->codes[mxop__stats_code_slot(rc)], 1);
    }
    if (staged != 0)
        mxop__stats_add(&o->staged_bytes, staged);
    mxop__stats_add(&o->sum_ns, ns);
    mxop__stats_add(&o->buckets[mxop__stats_bucket(ns)], 1);
    if (ns > atomic_load_explicit(&o->max_ns, memory_order_relaxed))
        atomic_store_explicit(&o->max_ns, ns, memory_order_relaxed);
}

/*
 * The quantile q (0 < q <= 1) of a histogram, in ns: the upper bound of the
 * bucket holding it (2^(b+1) - 1), capped by `max_ns` when that is known
 * (non-zero).  0 for an empty histogram.
 */
static inline uint64_t mxop__stats_quantile(const uint64_t *buckets, unsigned n, double q,
                                            uint64_t max_ns)
{
    uint64_t total = 0;
    for (unsigned b = 0; b < n; b++)
        total += buckets[b];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)total + 0.999999);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < n; b++) {
        seen += buckets[b];
        if (seen >= rank) {
            uint64_t hi = b >= 63 ? UINT64_MAX : (((uint64_t)2 << b) - 1);
            return max_ns != 0 && max_ns < hi ? max_ns : hi;
        }
    }
    return max_ns;
}

#endif /* MXOP_SHM_CALL_STATS_H */
