/*
 * wire/rxbuf.h - buffered reception of frames from a stream socket.
 *
 * The data channel's hot path reads a whole frame (header and payload) with
 * one recv() when it is there, instead of one recv() for the header and
 * another for the payload: the buffer takes whatever the socket has, and
 * frames are cut out of it.  Bytes of a following frame stay for the next
 * read.  Descriptors that arrive (SCM_RIGHTS) are kept until the frame that
 * carried them claims them.
 */
#ifndef MXOP_SHM_RXBUF_H
#define MXOP_SHM_RXBUF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/frame.h"

typedef struct mxop__rxbuf {
    uint8_t *data;
    size_t cap;
    size_t off;                   /* first byte not yet consumed */
    size_t end;                   /* one past the last byte received */
    int fds[MXOP__FRAME_MAX_FDS]; /* received, not yet claimed */
    int nfds;
    uint32_t max; /* the largest payload a header may claim; 0: MXOP__FRAME_MAX */
} mxop__rxbuf_t;

/** Allocates `cap` bytes (grown later up to a frame's maximum).  0 or MXOP_ENOMEM. */
int mxop__rxbuf_init(mxop__rxbuf_t *b, size_t cap);

/**
 * Sets the largest payload a frame's header may claim (at most
 * MXOP__FRAME_MAX; 0 means that): a reader that knows its peer's frames are
 * small refuses a forged length at the header instead of buffering for it.
 */
void mxop__rxbuf_set_max(mxop__rxbuf_t *b, uint32_t max);

/** Frees the buffer and closes unclaimed descriptors.  Accepts a zeroed buffer. */
void mxop__rxbuf_free(mxop__rxbuf_t *b);

/** Forgets buffered bytes and closes unclaimed descriptors (a new channel). */
void mxop__rxbuf_reset(mxop__rxbuf_t *b);

/**
 * Whether a whole frame is buffered: 1 with *kind, *len and *payload (valid
 * until the next fill), 0 when more bytes are needed (room for them is
 * made), or a header error (MXOP_EPROTOCOL, MXOP_EVERSION,
 * MXOP_EFRAME_TOO_LARGE, also for a payload over the buffer's max, MXOP_ENOMEM):
 * the stream has lost its framing.
 */
int mxop__rxbuf_frame(mxop__rxbuf_t *b, uint16_t *kind, uint32_t *len, const uint8_t **payload);

/** Drops the frame mxop__rxbuf_frame returned. */
void mxop__rxbuf_consume(mxop__rxbuf_t *b, uint32_t len);

/**
 * One read from `fd` into the free space: recvmsg() collecting descriptors
 * when want_fds, else recv() with `flags` (MSG_DONTWAIT, or 0 for a
 * blocking socket that may have SO_RCVTIMEO).  Returns bytes read (> 0), 0
 * at EOF, or -errno (-EAGAIN, -EINTR included).
 */
ssize_t mxop__rxbuf_fill(mxop__rxbuf_t *b, int fd, int want_fds, int flags);

/** Takes the descriptors received so far: up to max into fds; returns the count. */
int mxop__rxbuf_take_fds(mxop__rxbuf_t *b, int *fds, int max);

#endif /* MXOP_SHM_RXBUF_H */
