/*
 * tests/fuzz/fuzz_frame.c - libFuzzer target: the frame decoder.
 *
 * The input is a byte stream as a peer would send it on any mxop channel.
 * It is cut into frames exactly as the daemon and the worker cut theirs
 * (wire/rxbuf.c: header checks, length bound, buffering), and each frame's
 * payload is unpacked as the message its kind names, through the same
 * bump arena the daemon uses.  Whatever the bytes, decoding must end in a
 * frame, a "need more" or a named header error: never a crash, an
 * overflow, or a leak (AddressSanitizer watches).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"
#include "data.pb-c.h"
#include "wire/frame.h"
#include "wire/rxbuf.h"
#include "supervisor.pb-c.h"

/* The daemon's per-connection arena size (server/daemon/core/daemon.h). */
#define ARENA_BYTES 16384

static mxop__pbarena_t arena;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return mxop__pbarena_init(&arena, ARENA_BYTES) == 0 ? 0 : 1;
}

/* Unpacks one payload as its kind's message; NULL (undecodable) is a valid outcome. */
static void unpack(uint16_t kind, uint32_t len, const uint8_t *payload)
{
    ProtobufCAllocator *al = &arena.allocator;
    mxop__pbarena_reset(&arena);
    switch (kind) {
    case MXOP__KIND_CTL_REQUEST: (void)mxop__request__unpack(al, len, payload); break;
    case MXOP__KIND_CTL_REPLY: (void)mxop__reply__unpack(al, len, payload); break;
    case MXOP__KIND_CALL: (void)mxop__call__unpack(al, len, payload); break;
    case MXOP__KIND_CALL_RESULT: (void)mxop__call_result__unpack(al, len, payload); break;
    case MXOP__KIND_SUP_REQUEST: (void)mxop__sup_request__unpack(al, len, payload); break;
    case MXOP__KIND_SUP_REPLY: (void)mxop__sup_reply__unpack(al, len, payload); break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mxop__rxbuf_t b;
    if (mxop__rxbuf_init(&b, 64) != 0)
        return 0;
    /*
     * The stream arrives in pieces, as from a socket: the first byte of the
     * input chooses the piece size, so that frames split across reads are
     * exercised as well as whole ones.
     */
    size_t piece = size > 0 ? (size_t)data[0] % 61 + 1 : 1;
    size_t pos = size > 0 ? 1 : 0;
    for (;;) {
        uint16_t kind;
        uint32_t len;
        const uint8_t *payload;
        int rc = mxop__rxbuf_frame(&b, &kind, &len, &payload);
        if (rc < 0)
            break; /* the stream lost its framing: the peer is answered and closed */
        if (rc == 1) {
            unpack(kind, len, payload);
            mxop__rxbuf_consume(&b, len);
            continue;
        }
        if (pos >= size)
            break;
        /* rxbuf_frame made room for at least one more byte. */
        size_t room = b.cap - b.end;
        size_t n = size - pos < piece ? size - pos : piece;
        if (n > room)
            n = room;
        if (n == 0)
            break;
        memcpy(b.data + b.end, data + pos, n);
        b.end += n;
        pos += n;
    }
    mxop__rxbuf_free(&b);
    return 0;
}
