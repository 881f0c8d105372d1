/*
 * server/daemon/worker/worker_note.c - quoting what a dead worker wrote about its
 * own death beyond the note's code and sentence (worker.c): the
 * faulting thread's backtrace from its fault handler (server/worker/fault.c).
 *
 * It is memory the worker, and so any op, could write: it never changes a
 * verdict, it is only quoted, marked as the worker's account.
 */
#include <string.h>

#include "mxop/types.h"

#include "common/util.h"
#include "server/daemon/worker/worker.h"

/*
 * Appends the faulting thread's backtrace the worker's fault handler left
 * (fault.c) to a crash's message: the worker's account, so printable
 * bytes only, and only for a death by a fault signal the daemon observed.
 */
void mxop__note_add_backtrace(const mxop__status_page_t *page, char *msg, size_t msglen)
{
    if (page == NULL)
        return;
    char bt[MXOP__STATUS_BT_MAX];
    memcpy(bt, (const void *)page->backtrace, sizeof(bt));
    bt[sizeof(bt) - 1] = '\0';
    if (bt[0] == '\0')
        return;
    for (size_t i = 0; bt[i] != '\0'; i++)
        if (bt[i] < 0x20 || bt[i] > 0x7e)
            bt[i] = '?';
    size_t n = strlen(msg);
    mxop__fmt(msg + n, msglen - n, "; backtrace (the worker's account): %s", bt);
}

/*
 * The inputs of the call the worker began last, as it noted them
 * (status.c): "[2,3] f32, [4] f32", or "" when it noted none.  The
 * worker's account: counts and ranks are clamped, names come from the
 * dtype table only.
 */
void mxop__note_inputs(const mxop__status_page_t *page, char *out, size_t outlen)
{
    out[0] = '\0';
    if (page == NULL)
        return;
    uint32_t n = page->in_count;
    size_t at = 0;
    for (uint32_t i = 0; i < n && i < MXOP__STATUS_IN_MAX && at + 1 < outlen; i++) {
        int32_t nd = page->in_ndim[i];
        if (nd < 0 || nd > MXOP__STATUS_DIMS_MAX)
            nd = 0;
        at += (size_t)snprintf(out + at, outlen - at, "%s[", i ? ", " : "");
        for (int32_t k = 0; k < nd && at + 1 < outlen; k++)
            at += (size_t)snprintf(out + at, outlen - at, "%s%lld", k ? "," : "",
                                   (long long)page->in_dims[i][k]);
        if (at + 1 < outlen)
            at +=
                (size_t)snprintf(out + at, outlen - at, "] %s", mxop_dtype_name(page->in_dtype[i]));
    }
    if (n > MXOP__STATUS_IN_MAX && at + 1 < outlen)
        snprintf(out + at, outlen - at, ", ... (%u inputs)", (unsigned)n);
}
