/*
 * tests/plugins/hang_init.c - a library whose mxop_plugin_init never
 * returns: the daemon must kill its worker at --init-timeout-ms and answer
 * the load with MXOP_ETIMEOUT naming the library.
 */
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hang_init", "1.0");

MXOP_PLUGIN_INIT(ctx, host)
{
    (void)ctx;
    (void)host;
    for (;;)
        sleep(1);
}
