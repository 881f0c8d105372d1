/*
 * `mxop verify LIB [--op NAME] [--attr K=V]... [--seed N] [--socket PATH] [--json]`
 *
 * An op library's conformance run: every op (or one) on random inputs of
 * several shapes and every dtype it accepts, one line per op and check
 * (PASS, FAIL or SKIP with the reason), a summary, exit status 1 when a
 * check failed.  The checks are in verify_checks.c and verify_cases.c.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mxop/commands.h"
#include "tools/mxop/verify_checks.h"

/* The checks in the order of their lines. */
static const char *const check_names[] = {
    "shapes",      "dtypes",       "forward", "infer",   "written",  "bounds", "inputs", "alias",
    "determinism", "fresh-worker", "grad",    "req-add", "req-null", "attrs",  "state",
};

static void usage(FILE *to)
{
    fprintf(to, "usage: mxop verify LIB [--op NAME] [--attr K=V]... [--seed N] [--timeout-ms N]\n"
                "                   [--socket PATH] [--json]\n\n"
                "Checks every op of library LIB (or only NAME) on random inputs of several shapes\n"
                "(3x4, 5, 0-d, 0, 0x3, 2x3x4; 3x4 and 4x2 for two inputs; also empty) and every\n"
                "dtype inference accepts; a shape or dtype inference refuses is skipped, not a\n"
                "failure. One line per op and check: STATUS OP CHECK DETAIL, then a summary.\n\n"
                "checks:\n"
                "  shapes, dtypes  what inference accepts (SKIP when nothing)\n"
                "  forward       forward succeeds on every case inference accepts\n"
                "  infer         forward writes the shapes inference gave, not fewer elements\n"
                "  written       every output element written (poisoned with 0xA5, then NaN)\n"
                "  bounds        no write past an output's end or before its start (nor a\n"
                "                gradient buffer's): 16 KiB canaries on each side; the private\n"
                "                daemon trusts LIB so that outputs are written in place (SKIP\n"
                "                against a daemon that copies them through scratch)\n"
                "  inputs        inputs not declared mutated stay as they were (a write the\n"
                "                sandbox catches, MXOP_EINPUT_WRITTEN, fails this check)\n"
                "  alias         no output's memory overlaps an input's\n"
                "  determinism   same inputs and seed, same outputs: two calls in one worker\n"
                "  fresh-worker  ... and in a new session's worker\n"
                "  grad          backward vs central differences in f64 (eps 1e-6, atol 1e-5,\n"
                "                rtol 1e-3, gradcheck's)\n"
                "  req-add       req add accumulates onto a pre-filled gradient buffer\n"
                "  req-null      req null leaves gradient buffers alone\n"
                "  attrs         declared defaults accepted; wrong types, unknown keys and\n"
                "                missing required ones refused with MXOP_EATTR\n"
                "  state         a stateful op's create/use/destroy cycles\n\n"
                "  --op NAME      only this op\n"
                "  --attr K=V     an attribute for every call (required attributes without one\n"
                "                 get an ordinary value of their type)\n"
                "  --seed N       inputs' and calls' seed (default 1)\n"
                "  --timeout-ms N the deadline of each call (default 10000): a hanging op fails\n"
                "                 its check with MXOP_ETIMEOUT\n"
                "  --socket PATH  a running daemon (else $MXOP_SOCKET); LIB is then a name in its\n"
                "                 plugin directory. Without either, a private daemon is started\n"
                "                 with a copy of LIB (a path, or a name in build/plugins).\n"
                "  --json         one JSON object: results [{op, check, status, detail, cases}]\n\n"
                "exit status: 0 every check passed or was skipped, 1 a check failed (or the\n"
                "library could not be loaded), 2 bad arguments, 3 no daemon reachable.\n");
}

int mxop__cmd_verify(int argc, char **argv)
{
    static const struct option opts[] = {
        {"op", required_argument, NULL, 'o'},   {"attr", required_argument, NULL, 'a'},
        {"seed", required_argument, NULL, 's'}, {"socket", required_argument, NULL, 'S'},
        {"json", no_argument, NULL, 'j'},       {"timeout-ms", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
    };
    const char *only = NULL, *socket = NULL;
    static const char *user_attrs[2 * 64 + 1];
    int n_user = 0, json = 0, c;
    uint64_t seed = 1;
    long timeout_ms = 10000;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': only = optarg; break;
        case 'a': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || n_user == 64) {
                fprintf(stderr, "mxop verify: --attr '%s' is not K=V (at most 64)\n", optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            *eq = '\0';
            user_attrs[2 * n_user] = optarg;
            user_attrs[2 * n_user + 1] = eq + 1;
            n_user++;
            break;
        }
        case 's': {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 0);
            if (errno || *end || !*optarg || seed == 0) {
                fprintf(stderr, "mxop verify: --seed '%s' is not a positive integer\n", optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            break;
        }
        case 'S': socket = optarg; break;
        case 'j': json = 1; break;
        case 't': {
            char *end;
            timeout_ms = strtol(optarg, &end, 10);
            if (*end || !*optarg || timeout_ms <= 0 || timeout_ms > 3600000) {
                fprintf(stderr, "mxop verify: --timeout-ms '%s' is not in [1, 3600000]\n", optarg);
                return MXOP_CLI_EXIT_USAGE;
            }
            break;
        }
        case 'h': usage(stdout); return MXOP_CLI_EXIT_OK;
        default: usage(stderr); return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "mxop verify: give one LIB\n");
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    const char *lib = argv[optind];
    char err[1024];
    mxop__run_daemon_t d;
    if (mxop__run_daemon_open(&d, lib, socket, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "mxop verify: %s\n", err);
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    int status = MXOP_CLI_EXIT_FAILED;
    mxop__verify_report_t *rep = mxop__verify_report_new();
    static mxop__verify_t v;
    memset(&v, 0, sizeof(v));
    int rc = mxop__run_session_open(&d, "mxop verify", &v.c, err, sizeof(err));
    if (rc != 0 || !rep) {
        fprintf(stderr, "mxop verify: %s\n", rep ? err : "out of memory");
        if (rc == MXOP_EDISCONNECTED || rc == MXOP_EINVAL)
            status = MXOP_CLI_EXIT_NO_DAEMON;
        goto out;
    }
    mxop_set_timeout(v.c, (int32_t)timeout_ms);
    v.timeout_ms = (int32_t)timeout_ms;
    v.daemon = &d;
    v.rep = rep;
    v.seed = seed;
    user_attrs[2 * n_user] = NULL;
    v.user_attrs = user_attrs;
    v.n_user_attrs = n_user;
    int n_ops = mxop_op_count(v.c), found = 0;
    for (int i = 0; i < n_ops; i++) {
        v.op = mxop_op_at(v.c, i);
        v.info = (mxop_op_info_v2_t){.struct_size = sizeof(v.info)};
        if (!v.op || mxop_op_info_v2(v.op, &v.info) != 0)
            continue;
        /* A session may hold other libraries' ops (a shared daemon): only LIB's. */
        if (strcmp(v.info.library, d.library) != 0 || (only && strcmp(only, v.info.name) != 0))
            continue;
        found++;
        v.name = v.info.name;
        v.halted = 0;
        for (size_t j = 0; j < sizeof(check_names) / sizeof(check_names[0]); j++)
            mxop__verify_expect(rep, v.name, check_names[j]);
        mxop__verify_find_cases(&v);
        mxop__verify_run_cases(&v);
        mxop__verify_check_attrs(&v);
        mxop__verify_check_state(&v);
    }
    if (found == 0) {
        fprintf(stderr, "mxop verify: %s has no op%s%s\n", d.library, only ? " named " : "s",
                only ? only : "");
        status = only ? MXOP_CLI_EXIT_USAGE : MXOP_CLI_EXIT_FAILED;
        goto out;
    }
    status =
        mxop__verify_print(rep, stdout, d.library, json) ? MXOP_CLI_EXIT_FAILED : MXOP_CLI_EXIT_OK;
out:
    mxop_close(v.c);
    mxop__verify_report_free(rep);
    mxop__run_daemon_close(&d);
    return status;
}
