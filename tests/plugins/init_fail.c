/*
 * tests/plugins/init_fail.c - an init that refuses to start, with a
 * message: the load must fail with MXOP_ELIB_INIT and that message.
 */
#include "mxop/op.h"

MXOP_PLUGIN("init_fail", "1.0");

MXOP_PLUGIN_INIT(ctx, host)
{
    return host->set_error(ctx, MXOP_ELIB_INIT, "init_fail: refusing to start");
}
