/*
 * wire/frame.h - the frame format shared by every mxop channel.
 *
 * A frame is a 12-byte header followed by one packed protobuf-c message:
 *
 *     u32 magic    "MXOP" (0x504F584D, little-endian)
 *     u16 version  frame format version (MXOP__FRAME_VERSION)
 *     u16 kind     which message follows (enum mxop__frame_kind)
 *     u32 length   payload bytes, at most MXOP__FRAME_MAX
 *
 * File descriptors (regions, data channels) ride on the first byte of a
 * frame as SCM_RIGHTS.  The helpers here are blocking with a deadline; the
 * daemon uses the header codec with its own non-blocking reader.
 */
#ifndef MXOP_PROTO_FRAME_H
#define MXOP_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#define MXOP__FRAME_MAGIC 0x504F584Du
#define MXOP__FRAME_VERSION 1
#define MXOP__FRAME_HDR 12
/* The largest payload any peer accepts; bigger frames are a protocol error. */
#define MXOP__FRAME_MAX (1u << 20)
/* The most fds one frame may carry. */
#define MXOP__FRAME_MAX_FDS 4

enum mxop__frame_kind {
    MXOP__KIND_CTL_REQUEST = 1, /* Mxop__Request, client -> daemon */
    MXOP__KIND_CTL_REPLY = 2,   /* Mxop__Reply, daemon -> client */
    MXOP__KIND_CALL = 3,        /* Mxop__Call, client -> worker */
    MXOP__KIND_CALL_RESULT = 4, /* Mxop__CallResult, worker -> client */
    MXOP__KIND_SUP_REQUEST = 5, /* Mxop__SupRequest, daemon -> worker */
    MXOP__KIND_SUP_REPLY = 6,   /* Mxop__SupReply, worker -> daemon */
    MXOP__KIND_CALL_REC = 7,    /* a call record (shm/call_record.h), client -> worker */
    MXOP__KIND_RESULT_REC = 8,  /* a result record (shm/call_record.h), worker -> client */
};

/** Writes a header for a payload of `len` bytes into out[MXOP__FRAME_HDR]. */
void mxop__frame_hdr_encode(uint8_t *out, uint16_t kind, uint32_t len);

/**
 * Decodes a header.  Returns 0, MXOP_EPROTOCOL (bad magic or unknown kind),
 * MXOP_EVERSION (other frame version) or MXOP_EFRAME_TOO_LARGE.
 */
int mxop__frame_hdr_decode(const uint8_t *in, uint16_t *kind, uint32_t *len);

/**
 * A reusable frame buffer: holds the encoded frame on send, the payload on
 * receive.  Grows up to MXOP__FRAME_HDR + MXOP__FRAME_MAX and is then reused,
 * so a steady stream of calls allocates nothing.
 */
typedef struct mxop__framebuf {
    uint8_t *data;
    size_t cap;
} mxop__framebuf_t;

int mxop__framebuf_reserve(mxop__framebuf_t *fb, size_t bytes);
void mxop__framebuf_free(mxop__framebuf_t *fb);

/**
 * Packs `msg` into a frame and sends it on the blocking socket `sock`,
 * with `nfds` descriptors (borrowed; the kernel duplicates them).
 * Returns 0, MXOP_EFRAME_TOO_LARGE, MXOP_EDISCONNECTED (peer gone; never
 * SIGPIPE), MXOP_EIO.
 */
int mxop__frame_send(int sock, mxop__framebuf_t *fb, uint16_t kind, const ProtobufCMessage *msg,
                     const int *fds, int nfds);

/**
 * Receives one frame from `sock`, waiting at most timeout_ms (< 0: forever)
 * for it to begin and to complete.  The payload lands in fb->data[0..*len).
 * Received descriptors (close-on-exec) go to fds[0..*nfds) (taken by the
 * caller; extra ones beyond max_fds are closed).  fds may be NULL (any
 * received descriptor is then closed).
 * Returns 0, MXOP_ETIMEOUT, MXOP_EDISCONNECTED (orderly EOF or reset), or a
 * header error (MXOP_EPROTOCOL, MXOP_EVERSION, MXOP_EFRAME_TOO_LARGE).
 */
int mxop__frame_recv(int sock, mxop__framebuf_t *fb, uint16_t *kind, uint32_t *len, int *fds,
                     int max_fds, int *nfds, int timeout_ms);

/**
 * A bump allocator for protobuf-c unpacking: unpacked messages live in a
 * fixed buffer that is reset before each unpack, so decoding a frame does
 * not touch malloc.  Requests beyond the buffer fall back to malloc and
 * are freed at the next reset.
 */
typedef struct mxop__pbarena {
    ProtobufCAllocator allocator; /* pass &arena->allocator to *_unpack */
    uint8_t *buf;
    size_t cap;
    size_t used;
    void *overflow; /* list of malloc'd overflow blocks */
} mxop__pbarena_t;

int mxop__pbarena_init(mxop__pbarena_t *a, size_t cap);
/** Forgets everything unpacked since the last reset (no free_unpacked needed). */
void mxop__pbarena_reset(mxop__pbarena_t *a);
void mxop__pbarena_destroy(mxop__pbarena_t *a);

#endif /* MXOP_PROTO_FRAME_H */
