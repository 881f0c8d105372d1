/*
 * `mxop top`: a live view of the daemon's ops, refreshed each second like
 * top(1): calls per second, p99 latency over the last interval, errors,
 * crashes and timeouts, all sessions of an op together.  On a terminal
 * the screen is redrawn; otherwise (a pipe, a test) each refresh is a
 * plain block of lines without escape codes.  --iterations N stops after N.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "shm/call_stats.h"
#include "tools/mxop/cli_stats.h"
#include "tools/mxop/commands.h"

/* One op (library and name), all sessions together. */
typedef struct row {
    char library[128];
    char op[128];
    uint64_t calls, errors, crashes, timeouts;
    uint64_t buckets[MXOP__STATS_BUCKETS];
    /* This interval's. */
    double rate;
    uint64_t d_calls, d_errors, d_faults, p99_ns;
} row_t;

typedef struct table {
    row_t *rows;
    size_t n;
    size_t cap;
} table_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: mxop top [--socket PATH] [--iterations N] [--interval-ms N] [--json]\n\n"
               "A live view of the daemon's ops (all sessions of an op together): calls per\n"
               "second, p99 latency over the last interval, errors, crashes and timeouts in\n"
               "it and in all.  Refreshes every second; Ctrl-C to stop.  When output is\n"
               "not a terminal, each refresh is printed as plain lines.\n\n"
               "  --socket PATH     the daemon's control socket (default: $MXOP_SOCKET)\n"
               "  --iterations N    stop after N refreshes (default: run until stopped)\n"
               "  --interval-ms N   time between refreshes (default 1000, at least 100)\n"
               "  --json            one JSON object per refresh, one per line\n\n"
               "exit status: 0 done, 1 the daemon answered with an error, 2 bad arguments,\n"
               "3 no daemon reachable (or it went away)\n");
}

static row_t *find(table_t *t, const char *lib, const char *op, int add)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].library, lib) == 0 && strcmp(t->rows[i].op, op) == 0)
            return &t->rows[i];
    if (!add)
        return NULL;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 32;
        row_t *nr = realloc(t->rows, cap * sizeof(*nr));
        if (nr == NULL)
            return NULL;
        t->rows = nr;
        t->cap = cap;
    }
    row_t *r = &t->rows[t->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->library, sizeof(r->library), "%s", lib);
    snprintf(r->op, sizeof(r->op), "%s", op);
    return r;
}

static uint64_t sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0; /* a session that ended takes its counts along */
}

/* The totals now, and this interval's numbers against `prev`. */
static int collect(const Mxop__DaemonStatsReply *st, const table_t *prev, table_t *cur, double secs)
{
    cur->n = 0;
    for (size_t i = 0; i < st->n_ops; i++) {
        const Mxop__OpStats *o = st->ops[i];
        row_t *r = find(cur, o->library, o->op, 1);
        if (r == NULL)
            return -1;
        r->calls += o->calls;
        r->errors += o->errors;
        r->crashes += o->crashes;
        r->timeouts += o->timeouts;
        for (size_t b = 0; b < o->n_buckets && b < MXOP__STATS_BUCKETS; b++)
            r->buckets[b] += o->buckets[b];
    }
    for (size_t i = 0; i < cur->n; i++) {
        row_t *r = &cur->rows[i];
        const row_t *p = find((table_t *)prev, r->library, r->op, 0);
        uint64_t d[MXOP__STATS_BUCKETS];
        for (unsigned b = 0; b < MXOP__STATS_BUCKETS; b++)
            d[b] = p != NULL ? sub(r->buckets[b], p->buckets[b]) : r->buckets[b];
        r->d_calls = p != NULL ? sub(r->calls, p->calls) : r->calls;
        r->d_errors = p != NULL ? sub(r->errors, p->errors) : r->errors;
        r->d_faults = p != NULL ? sub(r->crashes + r->timeouts, p->crashes + p->timeouts)
                                : r->crashes + r->timeouts;
        r->rate = secs > 0 ? (double)r->d_calls / secs : 0;
        r->p99_ns = mxop__stats_quantile(d, MXOP__STATS_BUCKETS, 0.99, 0);
    }
    return 0;
}

static int by_rate(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    if (x->rate != y->rate)
        return x->rate < y->rate ? 1 : -1;
    int c = strcmp(x->library, y->library);
    return c ? c : strcmp(x->op, y->op);
}

static void show(const table_t *t, const Mxop__DaemonStatsReply *st, int tty, int json, int iter)
{
    char a[32];
    if (json) {
        printf("{\"iteration\":%d,\"uptime_ms\":%llu,\"sessions\":%zu,\"ops\":[", iter,
               (unsigned long long)st->uptime_ms, st->n_sessions);
        for (size_t i = 0; i < t->n; i++) {
            const row_t *r = &t->rows[i];
            printf("%s{\"library\":", i ? "," : "");
            mxop__cli_json_str(stdout, r->library);
            printf(",\"op\":");
            mxop__cli_json_str(stdout, r->op);
            printf(",\"calls_per_s\":%.3f,\"p99_ns\":%llu,\"calls\":%llu,\"errors\":%llu,"
                   "\"crashes\":%llu,\"timeouts\":%llu}",
                   r->rate, (unsigned long long)r->p99_ns, (unsigned long long)r->calls,
                   (unsigned long long)r->errors, (unsigned long long)r->crashes,
                   (unsigned long long)r->timeouts);
        }
        printf("]}\n");
        fflush(stdout);
        return;
    }
    if (tty)
        printf("\033[H\033[2J");
    else if (iter > 1)
        printf("\n");
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    printf("mxop top - %02d:%02d:%02d, up %s, %zu sessions, %zu ops\n", tm.tm_hour, tm.tm_min,
           tm.tm_sec, mxop__cli_dur(st->uptime_ms * 1000000ull, a, sizeof(a)), st->n_sessions,
           t->n);
    printf("%-20s %-24s %10s %9s %8s %8s %10s %8s %8s\n", "LIBRARY", "OP", "CALLS/S", "P99",
           "ERR/INT", "CRASH/INT", "CALLS", "ERRORS", "CRASHES");
    for (size_t i = 0; i < t->n; i++) {
        const row_t *r = &t->rows[i];
        printf("%-20s %-24s %10.1f %9s %8llu %8llu %10llu %8llu %8llu\n", r->library, r->op,
               r->rate, r->d_calls ? mxop__cli_dur(r->p99_ns, a, sizeof(a)) : "-",
               (unsigned long long)r->d_errors, (unsigned long long)r->d_faults,
               (unsigned long long)r->calls, (unsigned long long)r->errors,
               (unsigned long long)(r->crashes + r->timeouts));
    }
    fflush(stdout);
}

int mxop__cmd_top(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"iterations", required_argument, NULL, 'n'},
                                         {"interval-ms", required_argument, NULL, 'i'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sock = NULL;
    long iterations = 0, interval = 1000;
    int json = 0, ch;
    char *end;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "s:n:i:jh", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'n':
            iterations = strtol(optarg, &end, 10);
            if (*end != '\0' || optarg[0] == '\0' || iterations < 1 || iterations > 1000000000L) {
                fprintf(stderr, "mxop top: --iterations must be a positive number, not '%s'\n",
                        optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            break;
        case 'i':
            interval = strtol(optarg, &end, 10);
            if (*end != '\0' || optarg[0] == '\0' || interval < 100 || interval > 3600000L) {
                fprintf(stderr,
                        "mxop top: --interval-ms must be a number from 100 to 3600000, not '%s'\n",
                        optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mxop top: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *path = mxop__cli_socket("top", sock);
    if (path == NULL)
        return MXOP_CLI_EXIT_USAGE;
    mxop__cli_conn_t c;
    int rc = mxop__cli_connect("top", path, &c);
    if (rc != 0)
        return rc;
    int tty = isatty(STDOUT_FILENO) && !json;
    table_t prev = {0}, cur = {0};
    int64_t last_ns = 0;
    for (int iter = 1; iterations == 0 || iter <= iterations; iter++) {
        if (iter > 1) {
            struct timespec ts = {interval / 1000, (interval % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        Mxop__Reply *r;
        rc = mxop__cli_get_stats("top", &c, &r);
        if (rc != 0)
            break;
        if (!json)
            mxop__cli_sanitize(&r->base);
        int64_t now = mxop__now_ns();
        double secs = last_ns != 0 ? (double)(now - last_ns) / 1e9 : 0;
        last_ns = now;
        if (collect(r->daemon_stats, &prev, &cur, secs) != 0) {
            fprintf(stderr, "mxop top: out of memory\n");
            mxop__reply__free_unpacked(r, NULL);
            rc = MXOP_CLI_EXIT_FAILED;
            break;
        }
        /* The first refresh has no interval behind it: its rates are 0, not totals. */
        if (iter == 1)
            for (size_t i = 0; i < cur.n; i++) {
                cur.rows[i].d_calls = cur.rows[i].d_errors = cur.rows[i].d_faults = 0;
                cur.rows[i].p99_ns = 0;
            }
        table_t sorted = cur;
        sorted.rows = malloc((cur.n ? cur.n : 1) * sizeof(row_t));
        if (sorted.rows == NULL) {
            mxop__reply__free_unpacked(r, NULL);
            rc = MXOP_CLI_EXIT_FAILED;
            break;
        }
        /* No op yet: cur.rows may be NULL, which memcpy must not get even for 0 bytes. */
        if (cur.n > 0)
            memcpy(sorted.rows, cur.rows, cur.n * sizeof(row_t));
        qsort(sorted.rows, sorted.n, sizeof(row_t), by_rate);
        show(&sorted, r->daemon_stats, tty, json, iter);
        free(sorted.rows);
        mxop__reply__free_unpacked(r, NULL);
        table_t t = prev;
        prev = cur;
        cur = t;
    }
    free(prev.rows);
    free(cur.rows);
    mxop__cli_close(&c);
    return rc;
}
