/*
 * client/call.c - the data plane's transport: one call to the worker and
 * its result, over the shared-memory mailbox or the socket, and what
 * happens when the worker dies under it.
 *
 * Socket path: the call is one sendmsg(), the result one blocking recv()
 * (SO_RCVTIMEO bounds it) that takes header and payload at once.  Nothing
 * else is needed to notice a dead worker: its death closes the data
 * channel, and the daemon explains why (and hands over the replacement's
 * channel) on the control socket.
 *
 * Mailbox path: the call is written into the mailbox's request slot, and
 * the result is spun for, then slept for in one poll() on the reply bell
 * and the data socket, which brings both a result too large for a slot and
 * the hang-up of a dead worker.  While the worker answers within the spin,
 * a call costs no syscall at all.
 *
 * Either way a call allocates nothing: the frame is packed into a reused
 * buffer (or the slot), the result unpacked into the client's arena.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "client/inflight.h"
#include "client/lease.h"
#include "client/session_state.h"
#include "client/spincap.h"
#include "common/util.h"
#include "shm/call_page.h"
#include "shm/call_record.h"

/* call_once's answer when the worker died before it took the call and a
 * replacement is there: the call is sent again, once. */
#define CALL_RETRY 2

/* The call's error from a WorkerEvent, with the op named when the daemon did not. */
static int event_result(mxop_client_t *c, const mxop_op_t *op)
{
    if (c->ev_has_op || op == NULL)
        return mxop__fail(c, c->ev_code, "%s", c->ev_msg);
    return mxop__fail(c, c->ev_code, "op '%s' (%s): %s", op->name, op->library, c->ev_msg);
}

/* The reason the daemon replaced the worker between calls (WorkerEvent.idle_cpu), given once. */
static int idle_note_result(mxop_client_t *c)
{
    int rc = mxop__fail(c, MXOP_EWORKER_CRASHED, "%s", c->idle_note);
    c->idle_note[0] = '\0';
    return rc;
}

/*
 * The data channel closed: the worker is dead.  The daemon tells why on the
 * control socket (with the replacement's channel); wait for that.  Returns
 * MXOP__CTL_EVENT once the event is handled, or an error.
 */
static int await_event(mxop_client_t *c)
{
    int64_t end = mxop__now_ns() + (int64_t)MXOP__EVENT_WAIT_MS * 1000000;
    for (;;) {
        Mxop__Reply *r;
        int rc = mxop__ctl_next(c, end, &r, NULL);
        if (rc == MXOP__CTL_EVENT)
            return rc;
        if (rc == MXOP_ETIMEOUT) {
            static const char silent[] = "worker channel closed and mxop-serverd said nothing";
            mxop__sess_to(c, MXOP__SESS_WORKER_GONE, -1, MXOP_EDISCONNECTED, silent);
            return mxop__fail(c, MXOP_EDISCONNECTED, "%s", silent);
        }
        if (rc < 0)
            return rc == MXOP_EDISCONNECTED || rc == MXOP_EPROTOCOL
                       ? mxop__fail(c, MXOP_EDISCONNECTED, "%s", c->err)
                       : rc;
        /* A late reply to a request that timed out: not ours to keep. */
    }
}

/*
 * The worker died while call `id` was on its way.  If the daemon says the
 * worker was not running it (it died idle, or before it took the call), no
 * op code ran for it, and it goes to the replacement instead.
 */
static int worker_died(mxop_client_t *c, const mxop_op_t *op, uint64_t id)
{
    int rc = await_event(c);
    if (rc != MXOP__CTL_EVENT)
        return rc;
    if (c->ev_call_id != id && c->idle_note[0] != '\0')
        return idle_note_result(c);
    if (c->ev_call_id != id && c->sess.data_fd >= 0)
        return CALL_RETRY;
    return event_result(c, op);
}

int mxop__call_ready(mxop_client_t *c)
{
    const mxop__sess_t *s = &c->sess;
    if (s->state == MXOP__SESS_DEAD)
        return mxop__fail(c, s->code, "%s", s->why);
    /*
     * Without a worker, the daemon may since have started one (after a
     * failed spawn is retried): hear its events first, waiting only for a
     * frame that has begun to arrive.
     */
    for (int i = 0; i < 8 && s->data_fd < 0 && s->state != MXOP__SESS_DEAD; i++) {
        struct pollfd pfd = {.fd = c->ctl.fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) != 1)
            break;
        Mxop__Reply *r;
        if (mxop__ctl_next(c, mxop__now_ns() + (int64_t)MXOP__EVENT_WAIT_MS * 1000000, &r, NULL) <
            0)
            break;
    }
    if (s->state == MXOP__SESS_DEAD)
        return mxop__fail(c, s->code, "%s", s->why);
    if (s->data_fd < 0)
        return mxop__fail(c, s->state == MXOP__SESS_WORKER_GONE ? s->code : MXOP_EDISCONNECTED,
                          "%s", s->why[0] ? s->why : "the session has no worker");
    if (c->idle_note[0] != '\0')
        return idle_note_result(c);
    return 0;
}

/*
 * The worker wrote something that is not a result on its data channel (a
 * library's thread writing to the channel's descriptor, say): the channel
 * cannot be trusted to frame the next result, so it is dropped, the daemon
 * is asked to replace the worker, and the replacement's channel is taken
 * from its WorkerEvent before the call fails with the reason named.
 * `what` (may be c->err) says what was read.
 */
static int worker_garbage(mxop_client_t *c, const mxop_op_t *op, const char *what)
{
    char seen[160];
    mxop__fmt(seen, sizeof seen, "%s", what);
    char why[256];
    mxop__fmt(why, sizeof why, "the worker wrote garbage on its data channel (%s)", seen);
    mxop__sess_to(c, MXOP__SESS_REPLACING, -1, 0, NULL);
    Mxop__ReplaceWorker rw = MXOP__REPLACE_WORKER__INIT;
    rw.reason = why;
    rw.generation = c->generation;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_REPLACE_WORKER;
    req.replace_worker = &rw;
    Mxop__Reply *r;
    const char *after = "it was replaced";
    if (mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL) != 0)
        after = "its replacement could not be asked for";
    else if (c->sess.data_fd < 0 && await_event(c) != MXOP__CTL_EVENT)
        after = "no replacement came";
    if (op != NULL)
        return mxop__fail(c, MXOP_EPROTOCOL, "op '%s' (%s): %s; %s", op->name, op->library, why,
                          after);
    return mxop__fail(c, MXOP_EPROTOCOL, "%s; %s", why, after);
}

static int timed_out(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms)
{
    if (op != NULL)
        return mxop__fail(
            c, MXOP_ETIMEOUT, "op '%s' (%s): no result within %d ms (deadline plus %d ms grace)",
            op->name, op->library, (int)wait_ms + MXOP__CALL_GRACE_MS, MXOP__CALL_GRACE_MS);
    return mxop__fail(c, MXOP_ETIMEOUT, "no result from the worker within %d ms",
                      (int)wait_ms + MXOP__CALL_GRACE_MS);
}

/* Bounds the blocking recv() of results; set again only when it changes. */
static void set_rcvtimeo(mxop_client_t *c, int64_t ms)
{
    if (ms < 1)
        ms = 1;
    if (ms == c->rcvtimeo_ms)
        return;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    if (setsockopt(c->sess.data_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0)
        c->rcvtimeo_ms = ms;
}

/*
 * Handles what the socket brought: every whole frame buffered (stale
 * results are dropped).  Returns 1 when no result of this call is there
 * yet, else the call's outcome.
 */
static int socket_frames(mxop_client_t *c, const mxop_op_t *op, uint64_t id, Mxop__CallResult **res)
{
    for (;;) {
        uint16_t kind;
        uint32_t len;
        const uint8_t *payload;
        int rc = mxop__rxbuf_frame(&c->data_rx, &kind, &len, &payload);
        if (rc == 0)
            return 1;
        if (rc < 0) {
            char what[96];
            mxop__fmt(what, sizeof what, "bytes that are not a frame: %s", mxop_err_name(rc));
            return worker_garbage(c, op, what);
        }
        rc = mxop__result_take(c, op, id, kind, len, payload, res);
        if (rc == MXOP__RESULT_GARBAGE)
            return worker_garbage(c, op, c->err);
        mxop__rxbuf_consume(&c->data_rx, len);
        if (rc != MXOP__RESULT_STALE)
            return rc;
    }
}

/*
 * One look of the busy-poll before the blocking recv (wire/sockspin.h):
 * whatever the socket has, without waiting.  An end of stream or an error
 * ends the spin as "block now" (-1), so that the blocking recv meets it
 * again and reports it (a dead worker, a hang-up); "ready" there would
 * send the caller round the loop without ever reaching that recv.
 */
static int socket_look(void *arg)
{
    mxop_client_t *c = arg;
    ssize_t n = mxop__rxbuf_fill(&c->data_rx, c->sess.data_fd, 0, MSG_DONTWAIT);
    if (n > 0)
        return 1;
    return n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR ? 0 : -1;
}

/* Waits on the socket for the result of call `id` until end_ns. */
static int wait_socket(mxop_client_t *c, const mxop_op_t *op, uint64_t id, int32_t wait_ms,
                       int64_t end_ns, Mxop__CallResult **res)
{
    /* The first wait gets the call's whole budget, the same for every call
     * of the same deadline, so that the option is set once, not per call. */
    int first = 1;
    int64_t start_ns = mxop__now_ns();
    for (;;) {
        int rc = socket_frames(c, op, id, res);
        if (rc != 1) {
            mxop__sockspin_note_wait(&c->data_spin, mxop__now_ns() - start_ns);
            return rc;
        }
        int64_t left = end_ns - mxop__now_ns();
        if (left <= 0)
            return timed_out(c, op, wait_ms);
        if (mxop__sockspin_wait(&c->data_spin, socket_look, c) > 0)
            continue;
        set_rcvtimeo(c, first ? (int64_t)wait_ms + MXOP__CALL_GRACE_MS : (left + 999999) / 1000000);
        first = 0;
        ssize_t n = mxop__rxbuf_fill(&c->data_rx, c->sess.data_fd, 0, 0);
        if (n > 0 || n == -EINTR || n == -EAGAIN || n == -EWOULDBLOCK)
            continue;
        if (n == 0 || n == -ECONNRESET || n == -EPIPE || n == -ENOTCONN)
            return worker_died(c, op, id);
        if (n == -ENOMEM)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory for a result from the worker");
        return mxop__fail(c, MXOP_EIO, "recv on the data channel: %s", strerror((int)-n));
    }
}

/* Takes the newest frame of the reply slot: 1 when there is none (yet). */
static int mbox_result(mxop_client_t *c, const mxop_op_t *op, uint64_t id, Mxop__CallResult **res)
{
    uint16_t kind;
    uint32_t len;
    int rc = mxop__mbox_take(&c->mbox, c->mbox_buf, MXOP__MBOX_SLOT_BYTES, &kind, &len);
    if (rc == 0)
        return 1;
    if (rc < 0) {
        char what[96];
        mxop__fmt(what, sizeof what, "a bad frame in the mailbox: %s", mxop_err_name(rc));
        return worker_garbage(c, op, what);
    }
    rc = mxop__result_take(c, op, id, kind, len, c->mbox_buf + MXOP__FRAME_HDR, res);
    if (rc == MXOP__RESULT_GARBAGE)
        return worker_garbage(c, op, c->err);
    return rc == MXOP__RESULT_STALE ? 1 : rc;
}

/*
 * Waits for the result of call `id` sent through the mailbox: spin, then
 * sleep in poll() on the reply bell and the data socket.  A result in the
 * mailbox wins over news of the worker's death.
 *
 * Garbage or a death met on the way drops the channel and this mailbox
 * with it (worker_garbage, worker_died), and may already have opened the
 * replacement's: from then on the wait touches neither, only returns.
 */
static int wait_mbox(mxop_client_t *c, const mxop_op_t *op, uint64_t id, int32_t wait_ms,
                     int64_t start_ns, int64_t end_ns, int64_t spin_cap, uint32_t sleep_why,
                     Mxop__CallResult **res)
{
    const uint32_t epoch = c->sess.epoch;
    int64_t spent;
    int rc;
    if (spin_cap > 0) {
        if (mxop__mbox_spin_since(&c->mbox, spin_cap, start_ns, &spent) &&
            (rc = mbox_result(c, op, id, res)) != 1)
            goto done;
        /* A failed spin (a long op, or a worker without a CPU): no turn needed to sleep. */
        mxop__lease_spin_failed(&c->lease);
    }
    for (;;) {
        rc = mbox_result(c, op, id, res);
        if (rc != 1)
            goto done;
        int64_t left = end_ns - mxop__now_ns();
        if (left <= 0)
            return timed_out(c, op, wait_ms);
        if (mxop__mbox_sleep_begin(&c->mbox, sleep_why))
            continue;
        struct pollfd p[2] = {{.fd = c->sess.data_fd, .events = POLLIN},
                              {.fd = c->mbox.bell_rx, .events = POLLIN}};
        int n = poll(p, 2, (int)((left + 999999) / 1000000));
        mxop__mbox_sleep_end(&c->mbox, n > 0 && (p[1].revents & POLLIN));
        if (n < 0 && errno != EINTR)
            return mxop__fail(c, MXOP_EIO, "poll: %s", strerror(errno));
        if (n <= 0 || p[0].revents == 0)
            continue;
        rc = mbox_result(c, op, id, res);
        if (rc != 1)
            goto done;
        /*
         * The socket: a result too large for a slot, or the worker's hang-up.
         * What was buffered before the hang-up is taken first, as a result in
         * the mailbox is.
         */
        ssize_t got = mxop__rxbuf_fill(&c->data_rx, c->sess.data_fd, 0, MSG_DONTWAIT);
        if (got == -ENOMEM)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory for a result from the worker");
        rc = socket_frames(c, op, id, res);
        if (rc != 1)
            goto done;
        if (got == 0 || got == -ECONNRESET || got == -EPIPE || got == -ENOTCONN)
            return worker_died(c, op, id);
        if (got < 0 && got != -EAGAIN && got != -EWOULDBLOCK && got != -EINTR)
            return mxop__fail(c, MXOP_EIO, "recv on the data channel: %s", strerror((int)-got));
    }
done:
    /* The spin policy learns from a wait that ended on this mailbox, not on its replacement. */
    if (c->sess.epoch == epoch && c->sess.chan == MXOP__CHAN_MBOX)
        mxop__mbox_note_wait(&c->mbox, start_ns);
    return rc;
}

/* What c->cb.call asks of the library, for the call page. */
static int call_kind(const mxop_client_t *c)
{
    switch (c->cb.call.body_case) {
    case MXOP__CALL__BODY_INVOKE:
        return c->cb.call.invoke != NULL && c->cb.call.invoke->backward ? MXOP__CALLK_BACKWARD
                                                                        : MXOP__CALLK_FORWARD;
    case MXOP__CALL__BODY_INFER: return MXOP__CALLK_INFER;
    case MXOP__CALL__BODY_STATE_CREATE: return MXOP__CALLK_STATE_CREATE;
    case MXOP__CALL__BODY_STATE_DESTROY: return MXOP__CALLK_STATE_DESTROY;
    default: return MXOP__CALLK_NONE;
    }
}

/*
 * Publishes call `id` and its deadline for the daemon's watchdog (which
 * kills a worker that overruns it, whatever the worker does), or clears
 * the page when id is 0.
 */
static void publish_call(mxop_client_t *c, uint64_t id, int64_t deadline_ns, int kind,
                         const mxop_op_t *op)
{
    if (c->call_page != NULL)
        mxop__call_page_publish(c->call_page, id, deadline_ns, kind, op ? op->name : "",
                                op ? op->library : "");
}

static int call_once_published(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms,
                               Mxop__CallResult **res, uint64_t id, int64_t start);

/* Sends c->cb.call as call `id` and waits for its result; now_ns: CLOCK_MONOTONIC, just read. */
static int call_once(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms, int64_t now_ns,
                     Mxop__CallResult **res)
{
    uint64_t id = c->next_call_id++;
    c->cb.call.id = id;
    int64_t start = now_ns;
    publish_call(c, id, start + (int64_t)wait_ms * 1000000, call_kind(c), op);
    /* The worker this call goes to, for the calling thread's Ctrl-C
     * (inflight.c): named here, after the session's news was heard, on a
     * sibling session as on the client's own. */
    int32_t prev = mxop__inflight_enter((int32_t)c->worker_pid);
    int rc = call_once_published(c, op, wait_ms, res, id, start);
    mxop__inflight_leave(prev);
    publish_call(c, 0, 0, MXOP__CALLK_NONE, NULL);
    return rc;
}

/*
 * Writes c->cb.call into the mailbox's request slot: as a call record
 * (shm/call_record.h) when it is one of the calls a record carries, else
 * packed by protobuf-c.  `rec` is mxop__call_rec_size's answer.
 */
static void mbox_send(mxop_client_t *c, size_t rec, size_t n, int64_t now_ns)
{
    if (rec != 0) {
        mxop__call_rec_encode(mxop__mbox_put_begin(&c->mbox), &c->cb.call);
        mxop__mbox_put_end(&c->mbox, MXOP__KIND_CALL_REC, rec, now_ns);
    } else {
        protobuf_c_message_pack((const ProtobufCMessage *)&c->cb.call,
                                mxop__mbox_put_begin(&c->mbox));
        mxop__mbox_put_end(&c->mbox, MXOP__KIND_CALL, n, now_ns);
    }
}

static int call_once_published(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms,
                               Mxop__CallResult **res, uint64_t id, int64_t start)
{
    const ProtobufCMessage *msg = (const ProtobufCMessage *)&c->cb.call;
    int64_t end = start + ((int64_t)wait_ms + MXOP__CALL_GRACE_MS) * 1000000;

    if (c->sess.chan == MXOP__CHAN_MBOX) {
        size_t rec = mxop__call_rec_size(&c->cb.call);
        size_t n = rec != 0 ? rec : protobuf_c_message_get_packed_size(msg);
        if (mxop__mbox_fits(n)) {
            /* What the worker's last call kept busy (its op's BLAS threads). */
            int worker_cpus = mxop__mbox_peer_busy(&c->mbox);
            int64_t spin_cap = mxop__spincap_enter(worker_cpus);
            /* No spin because this process's calls fill the CPUs: the worker may be told (it
             * then runs on the CPU this thread leaves free, shm/placement.h). */
            int crowd_cpu = mxop__spincap_crowd_enter(spin_cap);
            uint32_t sleep_why = crowd_cpu >= 0 ? MXOP__MBOX_CROWDED : MXOP__MBOX_SLEEPING;
            /* A call that will spin takes its turn first (client/lease.c); one that will not
             * lets its process's turn go. */
            if (spin_cap > 0 && mxop__mbox_spin_pays(&c->mbox)) {
                mxop__lease_enter_at(&c->lease, start);
            } else {
                spin_cap = 0;
                mxop__lease_leave(&c->lease);
            }
            mbox_send(c, rec, n, start);
            int rc = wait_mbox(c, op, id, wait_ms, start, end, spin_cap, sleep_why, res);
            mxop__spincap_crowd_leave(crowd_cpu);
            mxop__spincap_leave(worker_cpus);
            return rc;
        }
        /* Too large for a slot: the socket carries it, and its result. */
    }
    int rc = mxop__frame_send(c->sess.data_fd, &c->data_fb, MXOP__KIND_CALL, msg, NULL, 0);
    if (rc == MXOP_EDISCONNECTED)
        return worker_died(c, op, id);
    if (rc < 0)
        return mxop__fail(c, rc, "cannot send the call to the worker");
    return wait_socket(c, op, id, wait_ms, end, res);
}

/*
 * Gives the current worker a fresh mailbox.  Any failure leaves the session
 * on the socket path (which always works); a worker that died meanwhile is
 * dealt with by the call that follows.
 */
static void attach_mailbox(mxop_client_t *c, int32_t limit_ms)
{
    mxop__mbox_t m;
    int fds[3];
    char why[256];

    /* The socket carries the calls until the mailbox is there, or for good if it is not. */
    mxop__chan_to(c, MXOP__CHAN_SOCKET, NULL);
    if (c->sess.data_fd < 0 || c->mbox_buf == NULL)
        return;
    if (mxop__mbox_create(&m, fds, why, sizeof why) != 0)
        return;

    Mxop__AttachMailbox am = MXOP__ATTACH_MAILBOX__INIT;
    am.size = MXOP__MBOX_BYTES;
    am.version = MXOP__MBOX_VERSION;
    am.slot_bytes = MXOP__MBOX_SLOT_BYTES;
    Mxop__Call call = MXOP__CALL__INIT;
    uint64_t id = c->next_call_id++;
    call.id = id;
    call.body_case = MXOP__CALL__BODY_ATTACH_MAILBOX;
    call.attach_mailbox = &am;
    int rc = mxop__frame_send(c->sess.data_fd, &c->data_fb, MXOP__KIND_CALL,
                              (const ProtobufCMessage *)&call, fds, 3);
    close(fds[0]); /* the worker has its own reference now */
    if (rc == 0) {
        /* A replacement that hangs while attaching is killed at this deadline too. */
        Mxop__CallResult *r = NULL;
        int32_t wait = limit_ms < c->connect_timeout_ms ? limit_ms : c->connect_timeout_ms;
        int64_t end = mxop__now_ns() + (int64_t)wait * 1000000;
        publish_call(c, id, end, MXOP__CALLK_ATTACH_MAILBOX, NULL);
        rc = wait_socket(c, NULL, id, wait, end, &r);
        publish_call(c, 0, 0, MXOP__CALLK_NONE, NULL);
    }
    if (rc != 0) {
        mxop__mbox_close(&m);
        return;
    }
    mxop__chan_to(c, MXOP__CHAN_MBOX, &m);
}

int mxop__call_transact(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms,
                        Mxop__CallResult **res)
{
    *res = NULL;
    /*
     * One deadline for the whole call, whatever happens on the way (a
     * replacement worker to attach, a retry on it): the call returns within
     * wait_ms plus the grace.  The clock is read again only after something
     * that can take time (an attach, news heard without a worker, a retry):
     * a call to a serving worker reads it once here.
     */
    int64_t now = mxop__now_ns();
    int64_t end = now + (int64_t)wait_ms * 1000000;
    for (int attempt = 0;; attempt++) {
        int64_t left_ns = end - now;
        int32_t left = left_ns > 1000000 ? (int32_t)(left_ns / 1000000) : 1;
        /* Without a worker, mxop__call_ready may wait for the daemon's news. */
        int quick = c->sess.data_fd >= 0;
        /*
         * With little of the budget left the call goes on the socket (which
         * always works) and the mailbox waits for the next call: an attach
         * cut short by the deadline would cost a healthy worker its life.
         */
        if (c->sess.chan == MXOP__CHAN_MBOX_WANTED && left >= 100) {
            attach_mailbox(c, left);
            quick = 0;
        }
        /* Attaching may have taken in news that the session lost its worker. */
        int rc = mxop__call_ready(c);
        if (rc != 0)
            return rc;
        if (!quick) {
            now = mxop__now_ns();
            left_ns = end - now;
            left = left_ns > 1000000 ? (int32_t)(left_ns / 1000000) : 1;
        }
        rc = call_once(c, op, left, now, res);
        if (rc != CALL_RETRY)
            return rc;
        if (attempt > 0)
            return event_result(c, op);
        now = mxop__now_ns();
    }
}

int mxop__data_attach_now(mxop_client_t *c)
{
    if (c->sess.chan == MXOP__CHAN_MBOX_WANTED)
        attach_mailbox(c, c->connect_timeout_ms);
    return 0;
}
