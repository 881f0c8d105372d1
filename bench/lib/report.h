/*
 * bench/lib/report.h - the results table: printed, and written as CSV and JSON.
 *
 * A row is one measurement (median and p99 over n samples), optionally
 * against a baseline measured in the same run, with their ratio and the
 * target it is held to.  Time rows are in nanoseconds and printed in the
 * unit that suits them; rate rows (calls per second) are printed as they are.
 */
#ifndef MXOP_BENCH_LIB_REPORT_H
#define MXOP_BENCH_LIB_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "bench/lib/stats.h"

enum mxb_kind {
    MXB_TIME = 0, /* nanoseconds: lower is better */
    MXB_RATE = 1, /* calls per second: higher is better */
};

/** What a row is held to. */
enum mxb_target {
    MXB_NO_TARGET = 0,
    MXB_RATIO_AT_MOST = 1,  /* ratio <= limit */
    MXB_TIME_AT_MOST = 2,   /* median <= limit nanoseconds */
    MXB_RATIO_AT_LEAST = 3, /* ratio >= limit (rates: higher is better) */
};

typedef struct mxb_row {
    char section[8];
    char name[80];
    int kind;
    size_t n;
    double median, p99;
    char base_name[80]; /* "" when there is no baseline */
    size_t base_n;
    double base_median, base_p99;
    int target;
    double limit;
    char note[200];
} mxb_row_t;

/** The ratio of a row (median over the baseline's median); 0 without a baseline. */
double mxb_row_ratio(const mxb_row_t *r);

/** Whether a row with a target meets it (1), misses it (0); -1 without a target. */
int mxb_row_met(const mxb_row_t *r);

/**
 * Appends a row.  `s` and `base` (either may be NULL: a row of a single
 * value is given with mxb_report_value) are summarised here (sorted in
 * place).  Returns the row, to set a target or a note on; NULL when the
 * table is full.
 */
mxb_row_t *mxb_report_add(const char *section, const char *name, mxb_samples_t *s,
                          const char *base_name, mxb_samples_t *base);

/** Appends a row of given values (rates, derived times); base_name NULL for none. */
mxb_row_t *mxb_report_value(const char *section, const char *name, int kind, size_t n,
                            double median, double p99, const char *base_name, size_t base_n,
                            double base_median, double base_p99);

/** Sets a row's target; no-op on NULL. */
void mxb_row_target(mxb_row_t *r, int target, double limit);

/** Sets a row's note (printf-style); no-op on NULL. */
void mxb_row_note(mxb_row_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Prints the table and the targets' summary. */
void mxb_report_print(FILE *f);

/**
 * Writes the table to `csv` and `json` (paths borrowed); `machine` is a
 * one-line description kept in the JSON.  0 or -errno, with a message on stderr.
 */
int mxb_report_write(const char *csv, const char *json, const char *machine);

/** Number of rows with a target that they miss. */
int mxb_report_missed(void);

#endif /* MXOP_BENCH_LIB_REPORT_H */
