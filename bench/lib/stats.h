/*
 * bench/lib/stats.h - timing samples: the clock, medians and percentiles.
 *
 * A benchmark records one sample per timed call (nanoseconds on
 * CLOCK_MONOTONIC) and reports the median and the 99th percentile, which
 * say more about a call than a mean that one slow wake-up drags around.
 */
#ifndef MXOP_BENCH_LIB_STATS_H
#define MXOP_BENCH_LIB_STATS_H

#include <stddef.h>
#include <stdint.h>

/** CLOCK_MONOTONIC in nanoseconds. */
int64_t mxb_now_ns(void);

/** A growable list of samples in nanoseconds. */
typedef struct mxb_samples {
    int64_t *ns;
    size_t n, cap;
} mxb_samples_t;

/** Makes room for `cap` samples up front, so that recording never allocates.  0 or -ENOMEM. */
int mxb_samples_init(mxb_samples_t *s, size_t cap);

/** Records one sample (dropped, and counted in no statistic, if the list is full). */
void mxb_samples_add(mxb_samples_t *s, int64_t ns);

/** Frees the list; accepts one never initialised with zeroes. */
void mxb_samples_free(mxb_samples_t *s);

/**
 * The p-quantile (p in [0, 1]) of the samples, nearest rank, in
 * nanoseconds; 0 for an empty list.  Sorts the samples in place.
 */
double mxb_quantile(mxb_samples_t *s, double p);

static inline double mxb_median(mxb_samples_t *s)
{
    return mxb_quantile(s, 0.5);
}

static inline double mxb_p99(mxb_samples_t *s)
{
    return mxb_quantile(s, 0.99);
}

#endif /* MXOP_BENCH_LIB_STATS_H */
