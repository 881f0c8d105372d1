/*
 * tests/plugins/abi_newer.c - a library that needs a worker newer than
 * today's: built for the next ABI and requiring it (what MXOP_PLUGIN
 * writes in a library built against the next header).  The worker must
 * refuse it with MXOP_EABI naming both versions before running any of its
 * code, so its init, which would end the worker, never runs.
 */
#include <stdlib.h>

#include "mxop/op.h"

MXOP_EXPORT extern const mxop_plugin_info_t mxop_plugin_info;
const mxop_plugin_info_t mxop_plugin_info = {
    .struct_size = sizeof(mxop_plugin_info_t),
    .abi_version = MXOP_ABI_VERSION + 1,
    .name = "abi_newer",
    .version = "1.0",
    .abi_required = MXOP_ABI_VERSION + 1,
    .tensor_size = sizeof(mxop_tensor_t),
};

MXOP_PLUGIN_INIT(ctx, host)
{
    abort();
}
