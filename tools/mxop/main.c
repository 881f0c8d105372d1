/*
 * `mxop`: one command for the people who run mxop-serverd on a node and for
 * op authors. It talks to the daemon over its control socket (--socket, else
 * $MXOP_SOCKET) like any client; each subcommand is a file of its own.
 *
 * The options every subcommand takes (--socket, --json) may also come
 * before the subcommand's name: main moves them behind it, where the
 * subcommand's own getopt_long reads them, so that one parser owns each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mxop/commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand_t;

static const subcommand_t subcommands[] = {
    {"status", mxop__cmd_status, "the daemon: version, uptime, sandbox layers, sessions, workers"},
    {"ops", mxop__cmd_ops, "the ops of a library: signatures, attributes, flags"},
    {"stats", mxop__cmd_stats, "calls, errors, crashes and latency per op and per session"},
    {"top", mxop__cmd_top, "a live view of calls/s, p99 and crashes per op"},
    {"run", mxop__cmd_run, "run one op on random or file inputs"},
    {"verify", mxop__cmd_verify, "an op library's conformance run"},
    {"load", mxop__cmd_load, "load a library into the daemon and list its ops"},
    {"reload", mxop__cmd_reload, "replace a library in every session using it"},
    {"health", mxop__cmd_health, "a probe: --live (the loop answers), --ready (workers start)"},
};

static void usage(FILE *to)
{
    fprintf(to,
            "usage: mxop [--help] [--socket PATH] [--json] SUBCOMMAND [ARGS...]\n\n"
            "Talks to mxop-serverd over its control socket (--socket PATH, else $MXOP_SOCKET).\n"
            "--socket and --json go before or after SUBCOMMAND (after it wins).\n"
            "Every subcommand takes --help.\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(to, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(to, "\nexit status: 0 done, 1 failed (an error from the daemon, or a failed check),\n"
                "2 bad arguments, 3 no daemon reachable. See docs/operations.md.\n");
}

static int is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help");
}

/*
 * How many arguments at argv[i] form one global option (1 or 2), 0 when
 * argv[i] is not an option, -1 (after a sentence on stderr) when it is an
 * option that is not global or lacks its value.
 */
static int global_option(int argc, char **argv, int i)
{
    const char *a = argv[i];
    if (a[0] != '-')
        return 0;
    if (!strcmp(a, "--json") || !strncmp(a, "--socket=", 9))
        return 1;
    if (!strcmp(a, "--socket")) {
        if (i + 1 < argc)
            return 2;
        fprintf(stderr, "mxop: --socket needs a PATH\n");
        return -1;
    }
    fprintf(stderr,
            "mxop: '%s' is not an option before the subcommand (there: --socket PATH, --json, "
            "--help)\n",
            a);
    return -1;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (int n; i < argc && !is_help(argv[i]); i += n) {
        n = global_option(argc, argv, i);
        if (n == 0)
            break;
        if (n < 0) {
            usage(stderr);
            return MXOP_CLI_EXIT_USAGE;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    if (is_help(argv[i])) {
        usage(stdout);
        return MXOP_CLI_EXIT_OK;
    }
    const subcommand_t *sub = NULL;
    for (size_t k = 0; k < sizeof(subcommands) / sizeof(subcommands[0]); k++)
        if (!strcmp(argv[i], subcommands[k].name))
            sub = &subcommands[k];
    if (sub == NULL) {
        fprintf(stderr, "mxop: unknown subcommand '%s'\n", argv[i]);
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }

    /* The subcommand sees NAME, the global options, then its own arguments:
     * given twice, the option after the subcommand is read last and wins. */
    int nglobal = i - 1, sub_argc = argc - 1;
    char **sub_argv = calloc((size_t)argc + 1, sizeof(*sub_argv));
    if (sub_argv == NULL) {
        fprintf(stderr, "mxop: out of memory\n");
        return MXOP_CLI_EXIT_FAILED;
    }
    sub_argv[0] = argv[i];
    memcpy(sub_argv + 1, argv + 1, (size_t)nglobal * sizeof(*sub_argv));
    memcpy(sub_argv + 1 + nglobal, argv + i + 1, (size_t)(argc - i - 1) * sizeof(*sub_argv));
    sub_argv[sub_argc] = NULL;
    int rc = sub->run(sub_argc, sub_argv);
    free(sub_argv);
    return rc;
}
