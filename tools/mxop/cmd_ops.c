/*
 * `mxop ops [LIB]`: each op's signature (inputs, outputs, variadic), its
 * declared attributes with types and defaults, and its flags.  With LIB,
 * a session of its own loads LIB (a name in the daemon's plugin directory,
 * as LoadLibrary takes it) and lists its ops; without, the ops the
 * daemon's sessions have loaded (those the asker may see, as in status).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mxop/cli.h"
#include "tools/mxop/commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mxop ops [--socket PATH] [--json] [LIB]\n\n"
               "Lists ops: signature (inputs, outputs, variadic), declared attributes with\n"
               "types and defaults, flags (backward, stateful, cpu, gpu, strided,\n"
               "mutates-inputs, dynamic-outputs).\n"
               "With LIB (a library in the daemon's plugin directory, as a client loads it),\n"
               "opens a session, loads LIB and lists its ops.  Without LIB, lists the ops\n"
               "that the daemon's sessions have loaded (yours only, unless you are the\n"
               "daemon's user or root).\n\n"
               "  --socket PATH  the daemon's control socket (default: $MXOP_SOCKET)\n"
               "  --json         a JSON object {\"ops\": [...]} instead of text\n\n"
               "exit status: 0 done, 1 the daemon answered with an error (e.g. LIB cannot be\n"
               "loaded), 2 bad arguments, 3 no daemon reachable\n");
}

/* Prints the ops in `ops` (n of them), skipping repeats of library and name. */
static void print(Mxop__OpInfo *const *ops, size_t n, int json)
{
    if (json)
        printf("{\"ops\":[");
    size_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(ops[k]->name, ops[i]->name) == 0 &&
                   strcmp(ops[k]->library, ops[i]->library) == 0;
        if (seen)
            continue;
        if (json) {
            printf("%s", shown ? "," : "");
            mxop__cli_op_json(stdout, ops[i]);
        } else {
            printf("%s", shown ? "\n" : "");
            mxop__cli_op_text(stdout, ops[i]);
        }
        shown++;
    }
    if (json)
        printf("]}\n");
    else if (shown == 0)
        printf("no ops loaded\n");
}

static int with_lib(mxop__cli_conn_t *c, const char *lib, int json)
{
    Mxop__OpenSession os = MXOP__OPEN_SESSION__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &os;
    Mxop__Reply *r;
    int rc = mxop__cli_request("ops", c, &req, &r);
    if (rc != 0)
        return rc;
    mxop__reply__free_unpacked(r, NULL);

    Mxop__LoadLibrary ll = MXOP__LOAD_LIBRARY__INIT;
    ll.path = (char *)lib;
    req.body_case = MXOP__REQUEST__BODY_LOAD_LIBRARY;
    req.load_library = &ll;
    rc = mxop__cli_request("ops", c, &req, &r);
    if (rc != 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_OPS) {
        fprintf(stderr, "mxop ops: the daemon answered LoadLibrary without an op list\n");
        mxop__reply__free_unpacked(r, NULL);
        return MXOP_CLI_EXIT_FAILED;
    }
    if (!json)
        mxop__cli_sanitize(&r->base);
    print(r->ops->ops, r->ops->n_ops, json);
    mxop__reply__free_unpacked(r, NULL);
    return MXOP_CLI_EXIT_OK;
}

static int loaded(mxop__cli_conn_t *c, int json)
{
    Mxop__DaemonStatus body = MXOP__DAEMON_STATUS__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_DAEMON_STATUS;
    req.daemon_status = &body;
    Mxop__Reply *r;
    int rc = mxop__cli_request("ops", c, &req, &r);
    if (rc != 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_DAEMON_STATUS) {
        fprintf(stderr, "mxop ops: the daemon answered without a status\n");
        mxop__reply__free_unpacked(r, NULL);
        return MXOP_CLI_EXIT_FAILED;
    }
    if (!json)
        mxop__cli_sanitize(&r->base);
    size_t n = 0;
    const Mxop__DaemonStatusReply *st = r->daemon_status;
    for (size_t i = 0; i < st->n_sessions; i++)
        n += st->sessions[i]->n_ops;
    Mxop__OpInfo **all = calloc(n ? n : 1, sizeof(*all));
    if (all == NULL) {
        fprintf(stderr, "mxop ops: out of memory\n");
        mxop__reply__free_unpacked(r, NULL);
        return MXOP_CLI_EXIT_FAILED;
    }
    n = 0;
    for (size_t i = 0; i < st->n_sessions; i++)
        for (size_t k = 0; k < st->sessions[i]->n_ops; k++)
            all[n++] = st->sessions[i]->ops[k];
    print(all, n, json);
    free(all);
    mxop__reply__free_unpacked(r, NULL);
    return MXOP_CLI_EXIT_OK;
}

int mxop__cmd_ops(int argc, char **argv)
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
    if (argc - optind > 1) {
        fprintf(stderr, "mxop ops: one LIB at most, got '%s' too\n", argv[optind + 1]);
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *lib = optind < argc ? argv[optind] : NULL;
    if (lib != NULL && lib[0] == '\0') {
        fprintf(stderr, "mxop ops: LIB is empty\n");
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *path = mxop__cli_socket("ops", sock);
    if (path == NULL)
        return MXOP_CLI_EXIT_USAGE;
    mxop__cli_conn_t c;
    int rc = mxop__cli_connect("ops", path, &c);
    if (rc != 0)
        return rc;
    rc = lib != NULL ? with_lib(&c, lib, json) : loaded(&c, json);
    mxop__cli_close(&c);
    return rc;
}
