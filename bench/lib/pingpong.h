/*
 * bench/lib/pingpong.h - the floor of a socket data path: a raw Unix-socket
 * ping-pong between two processes.
 *
 * The benchmark forks an echo peer on one end of a socketpair (a stream
 * socket, as mxop's data channel is) and times write + read of a fixed-size
 * message on the other: two syscalls and two wake-ups per round trip,
 * nothing else.
 */
#ifndef MXOP_BENCH_LIB_PINGPONG_H
#define MXOP_BENCH_LIB_PINGPONG_H

#include <stddef.h>
#include <sys/types.h>

#include "bench/lib/stats.h"

#define MXB_PING_BYTES 64

/* The first part of a message, read on its own as a frame header is. */
#define MXB_PING_HDR 12

/**
 * How the two sides move a message.  RAW is the floor.  The other two
 * replay a data path's syscalls with everything else taken away, to tell
 * how much of a call is syscalls:
 *   MXOP: what mxop 0.1 does per call (strace): client poll(0) of both
 *         sockets, sendmsg, poll, recv of the header, recv of the rest;
 *         worker poll of both sockets, then poll + recvmsg for the header
 *         and again for the body, sendmsg (11 syscalls per round trip);
 *   LEAN: client sendmsg, one blocking recv; worker poll of both
 *         sockets, one recv of the whole frame, sendmsg (5 syscalls).
 */
enum mxb_ping_mode { MXB_PING_RAW = 0, MXB_PING_MXOP = 1, MXB_PING_LEAN = 2 };

typedef struct mxb_pingpong {
    int fd;
    int idle_fd; /* never readable: polled where mxop polls its other socket */
    int mode;
    pid_t peer;
} mxb_pingpong_t;

/** Forks the echo peer for `mode`.  0, or -1 with the reason in err[errlen]. */
int mxb_pingpong_start(mxb_pingpong_t *p, int mode, char *err, size_t errlen);

/** Times `n` round trips into `s`.  0, or -1 (the peer is gone). */
int mxb_pingpong_run(mxb_pingpong_t *p, int n, mxb_samples_t *s);

/** Ends the peer (closing the socket is its signal) and reaps it. */
void mxb_pingpong_stop(mxb_pingpong_t *p);

#endif /* MXOP_BENCH_LIB_PINGPONG_H */
