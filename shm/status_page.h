/*
 * shm/status_page.h - the page a worker shares with the daemon.
 *
 * The worker publishes the call it is running (id, op, start, deadline);
 * the daemon's watchdog reads it to enforce deadlines even when the client
 * is gone, and to name the op in flight when the worker dies.  The worker
 * also leaves a fault note here from its signal handler (e.g. "op wrote
 * into input 0") so the daemon can report more than a signal number.
 *
 * Writes follow a seqlock: seq is odd while the worker updates the call
 * fields; a reader retries until it sees the same even seq twice.
 */
#ifndef MXOP_SERVER_STATUS_PAGE_H
#define MXOP_SERVER_STATUS_PAGE_H

#include <stdatomic.h>
#include <stdint.h>

/* The exit statuses read beside this page's note. */
#include "shm/worker_exit.h"

#define MXOP__STATUS_MAGIC 0x4D585354u /* "MXST" */
#define MXOP__STATUS_OP_MAX 64
#define MXOP__STATUS_MSG_MAX 256
#define MXOP__STATUS_CB_MAX 24
#define MXOP__STATUS_BT_MAX 384
/* The inputs a crash's log line quotes: the first 4, with up to 6 dimensions each. */
#define MXOP__STATUS_IN_MAX 4
#define MXOP__STATUS_DIMS_MAX 6

typedef struct mxop__status_page {
    uint32_t magic;
    _Atomic uint32_t seq;
    _Atomic uint32_t busy; /* 1 while a call runs */
    uint32_t pad;
    uint64_t call_id;
    int64_t start_ns;    /* CLOCK_MONOTONIC */
    int64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none */
    char op[MXOP__STATUS_OP_MAX];
    _Atomic int32_t fault_code; /* MXOP_E* set by the worker's fault handler */
    char fault_msg[MXOP__STATUS_MSG_MAX];
    /*
     * The library callback running now ("check_attrs", "infer_type", ...),
     * or "": the worker's own account, which the daemon only quotes in a
     * timeout's message (the kill itself is decided from trusted state).
     */
    char callback[MXOP__STATUS_CB_MAX];
    /*
     * The faulting thread's backtrace, symbolised ("f+0x1c (lib.so) <
     * g+0x40 (lib.so) < ..."), written by the fault handler before the
     * worker dies; "" when there is none.  The worker's account, quoted.
     */
    char backtrace[MXOP__STATUS_BT_MAX];
    /*
     * The inputs of the call begun last, as the worker received them (dtype,
     * rank, dimensions; in_count of them in all): the worker's account, which
     * the daemon quotes in a crash's log line, since a call's descriptors
     * travel from the client to the worker without it.
     */
    uint32_t in_count;
    int32_t in_dtype[MXOP__STATUS_IN_MAX];
    int32_t in_ndim[MXOP__STATUS_IN_MAX];
    int64_t in_dims[MXOP__STATUS_IN_MAX][MXOP__STATUS_DIMS_MAX];
} mxop__status_page_t;

#endif /* MXOP_SERVER_STATUS_PAGE_H */
