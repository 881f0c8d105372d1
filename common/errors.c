/*
 * common/errors.c - names and messages of the error table in mxop/errors.h.
 */
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
