/*
 * `mxop`: one command for the people who run mxop-serverd on a node and for
 * op authors. It talks to the daemon over its control socket (--socket, else
 * $MXOP_SOCKET) like any client; each subcommand is a file of its own.
 */
#include <stdio.h>
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
};

static void usage(FILE *to)
{
    fprintf(to,
            "usage: mxop [--help] SUBCOMMAND [ARGS...]\n\n"
            "Talks to mxop-serverd over its control socket (--socket PATH, else $MXOP_SOCKET).\n"
            "Every subcommand takes --help.\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(to, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(to, "\nexit status: 0 done, 1 failed (an error from the daemon, or a failed check),\n"
                "2 bad arguments, 3 no daemon reachable. See docs/operations.md.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return MXOP_CLI_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return MXOP_CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (!strcmp(argv[1], subcommands[i].name))
            return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mxop: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return MXOP_CLI_EXIT_USAGE;
}
