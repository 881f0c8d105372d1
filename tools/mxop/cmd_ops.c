/* `mxop ops`: TO BE WRITTEN (placeholder so that the command builds). */
#include <stdio.h>

#include "tools/mxop/commands.h"

int mxop__cmd_ops(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mxop ops: not written yet\n");
    return MXOP_CLI_EXIT_USAGE;
}
