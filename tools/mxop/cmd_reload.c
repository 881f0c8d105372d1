/*
 * `mxop reload LIB`: every session running library LIB (a path relative to
 * the daemon's plugin directory) gets its worker replaced between calls by
 * one that loads the file now at that path; new sessions load it anyway.
 * Administrators only (the daemon's uid, root, --admin-uid).  Prints the
 * new version and the sessions moved to it once they all run it.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tools/mxop/cli.h"
#include "tools/mxop/commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mxop reload [--socket PATH] [--json] [--timeout-ms N] LIB\n\n"
               "Replaces library LIB (a path relative to the daemon's plugin directory) in every\n"
               "session that loaded it: each session's worker is replaced between two calls by\n"
               "one that loads the file now at that path (stateful instances are lost, as after\n"
               "a crash; no call is lost). New sessions load the new file anyway. Prints the new\n"
               "version (path, device, inode, size, mtime, SHA-256) and the sessions moved to\n"
               "it, once all of them run it. Administrators only: the daemon's user, root, or\n"
               "a user given to the daemon with --admin-uid.\n\n"
               "  --socket PATH    the daemon's control socket (default $MXOP_SOCKET)\n"
               "  --json           one JSON object instead of text\n"
               "  --timeout-ms N   how long to wait for the sessions (default 60000)\n\n"
               "exit status: 0 reloaded, 1 refused by the daemon, 2 bad arguments, 3 no daemon\n");
}

int mxop__cmd_reload(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"timeout-ms", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sock = NULL;
    bool json = false;
    long timeout_ms = 60000;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "s:jt:h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'j': json = true; break;
        case 't': {
            char *end;
            timeout_ms = strtol(optarg, &end, 10);
            if (*end != '\0' || timeout_ms <= 0 || timeout_ms > 3600000) {
                fprintf(stderr, "mxop reload: --timeout-ms must be 1..3600000, not '%s'\n", optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            break;
        }
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "mxop reload: give exactly one library\n");
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *lib = argv[optind];

    mxop__cli_conn_t c;
    char err[1024];
    int rc = mxop__cli_open(&c, sock, 10000, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "mxop reload: %s\n", err);
        return rc == MXOP_EINVAL ? MXOP_CLI_EXIT_USAGE : MXOP_CLI_EXIT_NO_DAEMON;
    }
    Mxop__Reload rl = MXOP__RELOAD__INIT;
    rl.library = (char *)lib;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_RELOAD;
    req.reload = &rl;
    Mxop__Reply *r;
    rc = mxop__cli_ask(&c, &req, (int)timeout_ms, &r, err, sizeof(err));
    if (rc != 0 || r->body_case != MXOP__REPLY__BODY_RELOAD || r->reload->version == NULL) {
        fprintf(stderr, "mxop reload: %s: %s\n", rc != 0 ? mxop_err_name(rc) : "MXOP_EPROTOCOL",
                rc != 0 ? err : "the daemon's reply carries no ReloadReply");
        mxop__cli_close(&c);
        return MXOP_CLI_EXIT_FAILED;
    }
    const Mxop__ReloadReply *rr = r->reload;
    if (json) {
        printf("{\"version\": ");
        mxop__print_libver(stdout, rr->version, true, "");
        printf(", \"sessions\": [");
        for (size_t i = 0; i < rr->n_session_ids; i++)
            printf("%s%llu", i ? ", " : "", (unsigned long long)rr->session_ids[i]);
        printf("]}\n");
    } else {
        printf("reloaded %s\n", lib);
        mxop__print_libver(stdout, rr->version, false, "  ");
        printf("  sessions: %u", rr->sessions);
        for (size_t i = 0; i < rr->n_session_ids; i++)
            printf("%s%llu", i ? ", " : " (", (unsigned long long)rr->session_ids[i]);
        printf("%s\n", rr->n_session_ids ? ")" : "");
    }
    mxop__cli_close(&c);
    return MXOP_CLI_EXIT_OK;
}
