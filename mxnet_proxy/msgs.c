/*
 * mxnet_proxy/msgs.c - the messages MXNet reads back after a callback.
 *
 * MXNet calls _msgSize / _msgGet right after each callback, in the same
 * thread, and shows every message it gets in its MXNetError.  So the list
 * is per thread and emptied when a callback starts: an error carries what
 * went wrong in that call only (MXNet's own lib_api keeps one list that
 * only grows, so its errors repeat every earlier message).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mxnet_proxy/proxy.h"

enum { MAX_MSGS = 8, MSG_LEN = 1024 };

static _Thread_local char msgs[MAX_MSGS][MSG_LEN];
static _Thread_local int n_msgs;

void mxop__px_msgs_clear(void)
{
    n_msgs = 0;
}

int mxop__px_fail(const char *fmt, ...)
{
    if (n_msgs < MAX_MSGS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msgs[n_msgs], MSG_LEN, fmt, ap);
        va_end(ap);
        n_msgs++;
    }
    return MXOP__MX_FAIL;
}

int mxop__px_msgs_count(void)
{
    return n_msgs;
}

const char *mxop__px_msgs_get(int i)
{
    return i >= 0 && i < n_msgs ? msgs[i] : "";
}
