/*
 * client/dtype.c - dtype names and sizes for the bindings, from the one
 * table (MXOP_DTYPE_MAP in mxop/types.h), so that ctypes and the C
 * extensions build their maps from libmxop instead of tables of their own.
 */
#include <string.h>

#include "mxop/client.h"

int32_t mxop_dtype_from_name(const char *name)
{
    if (name == NULL)
        return MXOP_EINVAL;
#define FROM_NAME(e, short_name, size, fw)                                                         \
    if (strcmp(name, short_name) == 0 || strcmp(name, fw) == 0)                                    \
        return e;
    MXOP_DTYPE_MAP(FROM_NAME)
#undef FROM_NAME
    return MXOP_EINVAL;
}

int mxop_dtype_info(int32_t code, const char **short_name, const char **framework_name,
                    size_t *size)
{
    const char *s = NULL, *fw = NULL;
    size_t n = 0;
    switch (code) {
#define INFO(e, short_name_, size_, fw_)                                                           \
    case e:                                                                                        \
        s = short_name_;                                                                           \
        fw = fw_;                                                                                  \
        n = size_;                                                                                 \
        break;
        MXOP_DTYPE_MAP(INFO)
#undef INFO
    default: return MXOP_EINVAL;
    }
    if (short_name != NULL)
        *short_name = s;
    if (framework_name != NULL)
        *framework_name = fw;
    if (size != NULL)
        *size = n;
    return 0;
}
