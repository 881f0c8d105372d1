/*
 * client/call.c - the data plane's transport: one call to the worker and
 * its result, and what happens when the worker dies under it.
 *
 * While a call is in flight the client watches both the data channel and
 * the control socket: a worker that dies closes the first, and the daemon
 * explains why (and hands over the replacement's channel) on the second.
 * Results are read with non-blocking recv() and a poll() only when nothing
 * has arrived yet, so a call costs few syscalls and no malloc.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/util.h"

/* The call's error from a WorkerEvent, with the op named when the daemon did not. */
static int event_result(mxop_client_t *c, const mxop_op_t *op)
{
    if (c->ev_has_op || op == NULL)
        return mxop__fail(c, c->ev_code, "%s", c->ev_msg);
    return mxop__fail(c, c->ev_code, "op '%s' (%s): %s", op->name, op->library, c->ev_msg);
}

/*
 * The data channel closed: the worker is dead.  The daemon tells why on the
 * control socket (with the replacement's channel); wait for that.
 */
static int await_event(mxop_client_t *c, const mxop_op_t *op)
{
    int64_t end = mxop__now_ns() + (int64_t)MXOP__EVENT_WAIT_MS * 1000000;
    for (;;) {
        Mxop__Reply *r;
        int rc = mxop__ctl_next(c, end, &r, NULL);
        if (rc == MXOP__CTL_EVENT)
            return op != NULL ? event_result(c, op) : mxop__fail(c, c->ev_code, "%s", c->ev_msg);
        if (rc == MXOP_ETIMEOUT) {
            if (c->data_fd >= 0)
                close(c->data_fd);
            c->data_fd = -1;
            c->worker_gone = MXOP_EDISCONNECTED;
            mxop__fmt(c->worker_gone_msg, sizeof c->worker_gone_msg,
                      "worker channel closed and mxop-serverd said nothing");
            return mxop__fail(c, MXOP_EDISCONNECTED, "%s", c->worker_gone_msg);
        }
        if (rc < 0)
            return rc == MXOP_EDISCONNECTED || rc == MXOP_EPROTOCOL
                       ? mxop__fail(c, MXOP_EDISCONNECTED, "%s", c->err)
                       : rc;
        /* A late reply to a request that timed out: not ours to keep. */
    }
}

/* True when the data channel has been closed by the worker. */
static int data_closed(const struct pollfd *p)
{
    if (p->revents & (POLLHUP | POLLERR | POLLNVAL))
        return 1;
    if (!(p->revents & POLLIN))
        return 0;
    /* Readable while idle: the result of a call given up on, or EOF. */
    char b;
    ssize_t n = recv(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/*
 * Before a call: take in a WorkerEvent already sent (a worker that died
 * while idle), so that the call goes to its replacement.  One poll() of
 * both sockets, so the common case costs one syscall.
 */
int mxop__call_ready(mxop_client_t *c)
{
    int rc;
    if (c->ctl_dead)
        return mxop__fail(c, c->ctl_dead, "%s", c->ctl_dead_msg);
    struct pollfd p[2] = {{.fd = c->ctl_fd, .events = POLLIN},
                          {.fd = c->data_fd, .events = POLLIN}};
    int n = poll(p, c->data_fd >= 0 ? 2 : 1, 0);
    if (n > 0 && p[0].revents) {
        rc = mxop__ctl_poll_events(c);
        if (rc < 0)
            return rc;
        /* The event may have replaced the channel polled above. */
        p[1].fd = c->data_fd;
        p[1].revents = 0;
        if (c->data_fd >= 0 && poll(&p[1], 1, 0) < 0)
            p[1].revents = 0;
    }
    if (n > 0 && c->data_fd >= 0 && data_closed(&p[1])) {
        /* Its death is not this call's error: wait for the replacement. */
        rc = await_event(c, NULL);
        if (rc < 0 && c->data_fd < 0)
            return rc;
    }
    if (c->data_fd < 0)
        return mxop__fail(c, c->worker_gone ? c->worker_gone : MXOP_EDISCONNECTED, "%s",
                          c->worker_gone_msg[0] ? c->worker_gone_msg : "the session has no worker");
    return 0;
}

/*
 * Reads exactly `len` bytes from the data channel, polling only when the
 * socket has nothing yet: when the result is there, a frame costs two
 * recv() calls.  Nothing on the data plane carries descriptors.
 */
static int data_read(int fd, uint8_t *buf, size_t len, int64_t end_ns)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(fd, buf + off, len - off, MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0)
            return MXOP_EDISCONNECTED;
        if (errno == EINTR)
            continue;
        if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)
            return MXOP_EDISCONNECTED;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return MXOP_EIO;
        int64_t left = end_ns - mxop__now_ns();
        if (left <= 0)
            return MXOP_ETIMEOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)((left + 999999) / 1000000)) < 0 && errno != EINTR)
            return MXOP_EIO;
    }
    return 0;
}

/* One frame of the data channel into c->data_fb. */
static int data_recv(mxop_client_t *c, uint16_t *kind, uint32_t *len, int64_t end_ns)
{
    uint8_t hdr[MXOP__FRAME_HDR];
    int rc = data_read(c->data_fd, hdr, sizeof hdr, end_ns);
    if (rc < 0)
        return rc;
    rc = mxop__frame_hdr_decode(hdr, kind, len);
    if (rc < 0)
        return rc;
    rc = mxop__framebuf_reserve(&c->data_fb, *len ? *len : 1);
    if (rc < 0)
        return rc;
    return data_read(c->data_fd, c->data_fb.data, *len, end_ns);
}

/*
 * Sends c->cb.call (its id set here) and waits for its CallResult, at most
 * wait_ms.  On 0 *res points into c->pba.  A non-zero status is returned
 * with the worker's message.
 */
int mxop__call_transact(mxop_client_t *c, const mxop_op_t *op, int32_t wait_ms,
                        Mxop__CallResult **res)
{
    int rc;
    uint64_t id = c->next_call_id++;
    c->cb.call.id = id;
    *res = NULL;

    rc = mxop__frame_send(c->data_fd, &c->data_fb, MXOP__KIND_CALL,
                          (const ProtobufCMessage *)&c->cb.call, NULL, 0);
    if (rc == MXOP_EDISCONNECTED)
        return await_event(c, op);
    if (rc < 0)
        return mxop__fail(c, rc, "cannot send the call to the worker");

    int64_t end = mxop__now_ns() + ((int64_t)wait_ms + MXOP__CALL_GRACE_MS) * 1000000;
    for (;;) {
        int64_t left_ns = end - mxop__now_ns();
        if (left_ns <= 0)
            break;
        int left = (int)((left_ns + 999999) / 1000000);
        struct pollfd p[2] = {{.fd = c->data_fd, .events = POLLIN},
                              {.fd = c->ctl_fd, .events = POLLIN}};
        int n = poll(p, 2, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return mxop__fail(c, MXOP_EIO, "poll: %s", strerror(errno));
        }
        if (n == 0)
            continue;

        /* A result already written wins over news of the worker's death. */
        if (p[0].revents) {
            uint16_t kind;
            uint32_t len;
            rc = data_recv(c, &kind, &len, end);
            if (rc == MXOP_EDISCONNECTED)
                return await_event(c, op);
            if (rc == MXOP_ETIMEOUT)
                continue;
            if (rc < 0)
                return mxop__fail(c, rc, "bad frame from the worker on the data channel");
            if (kind != MXOP__KIND_CALL_RESULT)
                return mxop__fail(c, MXOP_EPROTOCOL, "unexpected frame kind %u from the worker",
                                  kind);
            mxop__pbarena_reset(&c->pba);
            Mxop__CallResult *r =
                mxop__call_result__unpack(&c->pba.allocator, len, c->data_fb.data);
            if (r == NULL)
                return mxop__fail(c, MXOP_EPROTOCOL, "undecodable result from the worker");
            if (r->id != id)
                continue; /* the result of a call given up on earlier */
            *res = r;
            if (r->status == 0)
                return 0;
            int code = r->status < 0 ? r->status : MXOP_EPROTOCOL;
            const char *msg =
                r->message != NULL && r->message[0] != '\0' ? r->message : mxop_strerror(code);
            if (op == NULL || strncmp(msg, "op '", 4) == 0)
                return mxop__fail(c, code, "%s", msg);
            return mxop__fail(c, code, "op '%s' (%s): %s", op->name, op->library, msg);
        }
        if (p[1].revents) {
            Mxop__Reply *r;
            rc = mxop__ctl_next(c, mxop__now_ns() + 1000 * 1000000LL, &r, NULL);
            if (rc == MXOP__CTL_EVENT)
                return op != NULL ? event_result(c, op)
                                  : mxop__fail(c, c->ev_code, "%s", c->ev_msg);
            if (rc < 0)
                return rc == MXOP_ETIMEOUT ? mxop__fail(c, MXOP_EDISCONNECTED, "%s", c->err) : rc;
        }
    }
    if (op != NULL)
        return mxop__fail(
            c, MXOP_ETIMEOUT, "op '%s' (%s): no result within %d ms (deadline plus %d ms grace)",
            op->name, op->library, (int)wait_ms + MXOP__CALL_GRACE_MS, MXOP__CALL_GRACE_MS);
    return mxop__fail(c, MXOP_ETIMEOUT, "no result from the worker within %d ms",
                      (int)wait_ms + MXOP__CALL_GRACE_MS);
}
