/*
 * tests/plugins/stop_init.c - a library whose mxop_plugin_init stops its
 * own worker (SIGSTOP), as a library that runs a debugger hook or traps
 * into a tracer at load could: the daemon must find the worker stopped,
 * kill it and answer the load with a clear error, while its loop serves
 * every other client (tests/test_loop_blocking.c).  A worker that is pid 1
 * of its own pid namespace (--sandbox strict) cannot stop itself: the
 * signal is dropped and the init then fails with a message saying so.
 */
#include <signal.h>

#include "mxop/op.h"

MXOP_PLUGIN("stop_init", "1.0");

MXOP_PLUGIN_INIT(ctx, host)
{
    raise(SIGSTOP);
    return host->set_error(ctx, MXOP_ELIB_INIT, "stop_init: the worker did not stop");
}
