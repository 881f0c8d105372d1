/*
 * tests/plugins/abi_badstride.c - declares a tensor_size no mxop_tensor_t
 * ever had (smaller than the members every version has).  Indexing tensors
 * by it would read garbage, so the worker refuses the library with
 * MXOP_EABI before its init (which would end the worker) runs.
 */
#include <stdlib.h>

#include "mxop/op.h"

MXOP_EXPORT extern const mxop_plugin_info_t mxop_plugin_info;
const mxop_plugin_info_t mxop_plugin_info = {
    .struct_size = sizeof(mxop_plugin_info_t),
    .abi_version = MXOP_ABI_VERSION,
    .name = "abi_badstride",
    .version = "1.0",
    .tensor_size = 16,
};

MXOP_PLUGIN_INIT(ctx, host)
{
    abort();
}
