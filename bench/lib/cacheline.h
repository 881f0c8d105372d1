/*
 * bench/lib/cacheline.h - the floor under any shared-memory call: a cache
 * line bounced between two threads pinned to CPU 0 and CPU 1 (a call's
 * request and its answer each cross once).  On a VM it moves with where
 * the host puts the vCPUs, so the bench measures it in the same rounds as
 * the null op it explains.
 */
#ifndef MXOP_BENCH_CACHELINE_H
#define MXOP_BENCH_CACHELINE_H

/** The mean round trip of `bounces` bounces, in ns; 0 or -1 when the threads cannot run. */
int mxb_cacheline_rtt(long bounces, double *ns);

#endif /* MXOP_BENCH_CACHELINE_H */
