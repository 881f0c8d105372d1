/*
 * tests/plugins/bad_abi.c - claims an ABI version from the future (999).
 * The worker must refuse it with MXOP_EABI before running any of its code,
 * so the init below, which registers nothing, must never be called.
 */
#include "mxop/op.h"

MXOP_EXPORT extern const mxop_plugin_info_t mxop_plugin_info;
/* Built for ABI 999 and requiring it: a library that runs in no worker of today. */
const mxop_plugin_info_t mxop_plugin_info = {sizeof(mxop_plugin_info_t), 999, "bad_abi", "1.0", 999,
                                             sizeof(mxop_tensor_t)};

MXOP_PLUGIN_INIT(ctx, host)
{
    return 0;
}
