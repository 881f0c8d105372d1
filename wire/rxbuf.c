/*
 * wire/rxbuf.c - buffered frame reception (see rxbuf.h).
 */
#include "wire/rxbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mxop/errors.h"
#include "wire/fdpass.h"

int mxop__rxbuf_init(mxop__rxbuf_t *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->data = malloc(cap);
    if (b->data == NULL)
        return MXOP_ENOMEM;
    b->cap = cap;
    return 0;
}

void mxop__rxbuf_set_max(mxop__rxbuf_t *b, uint32_t max)
{
    b->max = max;
}

static void close_fds(mxop__rxbuf_t *b)
{
    for (int i = 0; i < b->nfds; i++)
        close(b->fds[i]);
    b->nfds = 0;
}

void mxop__rxbuf_free(mxop__rxbuf_t *b)
{
    close_fds(b);
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void mxop__rxbuf_reset(mxop__rxbuf_t *b)
{
    close_fds(b);
    b->off = b->end = 0;
}

/* Makes room for `need` bytes from b->off on: moves the unconsumed bytes to
 * the front, and grows the buffer if that is not enough. */
static int make_room(mxop__rxbuf_t *b, size_t need)
{
    if (b->cap - b->off >= need)
        return 0;
    size_t have = b->end - b->off;
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, have);
        b->off = 0;
        b->end = have;
    }
    if (b->cap >= need)
        return 0;
    uint8_t *p = realloc(b->data, need);
    if (p == NULL)
        return MXOP_ENOMEM;
    b->data = p;
    b->cap = need;
    return 0;
}

int mxop__rxbuf_frame(mxop__rxbuf_t *b, uint16_t *kind, uint32_t *len, const uint8_t **payload)
{
    size_t have = b->end - b->off;
    if (have < MXOP__FRAME_HDR)
        return make_room(b, MXOP__FRAME_HDR);
    int rc = mxop__frame_hdr_decode(b->data + b->off, kind, len);
    if (rc != 0)
        return rc;
    if (b->max != 0 && *len > b->max)
        return MXOP_EFRAME_TOO_LARGE;
    size_t need = MXOP__FRAME_HDR + (size_t)*len;
    if (have < need)
        return make_room(b, need);
    *payload = b->data + b->off + MXOP__FRAME_HDR;
    return 1;
}

void mxop__rxbuf_consume(mxop__rxbuf_t *b, uint32_t len)
{
    b->off += MXOP__FRAME_HDR + (size_t)len;
    if (b->off >= b->end)
        b->off = b->end = 0;
}

ssize_t mxop__rxbuf_fill(mxop__rxbuf_t *b, int fd, int want_fds, int flags)
{
    /* A buffer drained to its end starts over at the front. */
    if (b->off == b->end)
        b->off = b->end = 0;
    if (b->end == b->cap && make_room(b, b->end - b->off + 1) != 0)
        return -ENOMEM;
    ssize_t n;
    if (want_fds) {
        n = mxop__recv_fds(fd, b->data + b->end, b->cap - b->end, b->fds, MXOP__FRAME_MAX_FDS,
                           &b->nfds);
    } else {
        n = recv(fd, b->data + b->end, b->cap - b->end, flags);
        if (n < 0)
            n = -errno;
    }
    if (n > 0)
        b->end += (size_t)n;
    return n;
}

int mxop__rxbuf_take_fds(mxop__rxbuf_t *b, int *fds, int max)
{
    int n = 0;
    for (int i = 0; i < b->nfds; i++) {
        if (n < max)
            fds[n++] = b->fds[i];
        else
            close(b->fds[i]);
    }
    b->nfds = 0;
    return n;
}
