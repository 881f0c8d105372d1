/*
 * common/errors.c - names and messages of the error table in mxop/errors.h.
 */
#include <string.h>

#include "mxop/client.h"

const char *mxop_err_name(int code)
{
    switch (code) {
    case MXOP_OK: return "MXOP_OK";
#define XX(name, num, msg)                                                                         \
    case MXOP_E##name: return "MXOP_E" #name;
        MXOP_ERROR_MAP(XX)
#undef XX
    default: return "MXOP_E?";
    }
}

const char *mxop_strerror(int code)
{
    switch (code) {
    case MXOP_OK: return "success";
#define XX(name, num, msg)                                                                         \
    case MXOP_E##name: return msg;
        MXOP_ERROR_MAP(XX)
#undef XX
    default: return "unknown error";
    }
}

int mxop_err_code(const char *name)
{
    if (name == NULL)
        return 0;
    /* "MXOP_EINVAL" and "INVAL" name the same code. */
    if (strncmp(name, "MXOP_E", 6) == 0)
        name += 6;
#define XX(n, num, msg)                                                                            \
    if (strcmp(name, #n) == 0)                                                                     \
        return MXOP_E##n;
    MXOP_ERROR_MAP(XX)
#undef XX
    return 0;
}
