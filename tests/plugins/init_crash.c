/*
 * tests/plugins/init_crash.c - an init that segfaults: the load must end
 * only the worker (MXOP_EWORKER_CRASHED), and the session goes on.
 */
#include "mxop/op.h"

MXOP_PLUGIN("init_crash", "1.0");

/* volatile: read at run time, so the store is neither dropped nor flagged by the compiler. */
static int *volatile bad_pointer;

MXOP_PLUGIN_INIT(ctx, host)
{
    *bad_pointer = 42;
    return 0;
}
