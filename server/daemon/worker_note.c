/*
 * server/daemon/worker_note.c - quoting what a dead worker wrote about its
 * own death beyond the note's code and sentence (supervisor.c): the
 * faulting thread's backtrace from its fault handler (server/worker/fault.c).
 *
 * It is memory the worker, and so any op, could write: it never changes a
 * verdict, it is only quoted, marked as the worker's account.
 */
#include <string.h>

#include "common/util.h"
#include "server/daemon/daemon.h"

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
