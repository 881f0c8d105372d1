/*
 * The subcommands of `mxop`, the operator's and op author's command.
 *
 * Each subcommand lives in a file of its own (cmd_<name>.c) and receives the
 * arguments after its name, argv[0] being the subcommand's name, so that it
 * can parse them with getopt_long. It returns the process's exit status:
 * see MXOP_CLI_EXIT_* below, documented in docs/operations.md.
 */
#ifndef MXOP_TOOLS_COMMANDS_H
#define MXOP_TOOLS_COMMANDS_H

/* Exit statuses shared by every subcommand. */
enum {
    MXOP_CLI_EXIT_OK = 0,        /* done; for verify: every check passed */
    MXOP_CLI_EXIT_FAILED = 1,    /* the daemon answered with an error; verify: a check failed */
    MXOP_CLI_EXIT_USAGE = 2,     /* bad arguments */
    MXOP_CLI_EXIT_NO_DAEMON = 3, /* no daemon could be reached or started */
};

int mxop__cmd_status(int argc, char **argv);
int mxop__cmd_ops(int argc, char **argv);
int mxop__cmd_stats(int argc, char **argv);
int mxop__cmd_top(int argc, char **argv);
int mxop__cmd_run(int argc, char **argv);
int mxop__cmd_verify(int argc, char **argv);
int mxop__cmd_load(int argc, char **argv);
int mxop__cmd_reload(int argc, char **argv);
int mxop__cmd_health(int argc, char **argv);

#endif
