/*
 * server/worker/mxnet/registry.c - the MXNet libraries a worker opened and
 * the ops they registered, and their messages.
 *
 * lib.c adds to these tables when it opens a library and registers its ops;
 * call.c's callbacks find their op and library here by the call's op index.
 * Both tables only grow: an op index is mxop's, and a library's ops stay
 * registered for the worker's life.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "server/worker/mxnet/mxnet.h"
#include "server/worker/worker.h"

/* Libraries and ops; both tables only grow (an op index is mxop's). */
static mxop__mx_lib_t *libs;
static uint32_t n_libs;
static mxop__mx_op_t *ops;
static uint32_t cap_ops;

int mxop__mx_lib_add(const mxop__mx_lib_t *l)
{
    mxop__mx_lib_t *p = realloc(libs, (size_t)(n_libs + 1) * sizeof(*p));
    if (p == NULL)
        return -1;
    libs = p;
    libs[n_libs] = *l;
    return (int)n_libs++;
}

int mxop__mx_op_reserve(uint32_t need)
{
    if (need <= cap_ops)
        return 0;
    uint32_t cap = cap_ops ? cap_ops : 64;
    while (cap < need)
        cap *= 2;
    mxop__mx_op_t *p = realloc(ops, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return MXOP_ENOMEM;
    memset(p + cap_ops, 0, (size_t)(cap - cap_ops) * sizeof(*p));
    ops = p;
    cap_ops = cap;
    return 0;
}

void mxop__mx_op_set(uint32_t index, const mxop__mx_op_t *mo)
{
    if (index < cap_ops)
        ops[index] = *mo;
}

const mxop__mx_op_t *mxop__mx_op_get(uint32_t index)
{
    if (index >= cap_ops)
        return NULL;
    const mxop__mx_op_t *o = &ops[index];
    if (o->fwd_cpu == NULL && o->fwd_gpu == NULL && o->create_cpu == NULL && o->create_gpu == NULL)
        return NULL;
    return &ops[index];
}

void mxop__mx_note_rng(uint32_t index, int used)
{
    if (index >= cap_ops)
        return;
    if (used)
        ops[index].rng = MXOP__MX_RNG_USES;
    else if (ops[index].rng == MXOP__MX_RNG_UNKNOWN)
        ops[index].rng = MXOP__MX_RNG_NONE;
}

mxop__mx_lib_t *mxop__mx_lib_get(uint32_t lib)
{
    return lib < n_libs ? &libs[lib] : NULL;
}

/* ------------------------------------------------------------------------ */
/* Messages */

void mxop__mx_read_msgs(mxop__mx_lib_t *l, char *buf, size_t len)
{
    buf[0] = '\0';
    int n = l->abi.msg_size();
    size_t used = 0;
    for (int i = l->msgs_seen; i < n; i++) {
        const char *m = NULL;
        l->abi.msg_get(i, &m);
        if (m == NULL || m[0] == '\0')
            continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? "; " : "", m);
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
    /* Trailing newlines from MX_ERROR_MSG << ... << std::endl read badly in one line. */
    while (used > 0 && (buf[used - 1] == '\n' || buf[used - 1] == ' '))
        buf[--used] = '\0';
    if (n > l->msgs_seen)
        l->msgs_seen = n;
}

void mxop__mx_skip_msgs(uint32_t lib)
{
    mxop__mx_lib_t *l = mxop__mx_lib_get(lib);
    if (l != NULL) {
        int n = l->abi.msg_size();
        if (n > l->msgs_seen)
            l->msgs_seen = n;
    }
}

int mxop__mx_fail(mxop_ctx_t *ctx, uint32_t lib, int code, const char *fallback)
{
    char said[MXOP__W_MSG_MAX];
    const char *op = mxop__ctx.op != NULL ? mxop__ctx.op->name : "?";
    mxop__mx_read_msgs(&libs[lib], said, sizeof(said));
    if (said[0] != '\0')
        return mxop__host.set_error(ctx, code, "op '%s': %s", op, said);
    return mxop__host.set_error(ctx, code, "op '%s': %s", op, fallback);
}

int mxop__mx_fail_why(mxop_ctx_t *ctx, uint32_t lib, int code, const char *why)
{
    char said[MXOP__W_MSG_MAX];
    const char *op = mxop__ctx.op != NULL ? mxop__ctx.op->name : "?";
    mxop__mx_read_msgs(&libs[lib], said, sizeof(said));
    if (said[0] != '\0')
        return mxop__host.set_error(ctx, code, "op '%s': %s (%s)", op, said, why);
    return mxop__host.set_error(ctx, code, "op '%s': %s", op, why);
}
