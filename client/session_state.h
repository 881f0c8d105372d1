/*
 * client/session_state.h - the client's view of its session: what state it
 * is in, why, and the data channel to its worker.  One owner writes it all:
 * client/session_state.c (its top comment holds the tables); every other
 * file of client/ reads c->sess and asks for a transition.  Not installed.
 */
#ifndef MXOP_CLIENT_SESSION_STATE_H
#define MXOP_CLIENT_SESSION_STATE_H

#include <stdint.h>

#include "mxop/client.h"
#include "shm/mailbox.h"

/* The reason's room: it becomes the detail of the calls it fails (as MXOP__ERR_MAX). */
#define MXOP__SESS_WHY_MAX 512

/* The session, as this client sees it. */
typedef enum mxop__sess_state {
    MXOP__SESS_OPENING = 0, /* no session yet: connecting, Hello, OpenSession */
    MXOP__SESS_SERVING,     /* a worker's data channel is open: calls go to it */
    MXOP__SESS_REPLACING,   /* channel dropped (garbage on it): a replacement is awaited */
    MXOP__SESS_WORKER_GONE, /* the worker died, no replacement came: calls fail with the reason */
    MXOP__SESS_DEAD,        /* the control connection is unusable: every request fails with it */
    MXOP__SESS_CLOSED,      /* mxop_close: nothing is left */
} mxop__sess_state_t;

/* The data channel to the worker, while there is one. */
typedef enum mxop__chan_state {
    MXOP__CHAN_NONE = 0,    /* no channel */
    MXOP__CHAN_SOCKET,      /* calls and results go over the socket */
    MXOP__CHAN_MBOX_WANTED, /* the shared-memory path: the worker gets a mailbox before a call */
    MXOP__CHAN_MBOX,        /* the worker has the mailbox: calls go through it */
} mxop__chan_state_t;

typedef struct mxop__sess {
    mxop__sess_state_t state;
    /* WORKER_GONE, DEAD: the code every call (DEAD: every request) fails with; else 0. */
    int code;
    /*
     * Why the session is DEAD or its worker GONE, for the calls it fails.
     * Opening a session clears it; a worker serving again leaves it, and a
     * REPLACING session whose replacement never comes still names it.
     */
    char why[MXOP__SESS_WHY_MAX];
    mxop__chan_state_t chan;
    int data_fd; /* the data channel to the current worker, or -1 */
    /*
     * Counts the data channels dropped: a wait that handled garbage or a
     * death may have dropped its channel and mailbox under it, and uses
     * neither once this moved.
     */
    uint32_t epoch;
} mxop__sess_t;

/**
 * The one writer of c->sess: moves the session to `to`, with what the
 * transition needs.  SERVING takes `fd` (owned from now on) as the new
 * worker's data channel, dropping the old one; REPLACING, WORKER_GONE,
 * OPENING and CLOSED drop the channel (with its mailbox); WORKER_GONE and
 * DEAD take `code` (a negative MXOP_E*) and `why` (borrowed, copied) as the
 * reason calls fail with.  A DEAD session stays DEAD until it is opened
 * again (OPENING) or closed: the worker's news then only drops the channel.
 * Arguments a transition does not need are ignored (pass -1, 0, NULL).
 */
void mxop__sess_to(mxop_client_t *c, mxop__sess_state_t to, int fd, int code, const char *why);

/**
 * The one writer of c->sess.chan within an open channel: SOCKET (the
 * mailbox is being attached, or could not be: the socket carries the calls
 * of this worker), or MBOX with `m` (taken: the mailbox the worker
 * accepted).  Without a channel nothing changes (and MBOX closes `m`).
 */
void mxop__chan_to(mxop_client_t *c, mxop__chan_state_t to, mxop__mbox_t *m);

#endif /* MXOP_CLIENT_SESSION_STATE_H */
