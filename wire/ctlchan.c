/*
 * wire/ctlchan.c - the client end of the control protocol (see ctlchan.h).
 */
#include "wire/ctlchan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"

/* How long a send that found the daemon gone waits for its last word. */
#define LAST_WORD_MS 1000

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

void mxop__ctlchan_init(mxop__ctlchan_t *ch, mxop__pbarena_t *arena)
{
    memset(ch, 0, sizeof *ch);
    ch->fd = -1;
    ch->next_id = 1;
    ch->arena = arena;
}

void mxop__ctlchan_hangup(mxop__ctlchan_t *ch)
{
    if (ch->fd >= 0)
        close(ch->fd);
    ch->fd = -1;
}

void mxop__ctlchan_free(mxop__ctlchan_t *ch)
{
    mxop__ctlchan_hangup(ch);
    mxop__framebuf_free(&ch->fb);
}

void mxop__ctlchan_reply_free(const mxop__ctlchan_t *ch, Mxop__Reply *r)
{
    if (r != NULL && ch->arena == NULL)
        mxop__reply__free_unpacked(r, NULL);
}

/* Why connect() failed, as a code and a sentence; the socket is closed. */
static int connect_failed(mxop__ctlchan_t *ch, int fd, int e, const char *path, int timeout_ms,
                          char *err, size_t errlen)
{
    close(fd);
    ch->sys_errno = e;
    if (e == ENOENT || e == ECONNREFUSED || e == ENOTSOCK) {
        mxop__fmt(err, errlen, "no mxop-serverd listening on %s", path);
        return MXOP_EDISCONNECTED;
    }
    if (e == EACCES || e == EPERM) {
        mxop__fmt(err, errlen, "not allowed to connect to %s: %s", path, strerror(e));
        return MXOP_EDENIED;
    }
    if (e == EAGAIN || e == EINPROGRESS) {
        mxop__fmt(err, errlen, "mxop-serverd at %s did not accept within %d ms", path, timeout_ms);
        return MXOP_ETIMEOUT;
    }
    mxop__fmt(err, errlen, "cannot connect to %s: %s", path, strerror(e));
    return MXOP_EDISCONNECTED;
}

/*
 * A Unix socket connects at once or refuses; only a full listen backlog
 * (EAGAIN on a non-blocking socket) is worth waiting for, so that is
 * retried until the deadline.  A daemon whose loop hangs accepts nothing,
 * and a probe must not wait for it for ever.
 */
int mxop__ctlchan_connect(mxop__ctlchan_t *ch, const char *path, int timeout_ms, char *err,
                          size_t errlen)
{
    struct sockaddr_un addr;
    size_t plen = strlen(path);

    ch->dead = 0;
    ch->refused = 0;
    ch->garbled = 0;
    ch->sys_errno = 0;
    if (plen == 0) {
        mxop__fmt(err, errlen, "socket path is empty");
        return MXOP_EINVAL;
    }
    if (plen >= sizeof addr.sun_path) {
        mxop__fmt(err, errlen, "socket path is too long (%zu bytes, at most %zu): %s", plen,
                  sizeof addr.sun_path - 1, path);
        return MXOP_EINVAL;
    }
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, plen + 1);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        ch->sys_errno = errno;
        mxop__fmt(err, errlen, "socket: %s", strerror(errno));
        return MXOP_EIO;
    }
    int64_t end = mxop__now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            break;
        int e = errno;
        if (e == EINTR)
            continue;
        if ((e != EAGAIN && e != EINPROGRESS) || mxop__now_ns() >= end)
            return connect_failed(ch, fd, e, path, timeout_ms, err, errlen);
        if (e == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int left = (int)((end - mxop__now_ns()) / 1000000) + 1;
            if (poll(&p, 1, left) > 0) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                if (soerr == 0)
                    break;
                return connect_failed(ch, fd, soerr, path, timeout_ms, err, errlen);
            }
            continue;
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }

    /* The frame helpers expect a blocking socket with their own deadlines. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        ch->sys_errno = errno;
        mxop__fmt(err, errlen, "fcntl: %s", strerror(errno));
        close(fd);
        return MXOP_EIO;
    }
    mxop__ctlchan_hangup(ch);
    ch->fd = fd;
    return 0;
}

int mxop__ctlchan_status(const Mxop__Reply *r, char *err, size_t errlen)
{
    if (r->status == 0)
        return 0;
    mxop__fmt(err, errlen, "%s",
              r->message != NULL && r->message[0] != '\0' ? r->message : mxop_strerror(r->status));
    return r->status < 0 ? r->status : MXOP_EPROTOCOL;
}

/* Nothing more will come on this connection: `code` and its sentence say why. */
static int dead(mxop__ctlchan_t *ch, int code, char *err, size_t errlen, const char *why)
{
    ch->dead = 1;
    mxop__fmt(err, errlen, "%s", why);
    return code;
}

int mxop__ctlchan_next(mxop__ctlchan_t *ch, int timeout_ms, mxop__ctlchan_event_fn *on_event,
                       void *arg, Mxop__Reply **out, int *fds, int max_fds, int *nfds, char *err,
                       size_t errlen)
{
    int got[MXOP__FRAME_MAX_FDS];
    int ngot = 0;
    uint16_t kind;
    uint32_t len;

    *out = NULL;
    if (nfds != NULL)
        *nfds = 0;
    int rc =
        mxop__frame_recv(ch->fd, &ch->fb, &kind, &len, got, MXOP__FRAME_MAX_FDS, &ngot, timeout_ms);
    if (rc == MXOP_ETIMEOUT) {
        mxop__fmt(err, errlen, "no reply from mxop-serverd in time");
        return rc;
    }
    if (rc == MXOP_EDISCONNECTED)
        return dead(ch, rc, err, errlen, "mxop-serverd closed the connection");
    if (rc < 0)
        return dead(ch, rc, err, errlen, "bad frame from mxop-serverd on the control socket");
    if (kind != MXOP__KIND_CTL_REPLY) {
        close_fds(got, ngot);
        ch->garbled = 1;
        return dead(ch, MXOP_EPROTOCOL, err, errlen, "unexpected frame kind from mxop-serverd");
    }
    ProtobufCAllocator *alloc = NULL;
    if (ch->arena != NULL) {
        mxop__pbarena_reset(ch->arena);
        alloc = &ch->arena->allocator;
    }
    Mxop__Reply *r = mxop__reply__unpack(alloc, len, ch->fb.data);
    if (r == NULL) {
        close_fds(got, ngot);
        ch->garbled = 1;
        return dead(ch, MXOP_EPROTOCOL, err, errlen, "undecodable reply from mxop-serverd");
    }

    if (r->id == 0 && r->body_case == MXOP__REPLY__BODY_EVENT && r->event != NULL) {
        if (on_event != NULL)
            on_event(arg, r->event, got, ngot);
        else
            close_fds(got, ngot);
        mxop__ctlchan_reply_free(ch, r);
        return MXOP__CTLCHAN_EVENT;
    }
    if (r->id == 0) {
        /* An unasked reply without an event is the daemon's last word (a refusal). */
        close_fds(got, ngot);
        ch->dead = 1;
        ch->refused = 1;
        mxop__fmt(err, errlen, "%s",
                  r->message != NULL && r->message[0] != '\0' ? r->message
                                                              : mxop_strerror(r->status));
        rc = r->status < 0 ? r->status : MXOP_EPROTOCOL;
        mxop__ctlchan_reply_free(ch, r);
        return rc;
    }
    int keep = fds != NULL ? (ngot < max_fds ? ngot : max_fds) : 0;
    for (int i = 0; i < keep; i++)
        fds[i] = got[i];
    close_fds(got + keep, ngot - keep);
    if (nfds != NULL)
        *nfds = keep;
    *out = r;
    return 0;
}

int mxop__ctlchan_await(mxop__ctlchan_t *ch, uint64_t id, int timeout_ms,
                        mxop__ctlchan_event_fn *on_event, void *arg, Mxop__Reply **out, int *fds,
                        int max_fds, int *nfds, char *err, size_t errlen)
{
    int64_t end = mxop__now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        int64_t left = (end - mxop__now_ns() + 999999) / 1000000;
        int ms = left < 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
        int rc = mxop__ctlchan_next(ch, ms, on_event, arg, out, fds, max_fds, nfds, err, errlen);
        if (rc == MXOP__CTLCHAN_EVENT)
            continue;
        if (rc < 0)
            return rc;
        if ((*out)->id == id)
            return 0;
        /* A reply to a request given up on (its caller timed out). */
        if (fds != NULL)
            close_fds(fds, *nfds);
        mxop__ctlchan_reply_free(ch, *out);
        *out = NULL;
    }
}

int mxop__ctlchan_send(mxop__ctlchan_t *ch, Mxop__Request *req, const int *fds, int nfds, char *err,
                       size_t errlen)
{
    req->id = ch->next_id++;
    int rc = mxop__frame_send(ch->fd, &ch->fb, MXOP__KIND_CTL_REQUEST,
                              (const ProtobufCMessage *)req, fds, nfds);
    if (rc == MXOP_EDISCONNECTED) {
        /* The daemon may have said why before it closed: read that first. */
        Mxop__Reply *r;
        rc = mxop__ctlchan_next(ch, LAST_WORD_MS, NULL, NULL, &r, NULL, 0, NULL, err, errlen);
        if (rc == 0)
            mxop__ctlchan_reply_free(ch, r);
        if (ch->refused)
            return rc;
        return dead(ch, MXOP_EDISCONNECTED, err, errlen, "mxop-serverd closed the connection");
    }
    if (rc < 0)
        mxop__fmt(err, errlen, "cannot send a request to mxop-serverd");
    return rc;
}

int mxop__ctlchan_request(mxop__ctlchan_t *ch, Mxop__Request *req, int timeout_ms,
                          mxop__ctlchan_event_fn *on_event, void *arg, Mxop__Reply **out, char *err,
                          size_t errlen)
{
    *out = NULL;
    int rc = mxop__ctlchan_send(ch, req, NULL, 0, err, errlen);
    if (rc < 0)
        return rc;
    return mxop__ctlchan_await(ch, req->id, timeout_ms, on_event, arg, out, NULL, 0, NULL, err,
                               errlen);
}

int mxop__ctlchan_hello(mxop__ctlchan_t *ch, const char *name, int timeout_ms, Mxop__Reply **out,
                        char *err, size_t errlen)
{
    Mxop__Hello body = MXOP__HELLO__INIT;
    body.min_version = MXOP_PROTOCOL_VERSION;
    body.max_version = MXOP_PROTOCOL_VERSION;
    body.client_name = (char *)(name != NULL ? name : "");
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_HELLO;
    req.hello = &body;
    return mxop__ctlchan_request(ch, &req, timeout_ms, NULL, NULL, out, err, errlen);
}
