/*
 * client/session_state.c - the client's view of its session, and the one
 * place that changes it (c->sess, client/session_state.h).
 *
 * The session (c->sess.state; the reason in c->sess.code and .why) changes
 * only in mxop__sess_to below, on these events:
 *
 *   state        event                           new state    action
 *   -----------  ------------------------------  -----------  -------------------------------
 *   (new)        mxop__client_new                OPENING      no channel
 *   OPENING      OpenSession answered with the   SERVING      take the channel (the shm path
 *                channel (session_open.c)                     wants a mailbox)
 *   SERVING      WorkerEvent with the            SERVING      drop the old channel and its
 *                replacement's channel                        mailbox, take the new one
 *   SERVING      garbage on the channel          REPLACING    drop the channel; call.c asks
 *                (call.c)                                     the daemon for a replacement
 *   SERVING      WorkerEvent without a           WORKER_GONE  drop the channel; the event's
 *                replacement (control.c)                      code and words are the reason
 *   SERVING      channel closed, no WorkerEvent  WORKER_GONE  drop the channel;
 *                within 10 s (call.c)                         MXOP_EDISCONNECTED
 *   REPLACING    as SERVING's WorkerEvents and   as SERVING   as from SERVING
 *                silence
 *   WORKER_GONE  WorkerEvent with a replacement  SERVING      take the channel
 *                (a spawn the daemon retried)
 *   any but      control socket closed, bad      DEAD         the first reason stays; the
 *   DEAD         frame, the daemon's last word                channel is kept (calls fail
 *                (control.c)                                  before they reach it)
 *   any          mxop_shutdown_daemon (stats.c)  DEAD         "shut down by this client"
 *   DEAD         the worker's news (garbage,     DEAD         drop the channel only
 *                a death)
 *   DEAD         reconnection is off             DEAD         the reason says so
 *                (reconnect.c)
 *   DEAD         reconnection (reconnect.c)      OPENING      drop the channel, forget the
 *                                                             reason
 *   SERVING      the session could not be        OPENING      drop the channel (half a
 *                restored (reconnect.c)                       session is worse than none)
 *   OPENING      a reconnection's attempts, or   DEAD         MXOP_EDISCONNECTED naming the
 *                its restore, failed                          attempts or the restore
 *   any          mxop_close                      CLOSED       drop the channel
 *
 * What a call finds (mxop__call_ready): SERVING goes on; WORKER_GONE and
 * DEAD fail with their reason; OPENING and REPLACING fail with
 * MXOP_EDISCONNECTED, "the session has no worker" (or the reason a worker
 * was lost before, if one was).  Without a channel the daemon's pending
 * events are read first, since one may bring a worker.
 *
 * The data channel (c->sess.chan), while the session has one, changes
 * only in mxop__chan_to (within a channel) and mxop__sess_to (taking or
 * dropping it):
 *
 *   state        event                           new state    action
 *   -----------  ------------------------------  -----------  -------------------------------
 *   NONE         the session takes a channel     SOCKET       (the socket data path)
 *   NONE         the session takes a channel     MBOX_WANTED  (the shared-memory data path)
 *   MBOX_WANTED  a call with 100 ms left, or     SOCKET       AttachMailbox on the socket
 *                connect (call.c)
 *   SOCKET       the worker accepted the         MBOX         calls go through the mailbox
 *                mailbox (call.c)
 *   any          the session drops the channel   NONE         close the socket and mailbox,
 *                                                             forget buffered bytes, count
 *                                                             the drop (sess.epoch)
 *
 * An attach that fails leaves the channel on SOCKET for that worker's
 * life (the socket always works); its replacement wants a mailbox again.
 *
 * The control socket itself (c->ctl) is session_open.c's, session.c's and
 * reconnect.c's: the state says whether it may be used.  Nothing here reads the wire: the
 * files that hear the news (control.c, call.c, reconnect.c) decide, and
 * ask for the transition.
 */
#include <string.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "client/session_state.h"
#include "common/util.h"

_Static_assert(MXOP__SESS_WHY_MAX == MXOP__ERR_MAX,
               "a session's reason fills a call's error detail exactly");

/* Closes the channel and its mailbox: the worker behind them is gone or going. */
static void chan_drop(mxop_client_t *c)
{
    mxop__sess_t *s = &c->sess;
    s->epoch++;
    if (s->chan != MXOP__CHAN_NONE) {
        close(s->data_fd);
        mxop__mbox_close(&c->mbox);
        mxop__rxbuf_reset(&c->data_rx);
    }
    s->data_fd = -1;
    s->chan = MXOP__CHAN_NONE;
}

static void chan_open(mxop_client_t *c, int fd)
{
    mxop__sess_t *s = &c->sess;
    s->data_fd = fd;
    c->rcvtimeo_ms = 0;
    mxop__sockspin_init(&c->data_spin, MXOP__SOCKSPIN_CLIENT);
    s->chan = c->data_path == MXOP_DATA_PATH_SHM ? MXOP__CHAN_MBOX_WANTED : MXOP__CHAN_SOCKET;
}

static void set_reason(mxop__sess_t *s, int code, const char *why)
{
    /* Through a copy: a caller may pass text that overlaps s->why. */
    char text[MXOP__SESS_WHY_MAX];
    mxop__fmt(text, sizeof text, "%s", why != NULL ? why : "");
    s->code = code;
    memcpy(s->why, text, sizeof s->why);
}

void mxop__sess_to(mxop_client_t *c, mxop__sess_state_t to, int fd, int code, const char *why)
{
    mxop__sess_t *s = &c->sess;
    switch (to) {
    case MXOP__SESS_OPENING:
        chan_drop(c);
        s->code = 0;
        s->why[0] = '\0';
        break;
    case MXOP__SESS_SERVING:
        chan_drop(c);
        chan_open(c, fd);
        if (s->state == MXOP__SESS_DEAD)
            return;
        s->code = 0;
        break;
    case MXOP__SESS_REPLACING:
        chan_drop(c);
        if (s->state == MXOP__SESS_DEAD)
            return;
        s->code = 0;
        break;
    case MXOP__SESS_WORKER_GONE:
        chan_drop(c);
        if (s->state == MXOP__SESS_DEAD)
            return;
        set_reason(s, code, why);
        break;
    case MXOP__SESS_DEAD: set_reason(s, code, why); break;
    case MXOP__SESS_CLOSED: chan_drop(c); break;
    }
    s->state = to;
}

void mxop__chan_to(mxop_client_t *c, mxop__chan_state_t to, mxop__mbox_t *m)
{
    mxop__sess_t *s = &c->sess;
    if (s->chan == MXOP__CHAN_NONE) {
        if (m != NULL)
            mxop__mbox_close(m);
        return;
    }
    switch (to) {
    case MXOP__CHAN_SOCKET: s->chan = to; break;
    case MXOP__CHAN_MBOX:
        mxop__mbox_close(&c->mbox);
        c->mbox = *m;
        s->chan = to;
        break;
    case MXOP__CHAN_NONE:
    case MXOP__CHAN_MBOX_WANTED: break; /* the session's transitions alone drop or open it */
    }
}
