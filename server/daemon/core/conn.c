/*
 * server/daemon/core/conn.c - framed, non-blocking Unix stream sockets.
 *
 * Every peer of the daemon (clients on the control socket, workers on their
 * supervisor channel) speaks frames with descriptors attached as
 * SCM_RIGHTS.  libuv's uv_pipe_t cannot hand us those descriptors together
 * with the stream position they came at, so a connection is a raw fd
 * watched with uv_poll_t, read with recvmsg and written with sendmsg.
 *
 * Descriptor matching: the kernel delivers a frame's descriptors with the
 * recvmsg that returns the frame's first byte (they ride on the first byte),
 * and that read never extends past the data they came with.  So each
 * received fd is tagged with the stream extent [lo, hi) of the read that
 * brought it, and belongs to the frame that starts inside that extent.
 * Once a frame has been handled, any fd whose read ended inside or before
 * it can belong to no later frame and is closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "wire/fdpass.h"

struct mxop__wq {
    mxop__wq_t *next;
    size_t len;
    size_t off;
    int nfds;
    int fds[MXOP__FRAME_MAX_FDS];
    uint8_t data[];
};

#define RX_INITIAL 4096
#define RX_LIMIT ((size_t)MXOP__FRAME_HDR + MXOP__FRAME_MAX)
/*
 * A peer that sends requests but does not read the replies stops being read
 * once this much waits for it, so it cannot make the daemon queue without end.
 */
#define WQ_HIGH_WATER ((size_t)4 << 20)
/* The most reads mxop__conn_drain makes: far more than a worker's last replies need. */
#define DRAIN_READS_MAX 64

static void poll_cb(uv_poll_t *h, int status, int events);

static void update_events(mxop__conn_t *c)
{
    if (c->closing)
        return;
    int want = 0;
    if (c->reading && c->wq_bytes < WQ_HIGH_WATER)
        want |= UV_READABLE;
    if (c->wq_head != NULL)
        want |= UV_WRITABLE;
    if (want == c->events)
        return;
    c->events = want;
    if (want == 0)
        uv_poll_stop(&c->poll);
    else
        uv_poll_start(&c->poll, want, poll_cb);
}

static void wq_free_all(mxop__conn_t *c)
{
    mxop__wq_t *w = c->wq_head;
    while (w != NULL) {
        mxop__wq_t *next = w->next;
        for (int i = 0; i < w->nfds; i++)
            close(w->fds[i]);
        free(w);
        w = next;
    }
    c->wq_head = NULL;
    c->wq_tail = NULL;
    c->wq_bytes = 0;
}

static void fdq_close_all(mxop__conn_t *c)
{
    for (int i = 0; i < c->fdq_len; i++)
        close(c->fdq[i].fd);
    c->fdq_len = 0;
}

static void fdq_remove(mxop__conn_t *c, int i)
{
    memmove(&c->fdq[i], &c->fdq[i + 1], sizeof(c->fdq[0]) * (size_t)(c->fdq_len - i - 1));
    c->fdq_len--;
}

static bool fd_belongs_to_current(const mxop__conn_t *c, const mxop__qfd_t *q)
{
    return q->lo <= c->cur_start && c->cur_start < q->hi;
}

int mxop__conn_frame_nfds(const mxop__conn_t *c)
{
    int n = 0;
    for (int i = 0; i < c->fdq_len; i++)
        if (fd_belongs_to_current(c, &c->fdq[i]))
            n++;
    return n;
}

int mxop__conn_take_fd(mxop__conn_t *c)
{
    for (int i = 0; i < c->fdq_len; i++) {
        if (fd_belongs_to_current(c, &c->fdq[i])) {
            int fd = c->fdq[i].fd;
            fdq_remove(c, i);
            return fd;
        }
    }
    return -1;
}

/* Closes the descriptors no frame after the current one can claim. */
static void fdq_expire(mxop__conn_t *c)
{
    int i = 0;
    while (i < c->fdq_len) {
        if (c->fdq[i].hi <= c->cur_end) {
            close(c->fdq[i].fd);
            fdq_remove(c, i);
        } else {
            i++;
        }
    }
}

/* Reading is over for good; the owner hears why and must close. */
static void end_reading(mxop__conn_t *c, int code, const char *msg)
{
    if (!c->reading)
        return;
    c->reading = false;
    update_events(c);
    c->on_error(c, code, msg);
}

/* Writes queued frames until the socket would block.  Returns false if the peer is gone. */
static bool flush(mxop__conn_t *c)
{
    while (c->wq_head != NULL) {
        mxop__wq_t *w = c->wq_head;
        bool first = w->off == 0;
        ssize_t n = mxop__send_fds(c->fd, w->data + w->off, w->len - w->off, first ? w->fds : NULL,
                                   first ? w->nfds : 0);
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            break;
        if (n < 0) {
            /*
             * The peer is gone (EPIPE, ECONNRESET).  Drop what is queued; the
             * read side sees the EOF or reset and ends the connection there,
             * outside of whatever callback tried to send.
             */
            wq_free_all(c);
            return false;
        }
        if (first) {
            /* The kernel now holds its own references to the descriptors. */
            for (int i = 0; i < w->nfds; i++)
                close(w->fds[i]);
            w->nfds = 0;
        }
        w->off += (size_t)n;
        c->wq_bytes -= (size_t)n;
        if (w->off == w->len) {
            c->wq_head = w->next;
            if (c->wq_head == NULL)
                c->wq_tail = NULL;
            free(w);
        }
    }
    return true;
}

int mxop__conn_send(mxop__conn_t *c, uint16_t kind, const ProtobufCMessage *msg, const int *fds,
                    int nfds)
{
    if (c->closing || c->fd < 0)
        return MXOP_EDISCONNECTED;
    if (nfds < 0 || nfds > MXOP__FRAME_MAX_FDS)
        return MXOP_EINVAL;
    size_t plen = protobuf_c_message_get_packed_size(msg);
    if (plen > MXOP__FRAME_MAX)
        return MXOP_EFRAME_TOO_LARGE;

    mxop__wq_t *w = malloc(sizeof(*w) + MXOP__FRAME_HDR + plen);
    if (w == NULL)
        return MXOP_ENOMEM;
    w->next = NULL;
    w->len = MXOP__FRAME_HDR + plen;
    w->off = 0;
    w->nfds = 0;
    mxop__frame_hdr_encode(w->data, kind, (uint32_t)plen);
    protobuf_c_message_pack(msg, w->data + MXOP__FRAME_HDR);
    for (int i = 0; i < nfds; i++) {
        /* Our own reference, so the caller may close its fd at once. */
        int dup = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (dup < 0) {
            for (int j = 0; j < w->nfds; j++)
                close(w->fds[j]);
            free(w);
            return errno == EMFILE || errno == ENFILE ? MXOP_ELIMIT : MXOP_EIO;
        }
        w->fds[w->nfds++] = dup;
    }

    bool was_empty = c->wq_head == NULL;
    if (c->wq_tail != NULL)
        c->wq_tail->next = w;
    else
        c->wq_head = w;
    c->wq_tail = w;
    c->wq_bytes += w->len;
    if (was_empty && !flush(c))
        return MXOP_EDISCONNECTED;
    update_events(c);
    return 0;
}

static void framing_error(mxop__conn_t *c, int code, const uint8_t *hdr)
{
    char msg[160];
    uint32_t magic = (uint32_t)hdr[0] | ((uint32_t)hdr[1] << 8) | ((uint32_t)hdr[2] << 16) |
                     ((uint32_t)hdr[3] << 24);
    unsigned version = (unsigned)(hdr[4] | (hdr[5] << 8));
    unsigned kind = (unsigned)(hdr[6] | (hdr[7] << 8));
    unsigned long flen = (unsigned long)((uint32_t)hdr[8] | ((uint32_t)hdr[9] << 8) |
                                         ((uint32_t)hdr[10] << 16) | ((uint32_t)hdr[11] << 24));
    if (code == MXOP_EVERSION)
        mxop__fmt(msg, sizeof(msg),
                  "frame format version %u is not supported (this daemon speaks %u)", version,
                  MXOP__FRAME_VERSION);
    else if (code == MXOP_EFRAME_TOO_LARGE)
        mxop__fmt(msg, sizeof(msg), "frame of %lu bytes exceeds the maximum of %u bytes", flen,
                  MXOP__FRAME_MAX);
    else if (magic != MXOP__FRAME_MAGIC)
        mxop__fmt(msg, sizeof(msg), "bad frame magic 0x%08x: not an mxop frame", magic);
    else
        mxop__fmt(msg, sizeof(msg), "unknown frame kind %u", kind);
    end_reading(c, code, msg);
}

/* Dispatches every complete frame in the receive buffer. */
static void parse_frames(mxop__conn_t *c)
{
    size_t off = 0;
    while (c->reading && !c->closing && c->rx_len - off >= MXOP__FRAME_HDR) {
        const uint8_t *hdr = c->rx + off;
        uint16_t kind;
        uint32_t len;
        int rc = mxop__frame_hdr_decode(hdr, &kind, &len);
        if (rc != 0) {
            framing_error(c, rc, hdr);
            break;
        }
        if (kind != c->accept_kind) {
            char msg[96];
            mxop__fmt(msg, sizeof(msg), "unexpected frame kind %u on this channel (expected %u)",
                      (unsigned)kind, (unsigned)c->accept_kind);
            end_reading(c, MXOP_EPROTOCOL, msg);
            break;
        }
        if (c->rx_len - off < MXOP__FRAME_HDR + (size_t)len)
            break;
        c->cur_start = c->rx_base + off;
        c->cur_end = c->cur_start + MXOP__FRAME_HDR + len;
        c->on_frame(c, kind, hdr + MXOP__FRAME_HDR, len);
        if (!c->closing)
            fdq_expire(c);
        off += MXOP__FRAME_HDR + (size_t)len;
    }
    if (c->closing)
        return;
    if (off > 0) {
        memmove(c->rx, c->rx + off, c->rx_len - off);
        c->rx_len -= off;
        c->rx_base += off;
    }
}

/* One recvmsg and the frames it completes.  Returns false when reading should stop. */
static bool read_some(mxop__conn_t *c)
{
    if (c->rx_len == c->rx_cap) {
        /* Only an incomplete frame is ever kept, so the limit always leaves room. */
        size_t cap = c->rx_cap ? c->rx_cap * 2 : RX_INITIAL;
        if (cap > RX_LIMIT)
            cap = RX_LIMIT;
        /*
         * Partial frames are bounded daemon-wide: many connections each
         * holding most of a large frame must not grow the daemon without end.
         */
        uint64_t limit = c->d->cfg.max_buffered_mb << 20;
        if (limit != 0 && c->d->rx_bytes + (cap - c->rx_cap) > limit) {
            char msg[200];
            mxop__fmt(msg, sizeof(msg),
                      "the daemon's buffers for partial frames are full (%llu MiB in all, "
                      "--max-buffered-mb); a frame this connection began cannot be received",
                      (unsigned long long)c->d->cfg.max_buffered_mb);
            end_reading(c, MXOP_ELIMIT, msg);
            return false;
        }
        uint8_t *p = realloc(c->rx, cap);
        if (p == NULL) {
            end_reading(c, MXOP_ENOMEM, "out of memory for the receive buffer");
            return false;
        }
        c->rx = p;
        c->d->rx_bytes += cap - c->rx_cap;
        c->rx_cap = cap;
    }

    int fds[MXOP__FRAME_MAX_FDS * 2];
    int nfds = 0;
    ssize_t n = mxop__recv_fds(c->fd, c->rx + c->rx_len, c->rx_cap - c->rx_len, fds,
                               (int)(sizeof(fds) / sizeof(fds[0])), &nfds);
    if (n == -EAGAIN || n == -EWOULDBLOCK) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return false;
    }
    if (n < 0) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (n == -EMSGSIZE) {
            end_reading(c, MXOP_EPROTOCOL, "too many file descriptors attached to one frame");
        } else {
            char msg[128];
            mxop__fmt(msg, sizeof(msg), "receive failed: %s", strerror((int)-n));
            end_reading(c, MXOP_EDISCONNECTED, msg);
        }
        return false;
    }

    uint64_t lo = c->rx_base + c->rx_len;
    for (int i = 0; i < nfds; i++) {
        if (c->fdq_len == MXOP__CONN_MAX_QUEUED_FDS) {
            for (int j = i; j < nfds; j++)
                close(fds[j]);
            end_reading(c, MXOP_EPROTOCOL, "too many file descriptors sent without frames");
            return false;
        }
        c->fdq[c->fdq_len++] = (mxop__qfd_t){.fd = fds[i], .lo = lo, .hi = lo + (uint64_t)n};
    }
    if (n == 0) {
        end_reading(c, 0,
                    c->rx_len > 0 ? "peer closed the connection in the middle of a frame"
                                  : "peer closed the connection");
        return false;
    }
    c->rx_len += (size_t)n;
    parse_frames(c);
    return c->reading && !c->closing;
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    mxop__conn_t *c = MXOP__CONTAINER_OF(h, mxop__conn_t, poll);
    if (c->closing)
        return;
    if (status < 0) {
        /*
         * libuv reports POLLERR as UV_EBADF and stops the handle.  On a Unix
         * socket that is a reset: the peer died with our data unread.  What
         * it wrote before dying is still queued, so read that first; the
         * read then reports the reset itself.
         */
        c->events = 0;
        wq_free_all(c);
        while (c->reading && !c->closing && read_some(c))
            ;
        if (c->reading && !c->closing)
            end_reading(c, MXOP_EDISCONNECTED, "connection reset by the peer");
        update_events(c);
        return;
    }
    if (events & UV_WRITABLE)
        flush(c);
    if (!c->closing && c->reading && (events & (UV_READABLE | UV_DISCONNECT)))
        read_some(c);
    update_events(c);
}

int mxop__conn_init(mxop__daemon_t *d, mxop__conn_t *c, int fd, uint16_t accept_kind,
                    mxop__conn_frame_cb on_frame, mxop__conn_error_cb on_error,
                    mxop__conn_closed_cb on_closed, void *data)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    int rc = mxop__pbarena_init(&c->arena, MXOP__CONN_ARENA);
    if (rc != 0)
        return rc;
    if (uv_poll_init(d->loop, &c->poll, fd) != 0) {
        mxop__pbarena_destroy(&c->arena);
        return MXOP_EINTERNAL;
    }
    c->fd = fd;
    c->d = d;
    c->data = data;
    c->accept_kind = accept_kind;
    c->on_frame = on_frame;
    c->on_error = on_error;
    c->on_closed = on_closed;
    c->reading = true;
    update_events(c);
    return 0;
}

void mxop__conn_drain(mxop__conn_t *c)
{
    /*
     * Bounded: a process that kept the peer's end (an op's child, forked
     * with the worker's channel) can keep the socket full for as long as
     * it lives; what it writes after the bound is never heard.
     */
    for (int reads = 0; reads < DRAIN_READS_MAX && !c->closing && c->reading && read_some(c);
         reads++)
        ;
}

static void closed_cb(uv_handle_t *h)
{
    mxop__conn_t *c = MXOP__CONTAINER_OF(h, mxop__conn_t, poll);
    close(c->fd);
    c->fd = -1;
    free(c->rx);
    c->rx = NULL;
    c->d->rx_bytes -= c->rx_cap;
    c->rx_len = c->rx_cap = 0;
    mxop__pbarena_destroy(&c->arena);
    c->on_closed(c);
}

void mxop__conn_close(mxop__conn_t *c)
{
    if (c->closing)
        return;
    /* A last reply (an error, a Shutdown's ok) goes out if the socket takes it now. */
    flush(c);
    c->closing = true;
    c->reading = false;
    wq_free_all(c);
    fdq_close_all(c);
    uv_poll_stop(&c->poll);
    uv_close((uv_handle_t *)&c->poll, closed_cb);
}
