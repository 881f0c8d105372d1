/*
 * `mxop status`: the daemon (version, uptime, the sandbox layers its
 * workers get), its sessions (client, libraries, regions, workers and
 * spares, restarts and their reasons).  A user who is not the daemon's
 * (or root) sees only the sessions of their own uid.
 */
#include <getopt.h>
#include <stdio.h>

#include "mxop/client.h"
#include "tools/mxop/cli.h"
#include "tools/mxop/commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mxop status [--socket PATH] [--json]\n\n"
               "The daemon: version, uptime, the sandbox layers its workers get, and each\n"
               "session: client pid and uid, libraries, regions and bytes mapped, worker and\n"
               "spare pids, restarts with their last reasons.  Only the daemon's user and root\n"
               "see every session; others see their own.\n\n"
               "  --socket PATH  the daemon's control socket (default: $MXOP_SOCKET)\n"
               "  --json         one JSON object instead of text\n\n"
               "exit status: 0 done, 1 the daemon answered with an error, 2 bad arguments,\n"
               "3 no daemon reachable\n");
}

static void print_json(const Mxop__DaemonStatusReply *st)
{
    printf("{\"version\":");
    mxop__cli_json_str(stdout, st->version);
    printf(",\"pid\":%u,\"euid\":%u,\"uptime_ms\":%llu,\"sandbox\":", (unsigned)st->pid,
           (unsigned)st->euid, (unsigned long long)st->uptime_ms);
    mxop__cli_json_str(stdout, st->sandbox);
    printf(",\"layers\":");
    mxop__cli_json_str(stdout, st->layers);
    printf(",\"admin\":%s,\"sessions_total\":%u,\"clients\":%llu,\"sessions\":[",
           st->admin ? "true" : "false", (unsigned)st->sessions_total,
           (unsigned long long)st->clients);
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStatus *s = st->sessions[i];
        printf("%s{\"id\":%llu,\"client_pid\":%u,\"client_uid\":%u,\"client_name\":", i ? "," : "",
               (unsigned long long)s->id, (unsigned)s->client_pid, (unsigned)s->client_uid);
        mxop__cli_json_str(stdout, s->client_name);
        printf(",\"state\":");
        mxop__cli_json_str(stdout, s->state);
        printf(",\"age_ms\":%llu,\"worker_pid\":%u,\"spare_pid\":%u,\"generation\":%u,"
               "\"restarts\":%llu,\"regions\":%u,\"region_bytes\":%llu,\"libraries\":[",
               (unsigned long long)s->age_ms, (unsigned)s->worker_pid, (unsigned)s->spare_pid,
               (unsigned)s->generation, (unsigned long long)s->restarts, (unsigned)s->regions,
               (unsigned long long)s->region_bytes);
        for (size_t k = 0; k < s->n_libraries; k++) {
            printf("%s", k ? "," : "");
            mxop__cli_json_str(stdout, s->libraries[k]);
        }
        printf("],\"library_versions\":[");
        for (size_t k = 0; k < s->n_library_versions; k++) {
            const Mxop__LibraryVersion *v = s->library_versions[k];
            printf("%s{\"name\":", k ? "," : "");
            mxop__cli_json_str(stdout, v->name);
            printf(",\"path\":");
            mxop__cli_json_str(stdout, v->path);
            printf(",\"dev\":%llu,\"ino\":%llu,\"size\":%llu,\"mtime_ns\":%lld,\"sha256\":",
                   (unsigned long long)v->dev, (unsigned long long)v->ino,
                   (unsigned long long)v->size, (long long)v->mtime_ns);
            mxop__cli_json_str(stdout, v->sha256);
            printf(",\"loaded_at_ms\":%llu}", (unsigned long long)v->loaded_at_ms);
        }
        printf("],\"ops\":[");
        for (size_t k = 0; k < s->n_ops; k++) {
            printf("%s", k ? "," : "");
            mxop__cli_json_str(stdout, s->ops[k]->name);
        }
        printf("],\"recent_restarts\":[");
        for (size_t k = 0; k < s->n_recent_restarts; k++) {
            const Mxop__RestartNote *n = s->recent_restarts[k];
            printf("%s{\"ago_ms\":%llu,\"code\":%d,\"code_name\":\"%s\",\"signal\":%d,\"op\":",
                   k ? "," : "", (unsigned long long)n->ago_ms, (int)n->code,
                   mxop_err_name(n->code), (int)n->signal);
            mxop__cli_json_str(stdout, n->op);
            printf(",\"message\":");
            mxop__cli_json_str(stdout, n->message);
            printf("}");
        }
        printf("]}");
    }
    printf("]}\n");
}

static void print_text(const Mxop__DaemonStatusReply *st)
{
    char b1[32], b2[32];
    printf("mxop-serverd %s, pid %u, euid %u, up %s\n", st->version, (unsigned)st->pid,
           (unsigned)st->euid, mxop__cli_dur(st->uptime_ms * 1000000ull, b1, sizeof(b1)));
    printf("sandbox %s: %s\n", st->sandbox, st->layers);
    printf("sessions: %zu shown of %u%s; %llu control connections\n", st->n_sessions,
           (unsigned)st->sessions_total, st->admin ? "" : " (only your uid's)",
           (unsigned long long)st->clients);
    if (st->n_sessions == 0)
        return;
    printf("\n%-8s %-8s %-6s %-9s %-8s %-8s %-4s %-8s %-7s %-9s %s\n", "SESSION", "CLIENT", "UID",
           "STATE", "WORKER", "SPARE", "GEN", "RESTARTS", "REGIONS", "MAPPED", "LIBRARIES");
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStatus *s = st->sessions[i];
        printf("%-8llu %-8u %-6u %-9s %-8u %-8s %-4u %-8llu %-7u %-9s ", (unsigned long long)s->id,
               (unsigned)s->client_pid, (unsigned)s->client_uid, s->state, (unsigned)s->worker_pid,
               s->spare_pid ? (snprintf(b1, sizeof(b1), "%u", (unsigned)s->spare_pid), b1) : "-",
               (unsigned)s->generation, (unsigned long long)s->restarts, (unsigned)s->regions,
               mxop__cli_bytes(s->region_bytes, b2, sizeof(b2)));
        if (s->n_libraries == 0)
            printf("-");
        for (size_t k = 0; k < s->n_libraries; k++)
            printf("%s%s", k ? "," : "", s->libraries[k]);
        printf("\n");
    }
    /* Which file each session runs: hot reload replaces them (docs/operations.md). */
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStatus *s = st->sessions[i];
        if (s->n_library_versions == 0)
            continue;
        printf("\nsession %llu runs:\n", (unsigned long long)s->id);
        for (size_t k = 0; k < s->n_library_versions; k++) {
            const Mxop__LibraryVersion *v = s->library_versions[k];
            printf("  %s  inode %llu, %s, sha256 %s\n", v->name, (unsigned long long)v->ino,
                   mxop__cli_bytes(v->size, b2, sizeof(b2)), v->sha256[0] ? v->sha256 : "unknown");
        }
    }
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStatus *s = st->sessions[i];
        if (s->n_recent_restarts == 0)
            continue;
        printf("\nsession %llu, last %zu restarts (oldest first):\n", (unsigned long long)s->id,
               s->n_recent_restarts);
        for (size_t k = 0; k < s->n_recent_restarts; k++) {
            const Mxop__RestartNote *n = s->recent_restarts[k];
            printf("  %s ago  %s  %s\n", mxop__cli_dur(n->ago_ms * 1000000ull, b1, sizeof(b1)),
                   mxop_err_name(n->code), n->message);
        }
    }
}

int mxop__cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sock = NULL;
    int json = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "s:jh", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mxop status: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *path = mxop__cli_socket("status", sock);
    if (path == NULL)
        return MXOP_CLI_EXIT_USAGE;
    mxop__cli_conn_t c;
    int rc = mxop__cli_connect("status", path, &c);
    if (rc != 0)
        return rc;
    Mxop__DaemonStatus body = MXOP__DAEMON_STATUS__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_DAEMON_STATUS;
    req.daemon_status = &body;
    Mxop__Reply *r;
    rc = mxop__cli_request("status", &c, &req, &r);
    mxop__cli_close(&c);
    if (rc != 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_DAEMON_STATUS) {
        fprintf(stderr, "mxop status: the daemon answered without a status\n");
        mxop__reply__free_unpacked(r, NULL);
        return MXOP_CLI_EXIT_FAILED;
    }
    if (json) {
        print_json(r->daemon_status);
    } else {
        mxop__cli_sanitize(&r->base);
        print_text(r->daemon_status);
    }
    mxop__reply__free_unpacked(r, NULL);
    return MXOP_CLI_EXIT_OK;
}
