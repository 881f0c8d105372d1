/*
 * tests/plugins/hang_dtor.c - a library whose ELF destructor never
 * returns.  It loads and registers nothing; it hangs only if the process
 * that loaded it runs its destructors (exit, not _exit).  A worker retired
 * by a reload must end without running it, so that the reload is answered
 * and the session's next call reaches the replacement (tests/test_reload.c).
 */
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hang_dtor", "1.0");

__attribute__((destructor)) static void hang_for_ever(void)
{
    for (;;)
        sleep(1);
}

MXOP_PLUGIN_INIT(ctx, host)
{
    (void)ctx;
    (void)host;
    return 0;
}
