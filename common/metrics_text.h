/*
 * common/metrics_text.h - the counters of DaemonStats in the Prometheus text
 * exposition format: one formatter for the daemon's --metrics-file and for
 * `mxop stats --prometheus`.  Metric names and labels: docs/operations.md.
 */
#ifndef MXOP_COMMON_METRICS_TEXT_H
#define MXOP_COMMON_METRICS_TEXT_H

#include "control.pb-c.h"

/* The text of `st`, malloc'd (the caller frees it); NULL when out of memory. */
char *mxop__metrics_format(const Mxop__DaemonStatsReply *st);

#endif /* MXOP_COMMON_METRICS_TEXT_H */
