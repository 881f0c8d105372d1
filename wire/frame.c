/*
 * wire/frame.c - the frame header codec and blocking frame I/O.
 */
#include "wire/frame.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "wire/fdpass.h"

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void mxop__frame_hdr_encode(uint8_t *out, uint16_t kind, uint32_t len)
{
    put_u32(out, MXOP__FRAME_MAGIC);
    put_u16(out + 4, MXOP__FRAME_VERSION);
    put_u16(out + 6, kind);
    put_u32(out + 8, len);
}

int mxop__frame_hdr_decode(const uint8_t *in, uint16_t *kind, uint32_t *len)
{
    if (get_u32(in) != MXOP__FRAME_MAGIC)
        return MXOP_EPROTOCOL;
    if (get_u16(in + 4) != MXOP__FRAME_VERSION)
        return MXOP_EVERSION;
    uint16_t k = get_u16(in + 6);
    if (k < MXOP__KIND_CTL_REQUEST || k > MXOP__KIND_RESULT_REC)
        return MXOP_EPROTOCOL;
    uint32_t l = get_u32(in + 8);
    if (l > MXOP__FRAME_MAX)
        return MXOP_EFRAME_TOO_LARGE;
    *kind = k;
    *len = l;
    return 0;
}

int mxop__framebuf_reserve(mxop__framebuf_t *fb, size_t bytes)
{
    if (bytes <= fb->cap)
        return 0;
    if (bytes > MXOP__FRAME_HDR + MXOP__FRAME_MAX)
        return MXOP_EFRAME_TOO_LARGE;
    size_t cap = fb->cap ? fb->cap : 4096;
    while (cap < bytes)
        cap *= 2;
    if (cap > MXOP__FRAME_HDR + MXOP__FRAME_MAX)
        cap = MXOP__FRAME_HDR + MXOP__FRAME_MAX;
    uint8_t *p = realloc(fb->data, cap);
    if (p == NULL)
        return MXOP_ENOMEM;
    fb->data = p;
    fb->cap = cap;
    return 0;
}

void mxop__framebuf_free(mxop__framebuf_t *fb)
{
    free(fb->data);
    fb->data = NULL;
    fb->cap = 0;
}

static int errno_to_code(int err)
{
    switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ENOTCONN:
    case ECONNREFUSED: return MXOP_EDISCONNECTED;
    case ENOMEM:
    case ENOBUFS: return MXOP_ENOMEM;
    default: return MXOP_EIO;
    }
}

int mxop__frame_send(int sock, mxop__framebuf_t *fb, uint16_t kind, const ProtobufCMessage *msg,
                     const int *fds, int nfds)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    if (plen > MXOP__FRAME_MAX)
        return MXOP_EFRAME_TOO_LARGE;
    int rc = mxop__framebuf_reserve(fb, MXOP__FRAME_HDR + plen);
    if (rc != 0)
        return rc;
    mxop__frame_hdr_encode(fb->data, kind, (uint32_t)plen);
    protobuf_c_message_pack(msg, fb->data + MXOP__FRAME_HDR);

    size_t total = MXOP__FRAME_HDR + plen, off = 0;
    while (off < total) {
        /* Descriptors ride on the first chunk only. */
        ssize_t n = mxop__send_fds(sock, fb->data + off, total - off, off == 0 ? fds : NULL,
                                   off == 0 ? nfds : 0);
        if (n < 0) {
            if (n == -EAGAIN) {
                struct pollfd p = {.fd = sock, .events = POLLOUT};
                if (poll(&p, 1, 10000) <= 0)
                    return MXOP_ETIMEOUT;
                continue;
            }
            return errno_to_code((int)-n);
        }
        off += (size_t)n;
    }
    return 0;
}

/* Milliseconds left until `deadline_ns`, for poll(); -1 means no deadline. */
static int ms_left(int64_t deadline_ns)
{
    if (deadline_ns < 0)
        return -1;
    int64_t left = deadline_ns - mxop__now_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* Reads exactly len bytes (collecting fds), waiting until deadline_ns. */
static int read_exact(int sock, uint8_t *buf, size_t len, int *fds, int max_fds, int *nfds,
                      int64_t deadline_ns)
{
    size_t off = 0;
    while (off < len) {
        struct pollfd p = {.fd = sock, .events = POLLIN};
        int pr = poll(&p, 1, ms_left(deadline_ns));
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return MXOP_EIO;
        }
        if (pr == 0)
            return MXOP_ETIMEOUT;
        ssize_t n = mxop__recv_fds(sock, buf + off, len - off, fds, max_fds, nfds);
        if (n == 0)
            return MXOP_EDISCONNECTED;
        if (n < 0) {
            if (n == -EAGAIN || n == -EINTR)
                continue;
            return errno_to_code((int)-n);
        }
        off += (size_t)n;
    }
    return 0;
}

int mxop__frame_recv(int sock, mxop__framebuf_t *fb, uint16_t *kind, uint32_t *len, int *fds,
                     int max_fds, int *nfds, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : mxop__now_ns() + (int64_t)timeout_ms * 1000000;
    uint8_t hdr[MXOP__FRAME_HDR];
    int dummy = 0;
    if (nfds == NULL)
        nfds = &dummy;
    *nfds = 0;

    int rc = read_exact(sock, hdr, sizeof(hdr), fds, fds ? max_fds : 0, nfds, deadline);
    if (rc != 0)
        goto fail;
    rc = mxop__frame_hdr_decode(hdr, kind, len);
    if (rc != 0)
        goto fail;
    rc = mxop__framebuf_reserve(fb, *len > 0 ? *len : 1);
    if (rc != 0)
        goto fail;
    rc = read_exact(sock, fb->data, *len, fds, fds ? max_fds : 0, nfds, deadline);
    if (rc != 0)
        goto fail;
    return 0;

fail:
    /* Descriptors of a frame we could not read are the caller's no longer. */
    for (int i = 0; fds != NULL && i < *nfds; i++)
        close(fds[i]);
    *nfds = 0;
    return rc;
}
