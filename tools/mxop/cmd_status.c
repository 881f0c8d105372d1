/* `mxop status`: TO BE WRITTEN (placeholder so that the command builds). */
#include <stdio.h>

#include "tools/mxop/commands.h"

int mxop__cmd_status(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mxop status: not written yet\n");
    return MXOP_CLI_EXIT_USAGE;
}
