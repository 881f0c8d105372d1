/*
 * client/control.c - the control plane: requests to mxop-serverd and the
 * WorkerEvents it sends unasked.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "client/session_state.h"
#include "shm/call_page.h"
#include "common/util.h"

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

int mxop__ctl_timeout(const mxop_client_t *c)
{
    /* A control request may make the worker load a library or pre-fault a
     * big region, so it gets at least a call's deadline, plus the grace. */
    int t = c->connect_timeout_ms > c->timeout_ms ? c->connect_timeout_ms : c->timeout_ms;
    return t > INT32_MAX - MXOP__CALL_GRACE_MS ? INT32_MAX : t + MXOP__CALL_GRACE_MS;
}

/* The control connection is unusable: the first reason is the one every later request gets. */
static int ctl_kill(mxop_client_t *c, int code, const char *msg)
{
    if (c->sess.state != MXOP__SESS_DEAD)
        mxop__sess_to(c, MXOP__SESS_DEAD, -1, code, msg);
    return mxop__fail(c, code, "%s", msg);
}

/* Every request of a session whose control connection is unusable fails with its reason. */
static int ctl_refused(mxop_client_t *c)
{
    return mxop__fail(c, c->sess.code, "%s", c->sess.why);
}

/*
 * The worker died: the daemon has spawned its replacement (when `restarted`)
 * and sent its data channel end.  The old channel is useless from now on.
 */
static void handle_event(mxop_client_t *c, const Mxop__WorkerEvent *ev, int fd)
{
    /* The engine gets a code it can act on, whatever the event said. */
    c->ev_code = mxop__code_known(ev->code) ? ev->code : MXOP_EWORKER_CRASHED;
    c->ev_call_id = ev->call_id;
    c->ev_has_op = ev->op != NULL && ev->op[0] != '\0';
    /* The daemon's words may quote the worker's (its fault note): copied as clean text. */
    if (ev->message != NULL && ev->message[0] != '\0')
        mxop__text_clean(c->ev_msg, sizeof c->ev_msg, ev->message);
    else if (ev->signal > 0)
        mxop__fmt(c->ev_msg, sizeof c->ev_msg, "worker killed by %s",
                  mxop__signal_name(ev->signal));
    else
        mxop__fmt(c->ev_msg, sizeof c->ev_msg, "worker exited with status %d",
                  (int)ev->exit_status);

    /* Killed between calls for the CPU a library burnt: the next call says so (call.c). */
    if (ev->idle_cpu)
        mxop__fmt(c->idle_note, sizeof c->idle_note,
                  "the session's worker was replaced before this call, which did not run: %s",
                  c->ev_msg);
    /* Either way the old channel goes, with its mailbox: a replacement gets a fresh one. */
    if (ev->restarted && fd >= 0) {
        mxop__sess_to(c, MXOP__SESS_SERVING, fd, 0, NULL);
        c->generation = ev->generation;
        c->worker_pid = ev->worker_pid;
        c->stats.worker_restarts++;
    } else {
        if (fd >= 0)
            close(fd);
        char why[MXOP__ERR_MAX];
        mxop__fmt(why, sizeof why, "the session's worker died and was not restarted: %s",
                  c->ev_msg);
        mxop__sess_to(c, MXOP__SESS_WORKER_GONE, -1, c->ev_code, why);
    }
}

/* The control layer's handler of WorkerEvents: the first descriptor is the new data channel. */
static void on_event(void *arg, const Mxop__WorkerEvent *ev, int *fds, int nfds)
{
    handle_event(arg, ev, nfds > 0 ? fds[0] : -1);
    if (nfds > 1)
        close_fds(fds + 1, nfds - 1);
}

/* A failure of the control layer: fatal to the connection unless only time ran out. */
static int ctl_error(mxop_client_t *c, int rc, const char *why)
{
    if (!c->ctl.dead)
        return mxop__fail(c, rc, "%s", why);
    if (!c->ctl.refused)
        return ctl_kill(c, rc, why);
    char msg[MXOP__ERR_MAX];
    mxop__fmt(msg, sizeof msg, "mxop-serverd: %s", why);
    return ctl_kill(c, rc, msg);
}

static int timeout_until(int64_t end_ns)
{
    int64_t left = end_ns - mxop__now_ns();
    if (left < 0)
        left = 0;
    left = (left + 999999) / 1000000;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

/*
 * Takes what a reply carried: the session's call page rides second on the
 * OpenSession reply (the client publishes its calls' deadlines there for
 * the daemon's watchdog), the spin lease third; the first descriptor goes to
 * fd_out (closed when NULL).
 */
static void take_fds(mxop_client_t *c, const Mxop__Reply *r, int *fds, int nfds, int *fd_out)
{
    if (r->body_case == MXOP__REPLY__BODY_OPEN_SESSION && nfds > 1 && c->call_page == NULL) {
        void *m =
            mmap(NULL, sizeof(mxop__call_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
        if (m != MAP_FAILED)
            c->call_page = m;
        close(fds[1]);
        fds[1] = -1;
    }
    if (r->body_case == MXOP__REPLY__BODY_OPEN_SESSION && nfds > 2 && c->lease.page == NULL) {
        /* A lease (client/lease.c) that does not map leaves the session without it. */
        (void)mxop__lease_map(&c->lease, fds[2]);
        close(fds[2]);
        fds[2] = -1;
    }
    if (fd_out != NULL && nfds > 0) {
        *fd_out = fds[0];
        close_fds(fds + 1, nfds - 1);
    } else {
        close_fds(fds, nfds);
    }
}

/*
 * One receive on the control connection, its failure recorded: the next
 * frame (id 0; a WorkerEvent is handled and MXOP__CTL_EVENT returned) or
 * the reply to `id`, handling the events that come first.
 */
static int receive(mxop_client_t *c, uint64_t id, int timeout_ms, Mxop__Reply **reply, int *fds,
                   int *nfds)
{
    char why[MXOP__ERR_MAX];
    *reply = NULL;
    if (c->sess.state == MXOP__SESS_DEAD)
        return ctl_refused(c);
    int rc = id == 0 ? mxop__ctlchan_next(&c->ctl, timeout_ms, on_event, c, reply, fds,
                                          MXOP__FRAME_MAX_FDS, nfds, why, sizeof why)
                     : mxop__ctlchan_await(&c->ctl, id, timeout_ms, on_event, c, reply, fds,
                                           MXOP__FRAME_MAX_FDS, nfds, why, sizeof why);
    if (rc == MXOP__CTLCHAN_EVENT)
        return MXOP__CTL_EVENT;
    return rc < 0 ? ctl_error(c, rc, why) : 0;
}

int mxop__ctl_next(mxop_client_t *c, int64_t end_ns, Mxop__Reply **reply, int *fd_out)
{
    int fds[MXOP__FRAME_MAX_FDS];
    int nfds = 0;
    if (fd_out != NULL)
        *fd_out = -1;
    int rc = receive(c, 0, timeout_until(end_ns), reply, fds, &nfds);
    if (rc == 0)
        take_fds(c, *reply, fds, nfds, fd_out);
    return rc;
}

int mxop__ctl_request(mxop_client_t *c, Mxop__Request *req, const int *fds, int nfds,
                      int timeout_ms, Mxop__Reply **reply, int *fd_out)
{
    *reply = NULL;
    if (fd_out != NULL)
        *fd_out = -1;
    int rc = mxop__ctl_send(c, req, fds, nfds);
    if (rc < 0)
        return rc;
    return mxop__ctl_await(c, req->id, timeout_ms, reply, fd_out);
}

int mxop__ctl_send(mxop_client_t *c, Mxop__Request *req, const int *fds, int nfds)
{
    if (c->sess.state == MXOP__SESS_DEAD)
        return ctl_refused(c);
    char why[MXOP__ERR_MAX];
    int rc = mxop__ctlchan_send(&c->ctl, req, fds, nfds, why, sizeof why);
    return rc < 0 ? ctl_error(c, rc, why) : 0;
}

int mxop__ctl_await(mxop_client_t *c, uint64_t id, int timeout_ms, Mxop__Reply **reply, int *fd_out)
{
    int fds[MXOP__FRAME_MAX_FDS];
    int nfds = 0;
    char why[MXOP__ERR_MAX];
    if (fd_out != NULL)
        *fd_out = -1;
    int rc = receive(c, id, timeout_ms, reply, fds, &nfds);
    if (rc < 0)
        return rc;
    rc = mxop__ctlchan_status(*reply, why, sizeof why);
    take_fds(c, *reply, fds, nfds, rc == 0 ? fd_out : NULL);
    return rc < 0 ? mxop__fail(c, rc, "%s", why) : 0;
}
