/*
 * client/error.c - the detail of a client's last failure: its own
 * (c->err), or, per thread, that of the last failed call a pool's sibling
 * session made for it (pool.c), which mxop_last_error shows instead.
 * Every other file of the client reports through here; this file calls
 * none of them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"

/* The detail of the last failed sibling call, per thread (mxop_last_error). */
static _Thread_local const mxop_client_t *sibling_client;
static _Thread_local char sibling_msg[MXOP__ERR_MAX];

int mxop__fail(mxop_client_t *c, int code, const char *fmt, ...)
{
    va_list ap;
    char tmp[MXOP__ERR_MAX];

    /* Formatting through a copy lets a detail quote the previous one. */
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        tmp[0] = '\0';
    memcpy(c->err, tmp, sizeof tmp);
    /* This thread's latest failure is now this one, not a sibling call's. */
    sibling_client = NULL;
    return code;
}

void mxop__error_of_sibling(const mxop_client_t *c, const char *msg)
{
    mxop__fmt(sibling_msg, sizeof sibling_msg, "%s", msg);
    sibling_client = c;
}

void mxop__error_forget_sibling(void)
{
    sibling_client = NULL;
}

const char *mxop_last_error(const mxop_client_t *c)
{
    if (c == NULL)
        return "no client (NULL)";
    return sibling_client == c ? sibling_msg : c->err;
}
