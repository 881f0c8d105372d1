/*
 * server/daemon/session/call_page.c - each session's call page (shm/call_page.h):
 * made when the session opens, given to the client alone (the second fd of
 * the OpenSession reply), unmapped when the session ends.  The watchdog
 * (deadline.c), the drain (drain.c) and introspection read it.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/session/session.h"
#include "shm/call_page.h"

int mxop__call_page_create(mxop__session_t *s, int *fd_out, char *err, size_t errlen)
{
    *fd_out = -1;
    int fd = memfd_create("mxop-calls", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, sizeof(mxop__call_page_t)) != 0) {
        mxop__fmt(err, errlen, "cannot create the session's call page: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return MXOP_EINTERNAL;
    }
    void *m = mmap(NULL, sizeof(mxop__call_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        mxop__fmt(err, errlen, "cannot map the session's call page: %s", strerror(errno));
        close(fd);
        return MXOP_EINTERNAL;
    }
    s->call_page = m;
    s->call_page->magic = MXOP__CALL_PAGE_MAGIC;
    s->call_page->stats.magic = MXOP__CALL_STATS_MAGIC;
    s->call_page->stats.n_slots = MXOP__STATS_OPS;
    *fd_out = fd;
    return 0;
}

void mxop__call_page_free(mxop__session_t *s)
{
    if (s->call_page != NULL)
        munmap(s->call_page, sizeof(mxop__call_page_t));
    s->call_page = NULL;
}
