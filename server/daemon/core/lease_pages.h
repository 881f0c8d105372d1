/*
 * server/daemon/core/lease_pages.h - the daemon's spin-lease pages, one per
 * client uid (shm/lease_page.h, lease_pages.c).
 */
#ifndef MXOP_SERVER_DAEMON_LEASE_PAGES_H
#define MXOP_SERVER_DAEMON_LEASE_PAGES_H

#include <sys/types.h>

/* Distinct uids with a page; the clients of further uids get none (and spin as before). */
#define MXOP__LEASE_UIDS 16

typedef struct mxop__lease_pages {
    struct {
        uid_t uid;
        int fd; /* the page's memfd, kept for the daemon's life */
    } e[MXOP__LEASE_UIDS];
    int n;
} mxop__lease_pages_t;

/*
 * The memfd of uid's page, made on first need; -1 when none can be made
 * (the session goes on without one).  The descriptor stays the table's:
 * the caller sends it and does not close it.
 */
int mxop__lease_page_fd(mxop__lease_pages_t *t, uid_t uid);

/* Closes every page (the daemon is stopping). */
void mxop__lease_pages_free(mxop__lease_pages_t *t);

#endif
