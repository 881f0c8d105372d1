/*
 * `mxop stats`: per op and per session, calls, errors by code, crashes,
 * timeouts, latency p50/p99/max and bytes staged; --prometheus prints the
 * Prometheus text exposition format (what --metrics-file holds).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/metrics_text.h"
#include "mxop/client.h"
#include "tools/mxop/cli_stats.h"
#include "tools/mxop/commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mxop stats [--socket PATH] [--json | --prometheus]\n\n"
               "Per op and per session: calls, errors by code, crashes, timeouts, latency\n"
               "p50/p99/max (as the client measured it; log2 buckets, so within a factor of\n"
               "2) and bytes staged.  Only the daemon's user and root see every session.\n\n"
               "  --socket PATH  the daemon's control socket (default: $MXOP_SOCKET)\n"
               "  --json         one JSON object instead of tables\n"
               "  --prometheus   the Prometheus text exposition format (metrics mxop_*)\n\n"
               "exit status: 0 done, 1 the daemon answered with an error, 2 bad arguments,\n"
               "3 no daemon reachable\n");
}

static void codes_json(Mxop__ErrorCount *const *v, size_t n)
{
    printf("{");
    for (size_t k = 0; k < n; k++)
        printf("%s\"%s\":%llu", k ? "," : "", v[k]->code ? mxop_err_name(v[k]->code) : "other",
               (unsigned long long)v[k]->count);
    printf("}");
}

static void print_json(const Mxop__DaemonStatsReply *st)
{
    printf("{\"uptime_ms\":%llu,\"ops\":[", (unsigned long long)st->uptime_ms);
    for (size_t i = 0; i < st->n_ops; i++) {
        const Mxop__OpStats *o = st->ops[i];
        printf("%s{\"session\":%llu,\"library\":", i ? "," : "", (unsigned long long)o->session);
        mxop__cli_json_str(stdout, o->library);
        printf(",\"op\":");
        mxop__cli_json_str(stdout, o->op);
        printf(",\"calls\":%llu,\"errors\":%llu,\"errors_by_code\":", (unsigned long long)o->calls,
               (unsigned long long)o->errors);
        codes_json(o->errors_by_code, o->n_errors_by_code);
        printf(",\"crashes\":%llu,\"timeouts\":%llu,\"p50_ns\":%llu,\"p99_ns\":%llu,"
               "\"max_ns\":%llu,\"sum_ns\":%llu,\"staged_bytes\":%llu}",
               (unsigned long long)o->crashes, (unsigned long long)o->timeouts,
               (unsigned long long)o->p50_ns, (unsigned long long)o->p99_ns,
               (unsigned long long)o->max_ns, (unsigned long long)o->sum_ns,
               (unsigned long long)o->staged_bytes);
    }
    printf("],\"sessions\":[");
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStats *s = st->sessions[i];
        printf("%s{\"session\":%llu,\"client_pid\":%u,\"client_uid\":%u,\"calls\":%llu,"
               "\"errors\":%llu,\"errors_by_code\":",
               i ? "," : "", (unsigned long long)s->session, (unsigned)s->client_pid,
               (unsigned)s->client_uid, (unsigned long long)s->calls,
               (unsigned long long)s->errors);
        codes_json(s->errors_by_code, s->n_errors_by_code);
        printf(",\"crashes\":%llu,\"timeouts\":%llu,\"restarts\":%llu,\"p50_ns\":%llu,"
               "\"p99_ns\":%llu,\"max_ns\":%llu,\"staged_bytes\":%llu}",
               (unsigned long long)s->crashes, (unsigned long long)s->timeouts,
               (unsigned long long)s->restarts, (unsigned long long)s->p50_ns,
               (unsigned long long)s->p99_ns, (unsigned long long)s->max_ns,
               (unsigned long long)s->staged_bytes);
    }
    printf("]}\n");
}

static void codes_text(Mxop__ErrorCount *const *v, size_t n)
{
    if (n == 0)
        printf("-");
    for (size_t k = 0; k < n; k++)
        printf("%s%s=%llu", k ? "," : "", v[k]->code ? mxop_err_name(v[k]->code) : "other",
               (unsigned long long)v[k]->count);
}

static void print_text(const Mxop__DaemonStatsReply *st)
{
    char a[32], b[32], c[32], d[32];
    printf("%-8s %-20s %-24s %9s %7s %7s %8s %9s %9s %9s %9s  %s\n", "SESSION", "LIBRARY", "OP",
           "CALLS", "ERRORS", "CRASHES", "TIMEOUTS", "P50", "P99", "MAX", "STAGED",
           "ERRORS BY CODE");
    for (size_t i = 0; i < st->n_ops; i++) {
        const Mxop__OpStats *o = st->ops[i];
        printf("%-8llu %-20s %-24s %9llu %7llu %7llu %8llu %9s %9s %9s %9s  ",
               (unsigned long long)o->session, o->library, o->op, (unsigned long long)o->calls,
               (unsigned long long)o->errors, (unsigned long long)o->crashes,
               (unsigned long long)o->timeouts, mxop__cli_dur(o->p50_ns, a, sizeof(a)),
               mxop__cli_dur(o->p99_ns, b, sizeof(b)), mxop__cli_dur(o->max_ns, c, sizeof(c)),
               mxop__cli_bytes(o->staged_bytes, d, sizeof(d)));
        codes_text(o->errors_by_code, o->n_errors_by_code);
        printf("\n");
    }
    printf("\n%-8s %-8s %-6s %9s %7s %7s %8s %8s %9s %9s %9s %9s  %s\n", "SESSION", "CLIENT", "UID",
           "CALLS", "ERRORS", "CRASHES", "TIMEOUTS", "RESTARTS", "P50", "P99", "MAX", "STAGED",
           "ERRORS BY CODE");
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStats *s = st->sessions[i];
        printf("%-8llu %-8u %-6u %9llu %7llu %7llu %8llu %8llu %9s %9s %9s %9s  ",
               (unsigned long long)s->session, (unsigned)s->client_pid, (unsigned)s->client_uid,
               (unsigned long long)s->calls, (unsigned long long)s->errors,
               (unsigned long long)s->crashes, (unsigned long long)s->timeouts,
               (unsigned long long)s->restarts, mxop__cli_dur(s->p50_ns, a, sizeof(a)),
               mxop__cli_dur(s->p99_ns, b, sizeof(b)), mxop__cli_dur(s->max_ns, c, sizeof(c)),
               mxop__cli_bytes(s->staged_bytes, d, sizeof(d)));
        codes_text(s->errors_by_code, s->n_errors_by_code);
        printf("\n");
    }
}

int mxop__cmd_stats(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"prometheus", no_argument, NULL, 'p'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sock = NULL;
    int json = 0, prom = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "s:jph", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'j': json = 1; break;
        case 'p': prom = 1; break;
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mxop stats: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    if (json && prom) {
        fprintf(stderr, "mxop stats: --json and --prometheus exclude each other\n");
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *path = mxop__cli_socket("stats", sock);
    if (path == NULL)
        return MXOP_CLI_EXIT_USAGE;
    mxop__cli_conn_t c;
    int rc = mxop__cli_connect("stats", path, &c);
    if (rc != 0)
        return rc;
    Mxop__Reply *r;
    rc = mxop__cli_get_stats("stats", &c, &r);
    mxop__cli_close(&c);
    if (rc != 0)
        return rc;
    if (prom) {
        char *text = mxop__metrics_format(r->daemon_stats);
        if (text == NULL) {
            fprintf(stderr, "mxop stats: out of memory\n");
            mxop__reply__free_unpacked(r, NULL);
            return MXOP_CLI_EXIT_FAILED;
        }
        fputs(text, stdout);
        free(text);
    } else if (json) {
        print_json(r->daemon_stats);
    } else {
        mxop__cli_sanitize(&r->base);
        print_text(r->daemon_stats);
    }
    mxop__reply__free_unpacked(r, NULL);
    return MXOP_CLI_EXIT_OK;
}
