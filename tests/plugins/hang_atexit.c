/*
 * tests/plugins/hang_atexit.c - a library whose init registers an atexit
 * handler that never returns.  It registers no op; it hangs only if the
 * process that loaded it calls exit().  A worker retired by a reload must
 * end without running it (tests/test_reload.c).
 */
#include <stdlib.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hang_atexit", "1.0");

static void hang_for_ever(void)
{
    for (;;)
        sleep(1);
}

MXOP_PLUGIN_INIT(ctx, host)
{
    (void)ctx;
    (void)host;
    atexit(hang_for_ever);
    return 0;
}
