/*
 * server/worker/ops.c - the session's op table.
 *
 * Ops are numbered in registration order across libraries loaded in order;
 * the daemon replays the same loads after a restart, so an index names the
 * same op in every generation of a session's worker.
 */
#include <stdlib.h>
#include <string.h>

#include "server/worker/worker.h"

static mxop__worker_op_t *ops;
static uint32_t n_ops;
static uint32_t cap_ops;

const mxop__worker_op_t *mxop__op_get(uint32_t i)
{
    return i < n_ops ? &ops[i] : NULL;
}

uint32_t mxop__op_count(void)
{
    return n_ops;
}

const mxop__worker_op_t *mxop__op_find(const char *name)
{
    for (uint32_t i = 0; i < n_ops; i++)
        if (strcmp(ops[i].name, name) == 0)
            return &ops[i];
    return NULL;
}

int mxop__op_append(mxop__worker_op_t *op)
{
    if (n_ops >= MXOP__W_MAX_OPS)
        return MXOP_ELIMIT;
    if (n_ops == cap_ops) {
        uint32_t cap = cap_ops ? cap_ops * 2 : 16;
        mxop__worker_op_t *p = realloc(ops, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return MXOP_ENOMEM;
        ops = p;
        cap_ops = cap;
    }
    op->index = n_ops;
    ops[n_ops++] = *op;
    return 0;
}

void mxop__op_truncate(uint32_t n)
{
    while (n_ops > n) {
        n_ops--;
        free(ops[n_ops].description);
        ops[n_ops].description = NULL;
        mxop__attrs_free(&ops[n_ops]);
    }
}
