/*
 * tests/plugins/no_info.c - exports mxop_plugin_init but no
 * mxop_plugin_info, so the worker cannot know its ABI version and must
 * refuse it (MXOP_ELIB_INVALID) without calling init.
 */
#include "mxop/op.h"

MXOP_PLUGIN_INIT(ctx, host)
{
    return 0;
}
