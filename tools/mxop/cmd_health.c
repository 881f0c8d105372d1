/*
 * `mxop health --live | --ready`: the probes of a service manager or a
 * cluster (Kubernetes exec probes, a Slurm prolog, a load balancer's check).
 *
 * --live asks whether the daemon's event loop answers: a Hello and a
 * DaemonStatus, each within --timeout-ms.  A daemon that is stopped (SIGSTOP)
 * or whose loop hangs still accepts connections (the kernel queues them on
 * the listening socket), so a connect alone proves nothing; the reply does.
 *
 * --ready adds that a worker starts with the sandbox applied.  A worker
 * answers the daemon only after mxop__sandbox_apply succeeded (its start
 * dies otherwise), and the sandbox cannot change while the daemon runs, so:
 *   - when the status (root or the daemon's user see every session) shows a
 *     running session whose worker holds libraries or regions, that worker
 *     answered after its sandbox was applied: ready, nothing is started;
 *   - otherwise (an idle node, or --spawn) the probe opens a session of its
 *     own and registers one page-sized region, which the daemon forwards to
 *     the new worker and answers only once the worker mapped it; then it
 *     closes the session.  That is one worker start per probe on an idle
 *     node (tens of milliseconds), and none on a busy one.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tools/mxop/cli.h"
#include "tools/mxop/commands.h"

#define DEFAULT_TIMEOUT_MS 5000

static void usage(FILE *f)
{
    fprintf(f, "usage: mxop health (--live | --ready) [--spawn] [--timeout-ms N] [--socket PATH]\n"
               "                   [--quiet]\n\n"
               "A probe for service managers and clusters.\n"
               "  --live          the daemon's event loop answers within --timeout-ms\n"
               "  --ready         live, and a worker starts with the sandbox applied (a running\n"
               "                  session's worker proves it; else one is started and stopped)\n"
               "  --spawn         with --ready: always start a worker of the probe's own\n"
               "  --timeout-ms N  how long each answer may take (default 5000)\n"
               "  --socket PATH   the daemon's control socket (default: $MXOP_SOCKET)\n"
               "  --quiet         print nothing on success\n\n"
               "exit status: 0 live (ready), 1 not live (no answer within the timeout) or not\n"
               "ready (no worker could start), 2 bad arguments, 3 no daemon at the socket\n");
}

/*
 * The liveness check: connect, Hello, DaemonStatus, each within timeout_ms
 * and tried once.  Returns an exit status; on success *st is the status
 * reply (the caller frees it).
 */
static int live(const char *path, int timeout_ms, Mxop__Reply **st)
{
    *st = NULL;
    char why[1024];
    mxop__ctlchan_t ch;
    /* Replies on the heap: the status outlives the connection. */
    mxop__ctlchan_init(&ch, NULL);
    /* A full backlog (a hung loop accepts nothing) must not block connect for ever. */
    int rc = mxop__ctlchan_connect(&ch, path, timeout_ms, why, sizeof(why));
    if (rc == MXOP_EINVAL) {
        fprintf(stderr, "mxop health: socket path '%s' is longer than %zu bytes\n", path,
                sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
        return MXOP_CLI_EXIT_USAGE;
    }
    if (rc == MXOP_EIO) {
        fprintf(stderr, "mxop health: %s\n", why);
        return MXOP_CLI_EXIT_FAILED;
    }
    if (rc != 0) {
        fprintf(stderr, "mxop health: not live: cannot reach mxop-serverd at %s: %s\n", path,
                strerror(ch.sys_errno));
        return rc == MXOP_ETIMEOUT ? MXOP_CLI_EXIT_FAILED : MXOP_CLI_EXIT_NO_DAEMON;
    }
    Mxop__Reply *r = NULL;
    rc = mxop__ctlchan_hello(&ch, "mxop health", timeout_ms, &r, why, sizeof(why));
    if (rc == 0 && r->status == 0) {
        mxop__ctlchan_reply_free(&ch, r);
        r = NULL;
        Mxop__DaemonStatus body = MXOP__DAEMON_STATUS__INIT;
        Mxop__Request sreq = MXOP__REQUEST__INIT;
        sreq.body_case = MXOP__REQUEST__BODY_DAEMON_STATUS;
        sreq.daemon_status = &body;
        rc = mxop__ctlchan_request(&ch, &sreq, timeout_ms, NULL, NULL, &r, why, sizeof(why));
    }
    int refused = ch.refused;
    mxop__ctlchan_free(&ch);
    if (rc != 0 && refused) {
        /* A refusal (this uid is not allowed) says nothing of the loop: still a failure. */
        fprintf(stderr, "mxop health: not live: mxop-serverd answered %s: %s\n", mxop_err_name(rc),
                why);
        return MXOP_CLI_EXIT_FAILED;
    }
    if (rc != 0) {
        fprintf(stderr,
                "mxop health: not live: mxop-serverd at %s did not answer within %d ms: %s\n", path,
                timeout_ms, mxop_err_name(rc));
        return MXOP_CLI_EXIT_FAILED;
    }
    if (r->status != 0 || r->body_case != MXOP__REPLY__BODY_DAEMON_STATUS) {
        fprintf(stderr, "mxop health: not live: mxop-serverd answered %s: %s\n",
                mxop_err_name(r->status), r->message != NULL ? r->message : "");
        mxop__reply__free_unpacked(r, NULL);
        return MXOP_CLI_EXIT_FAILED;
    }
    *st = r;
    return MXOP_CLI_EXIT_OK;
}

/* A running session whose worker answered (it holds libraries or regions), or NULL. */
static const Mxop__SessionStatus *proven_session(const Mxop__DaemonStatusReply *st)
{
    for (size_t i = 0; i < st->n_sessions; i++) {
        const Mxop__SessionStatus *s = st->sessions[i];
        if (s->state != NULL && strcmp(s->state, "running") == 0 && s->worker_pid != 0 &&
            (s->n_libraries > 0 || s->regions > 0))
            return s;
    }
    return NULL;
}

/* Starts a worker of the probe's own and has it map a region; an exit status. */
static int spawn_check(const char *path, int timeout_ms, char *how, size_t howlen)
{
    mxop_connect_opts_t o;
    memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    o.client_name = "mxop health --ready";
    o.data_path = MXOP_DATA_PATH_SOCKET;
    mxop_client_t *c = NULL;
    int rc = mxop_connect(path, &o, &c);
    if (rc != 0) {
        fprintf(stderr, "mxop health: not ready: cannot open a session: %s: %s\n",
                mxop_err_name(rc), mxop_connect_error());
        return rc == MXOP_EDISCONNECTED ? MXOP_CLI_EXIT_NO_DAEMON : MXOP_CLI_EXIT_FAILED;
    }
    uint32_t region = 0;
    void *base = NULL;
    rc = mxop_region_create(c, 4096, &region, &base);
    if (rc != 0) {
        fprintf(stderr, "mxop health: not ready: the session's worker did not start: %s: %s\n",
                mxop_err_name(rc), mxop_last_error(c));
        mxop_close(c);
        return MXOP_CLI_EXIT_FAILED;
    }
    snprintf(how, howlen, "a new worker started and mapped a region");
    mxop_close(c);
    return MXOP_CLI_EXIT_OK;
}

int mxop__cmd_health(int argc, char **argv)
{
    static const struct option opts[] = {{"live", no_argument, NULL, 'l'},
                                         {"ready", no_argument, NULL, 'r'},
                                         {"spawn", no_argument, NULL, 'S'},
                                         {"timeout-ms", required_argument, NULL, 't'},
                                         {"socket", required_argument, NULL, 's'},
                                         {"quiet", no_argument, NULL, 'q'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sock = NULL;
    int want_live = 0, want_ready = 0, spawn = 0, quiet = 0, ch;
    long timeout_ms = DEFAULT_TIMEOUT_MS;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "lrSt:s:qjh", opts, NULL)) != -1) {
        switch (ch) {
        case 'l': want_live = 1; break;
        case 'r': want_ready = 1; break;
        case 'S': spawn = 1; break;
        case 't': {
            char *end;
            errno = 0;
            timeout_ms = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || end == optarg || timeout_ms < 1 ||
                timeout_ms > 600000) {
                fprintf(stderr, "mxop health: --timeout-ms must be 1..600000, not '%s'\n", optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            break;
        }
        case 's': sock = optarg; break;
        case 'q': quiet = 1; break;
        case 'j': break; /* the global option; health prints one line either way */
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mxop health: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    if (want_live == want_ready || (spawn && !want_ready)) {
        fprintf(stderr, "mxop health: give exactly one of --live and --ready (--spawn goes with "
                        "--ready)\n");
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *path = mxop__cli_socket("health", sock);
    if (path == NULL)
        return MXOP_CLI_EXIT_USAGE;

    Mxop__Reply *r = NULL;
    int rc = live(path, (int)timeout_ms, &r);
    if (rc != MXOP_CLI_EXIT_OK)
        return rc;
    const Mxop__DaemonStatusReply *st = r->daemon_status;
    if (want_live) {
        if (!quiet)
            printf("live: mxop-serverd %s, pid %u, up %llu ms\n", st->version, (unsigned)st->pid,
                   (unsigned long long)st->uptime_ms);
        mxop__reply__free_unpacked(r, NULL);
        return MXOP_CLI_EXIT_OK;
    }
    char how[160];
    const Mxop__SessionStatus *s = spawn ? NULL : proven_session(st);
    if (s != NULL) {
        snprintf(how, sizeof(how), "session %llu's worker %u runs in the sandbox",
                 (unsigned long long)s->id, (unsigned)s->worker_pid);
        rc = MXOP_CLI_EXIT_OK;
    } else {
        rc = spawn_check(path, (int)timeout_ms, how, sizeof(how));
    }
    if (rc == MXOP_CLI_EXIT_OK && !quiet)
        printf("ready: mxop-serverd %s, sandbox %s: %s\n", st->version, st->sandbox, how);
    mxop__reply__free_unpacked(r, NULL);
    return rc;
}
