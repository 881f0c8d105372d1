/*
 * common/metrics_text.c - DaemonStats as Prometheus text: HELP and TYPE
 * before each family's samples, every family's samples together, label
 * values escaped (backslash, double quote, line feed) as the format asks.
 */
#include "common/metrics_text.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "mxop/client.h"

/* A growing string; `failed` once an allocation failed (then the text is dropped). */
typedef struct sbuf {
    char *p;
    size_t n;
    size_t cap;
    bool failed;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_put(sbuf_t *b, const char *fmt, ...)
{
    for (int tries = 0; !b->failed && tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k =
            vsnprintf(b->p != NULL ? b->p + b->n : NULL, b->p != NULL ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if (b->p != NULL && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->n + (size_t)k)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (np == NULL) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

/* A label value, escaped as the format asks: backslash, double quote and line feed. */
static void sb_label(sbuf_t *b, const char *key, const char *v, bool first)
{
    sb_put(b, "%s%s=\"", first ? "" : ",", key);
    for (const char *p = v != NULL ? v : ""; *p != '\0'; p++) {
        if (*p == '\\')
            sb_put(b, "\\\\");
        else if (*p == '"')
            sb_put(b, "\\\"");
        else if (*p == '\n')
            sb_put(b, "\\n");
        else
            sb_put(b, "%c", *p);
    }
    sb_put(b, "\"");
}

static void family(sbuf_t *b, const char *name, const char *type, const char *help)
{
    sb_put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void op_labels(sbuf_t *b, const Mxop__OpStats *o)
{
    sb_put(b, "{session=\"%llu\"", (unsigned long long)o->session);
    sb_label(b, "library", o->library, false);
    sb_label(b, "op", o->op, false);
}

/* What one per-op metric reads from a row. */
typedef struct op_metric {
    const char *name;
    const char *type;
    const char *help;
    int field; /* which of the row's numbers */
} op_metric_t;

enum { F_CALLS, F_CRASHES, F_TIMEOUTS, F_P50, F_P99, F_MAX, F_SUM, F_STAGED };

static const op_metric_t op_metrics[] = {
    {"mxop_op_calls_total", "counter", "Calls of the op (forward and backward) the client made.",
     F_CALLS},
    {"mxop_op_crashes_total", "counter",
     "Worker deaths the daemon saw during a call of the op (other than timeouts).", F_CRASHES},
    {"mxop_op_timeouts_total", "counter",
     "Workers the daemon killed for overrunning a call of the op.", F_TIMEOUTS},
    {"mxop_op_latency_p50_seconds", "gauge",
     "Median call latency seen by the client (log2 buckets: within a factor of 2).", F_P50},
    {"mxop_op_latency_p99_seconds", "gauge",
     "99th percentile call latency seen by the client (log2 buckets).", F_P99},
    {"mxop_op_latency_max_seconds", "gauge", "Longest call seen by the client.", F_MAX},
    {"mxop_op_latency_seconds_total", "counter", "Time spent in calls of the op.", F_SUM},
    {"mxop_op_staged_bytes_total", "counter",
     "Bytes copied through the staging region for calls of the op.", F_STAGED},
};

static void op_value(sbuf_t *b, const Mxop__OpStats *o, int field)
{
    switch (field) {
    case F_CALLS: sb_put(b, "%llu", (unsigned long long)o->calls); break;
    case F_CRASHES: sb_put(b, "%llu", (unsigned long long)o->crashes); break;
    case F_TIMEOUTS: sb_put(b, "%llu", (unsigned long long)o->timeouts); break;
    case F_P50: sb_put(b, "%.9f", (double)o->p50_ns / 1e9); break;
    case F_P99: sb_put(b, "%.9f", (double)o->p99_ns / 1e9); break;
    case F_MAX: sb_put(b, "%.9f", (double)o->max_ns / 1e9); break;
    case F_SUM: sb_put(b, "%.9f", (double)o->sum_ns / 1e9); break;
    default: sb_put(b, "%llu", (unsigned long long)o->staged_bytes); break;
    }
}

char *mxop__metrics_format(const Mxop__DaemonStatsReply *st)
{
    sbuf_t b = {0};
    family(&b, "mxop_uptime_seconds", "gauge", "Seconds since the daemon started.");
    sb_put(&b, "mxop_uptime_seconds %.3f\n", (double)st->uptime_ms / 1e3);
    family(&b, "mxop_sessions", "gauge", "Sessions the daemon serves.");
    sb_put(&b, "mxop_sessions %u\n", (unsigned)st->sessions_total);

    for (size_t m = 0; m < sizeof(op_metrics) / sizeof(op_metrics[0]); m++) {
        family(&b, op_metrics[m].name, op_metrics[m].type, op_metrics[m].help);
        for (size_t i = 0; i < st->n_ops; i++) {
            sb_put(&b, "%s", op_metrics[m].name);
            op_labels(&b, st->ops[i]);
            sb_put(&b, "} ");
            op_value(&b, st->ops[i], op_metrics[m].field);
            sb_put(&b, "\n");
        }
    }
    family(&b, "mxop_op_errors_total", "counter",
           "Calls of the op that failed, by error code (code=\"other\": a code without a "
           "counter of its own).");
    for (size_t i = 0; i < st->n_ops; i++) {
        const Mxop__OpStats *o = st->ops[i];
        for (size_t k = 0; k < o->n_errors_by_code; k++) {
            int code = o->errors_by_code[k]->code;
            sb_put(&b, "mxop_op_errors_total");
            op_labels(&b, o);
            sb_label(&b, "code", code == 0 ? "other" : mxop_err_name(code), false);
            sb_put(&b, "} %llu\n", (unsigned long long)o->errors_by_code[k]->count);
        }
    }

    static const struct {
        const char *name, *type, *help;
    } sess[] = {
        {"mxop_session_calls_total", "counter", "Calls the session's client made."},
        {"mxop_session_errors_total", "counter", "Calls of the session that failed."},
        {"mxop_session_crashes_total", "counter",
         "Deaths of the session's worker, in a call or not (other than timeouts)."},
        {"mxop_session_timeouts_total", "counter",
         "Workers of the session killed for overrunning a deadline."},
        {"mxop_session_restarts_total", "counter", "Replacements of the session's worker."},
        {"mxop_session_latency_p99_seconds", "gauge",
         "99th percentile call latency of the session, all ops together."},
        {"mxop_session_staged_bytes_total", "counter", "Bytes the session's client staged."},
    };
    for (size_t m = 0; m < sizeof(sess) / sizeof(sess[0]); m++) {
        family(&b, sess[m].name, sess[m].type, sess[m].help);
        for (size_t i = 0; i < st->n_sessions; i++) {
            const Mxop__SessionStats *s = st->sessions[i];
            sb_put(&b, "%s{session=\"%llu\",client_pid=\"%u\",client_uid=\"%u\"} ", sess[m].name,
                   (unsigned long long)s->session, (unsigned)s->client_pid,
                   (unsigned)s->client_uid);
            switch (m) {
            case 0: sb_put(&b, "%llu\n", (unsigned long long)s->calls); break;
            case 1: sb_put(&b, "%llu\n", (unsigned long long)s->errors); break;
            case 2: sb_put(&b, "%llu\n", (unsigned long long)s->crashes); break;
            case 3: sb_put(&b, "%llu\n", (unsigned long long)s->timeouts); break;
            case 4: sb_put(&b, "%llu\n", (unsigned long long)s->restarts); break;
            case 5: sb_put(&b, "%.9f\n", (double)s->p99_ns / 1e9); break;
            default: sb_put(&b, "%llu\n", (unsigned long long)s->staged_bytes); break;
            }
        }
    }
    if (b.failed || b.p == NULL) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
