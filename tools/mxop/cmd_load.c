/*
 * `mxop load LIB`: opens a session, loads library LIB into its worker, and
 * prints the library's ops briefly and the version the worker was given
 * (path, device and inode, size, mtime, SHA-256), as the daemon read it.
 * The session ends when the command does: this checks that a library
 * loads, and which file the daemon would give a new session now.
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
    fprintf(f, "usage: mxop load [--socket PATH] [--json] LIB\n\n"
               "Loads library LIB (a path relative to the daemon's plugin directory) into a new\n"
               "session, prints its ops (name, inputs, outputs, flags) and its version as the\n"
               "daemon read it (path, device, inode, size, mtime, SHA-256), then ends the\n"
               "session.\n\n"
               "  --socket PATH    the daemon's control socket (default $MXOP_SOCKET)\n"
               "  --json           one JSON object instead of text\n\n"
               "exit status: 0 loaded, 1 the library did not load, 2 bad arguments, 3 no daemon\n");
}

static void print_op(const Mxop__OpInfo *op, bool json, bool first)
{
    char in[16];
    if (op->num_inputs < 0)
        snprintf(in, sizeof(in), "%d+", op->min_inputs);
    else
        snprintf(in, sizeof(in), "%d", op->num_inputs);
    if (json) {
        printf("%s{\"name\": ", first ? "" : ", ");
        mxop__json_str(stdout, op->name);
        printf(", \"inputs\": ");
        mxop__json_str(stdout, in);
        printf(", \"outputs\": %d, \"backward\": %s, \"stateful\": %s, \"attrs\": %zu}",
               op->num_outputs, op->has_backward ? "true" : "false",
               op->stateful ? "true" : "false", op->n_attrs);
        return;
    }
    printf("  %-24s %s in, %d out%s%s%s", op->name, in, op->num_outputs,
           op->has_backward ? ", backward" : "", op->stateful ? ", stateful" : "",
           op->mutated_inputs ? ", mutates inputs" : "");
    if (op->n_attrs > 0)
        printf(", %zu attrs", op->n_attrs);
    printf("\n");
}

int mxop__cmd_load(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sock = NULL;
    bool json = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "s:jh", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'j': json = true; break;
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "mxop load: give exactly one library\n");
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *lib = argv[optind];

    mxop__cli_conn_t c;
    char err[1024];
    int rc = mxop__cli_open(&c, sock, 10000, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "mxop load: %s\n", err);
        return rc == MXOP_EINVAL ? MXOP_CLI_EXIT_USAGE : MXOP_CLI_EXIT_NO_DAEMON;
    }
    Mxop__Reply *r;
    Mxop__OpenSession os = MXOP__OPEN_SESSION__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &os;
    rc = mxop__cli_ask(&c, &req, 30000, &r, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "mxop load: cannot open a session: %s: %s\n", mxop_err_name(rc), err);
        mxop__cli_close(&c);
        return MXOP_CLI_EXIT_FAILED;
    }

    Mxop__LoadLibrary ll = MXOP__LOAD_LIBRARY__INIT;
    ll.path = (char *)lib;
    req = (Mxop__Request)MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_LOAD_LIBRARY;
    req.load_library = &ll;
    rc = mxop__cli_ask(&c, &req, 60000, &r, err, sizeof(err));
    if (rc != 0 || r->body_case != MXOP__REPLY__BODY_OPS) {
        fprintf(stderr, "mxop load: %s: %s: %s\n", lib,
                rc != 0 ? mxop_err_name(rc) : "MXOP_EPROTOCOL",
                rc != 0 ? err : "the reply carries no op list");
        mxop__cli_close(&c);
        return MXOP_CLI_EXIT_FAILED;
    }
    /* The reply lives in the connection's arena until the next request: print it now. */
    const Mxop__OpList *ol = r->ops;
    size_t n_ops = 0;
    if (json)
        printf("{\"ops\": [");
    else
        printf("loaded %s\n", lib);
    for (size_t i = 0; i < ol->n_ops; i++) {
        if (ol->ops[i]->library == NULL || strcmp(ol->ops[i]->library, lib) != 0)
            continue;
        print_op(ol->ops[i], json, n_ops == 0);
        n_ops++;
    }
    if (!json && n_ops == 0)
        printf("  (no ops)\n");

    Mxop__SessionLibraries sl = MXOP__SESSION_LIBRARIES__INIT;
    req = (Mxop__Request)MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_SESSION_LIBRARIES;
    req.session_libraries = &sl;
    rc = mxop__cli_ask(&c, &req, 10000, &r, err, sizeof(err));
    const Mxop__LibraryVersion *v = NULL;
    if (rc == 0 && r->body_case == MXOP__REPLY__BODY_SESSION_LIBRARIES)
        for (size_t i = 0; i < r->session_libraries->n_libraries; i++)
            if (strcmp(r->session_libraries->libraries[i]->name, lib) == 0)
                v = r->session_libraries->libraries[i];
    if (json) {
        printf("], \"version\": ");
        if (v != NULL)
            mxop__print_libver(stdout, v, true, "");
        else
            printf("null");
        printf("}\n");
    } else if (v != NULL) {
        mxop__print_libver(stdout, v, false, "  ");
    }
    mxop__cli_close(&c);
    if (v == NULL) {
        fprintf(stderr, "mxop load: %s loaded, but its version could not be had: %s\n", lib,
                rc != 0 ? err : "not in the session's library list");
        return MXOP_CLI_EXIT_FAILED;
    }
    return MXOP_CLI_EXIT_OK;
}
