/*
 * wire/ctlchan.h - the client end of the control protocol (Request/Reply
 * frames of proto/control.proto on mxop-serverd's Unix socket), for every
 * program that talks to the daemon: libmxop, the `mxop` command.
 *
 * It connects, says Hello, sends a request with the next id, and receives
 * one reply at a time, decoded into an arena or onto the heap.  What the
 * daemon sends unasked has id 0: a WorkerEvent is handed to a callback (or
 * dropped); anything else with id 0 is the daemon's last word before it
 * hangs up (a refusal: an error status, no body), which a failed send reads
 * too.  Errors are negative MXOP_E* codes with a sentence in the caller's
 * buffer; nothing here prints.
 */
#ifndef MXOP_WIRE_CTLCHAN_H
#define MXOP_WIRE_CTLCHAN_H

#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "wire/frame.h"

/* mxop__ctlchan_next's result when the frame was a WorkerEvent. */
#define MXOP__CTLCHAN_EVENT 1

typedef struct mxop__ctlchan {
    int fd; /* -1: not connected */
    uint64_t next_id;
    mxop__framebuf_t fb;
    mxop__pbarena_t *arena; /* replies are decoded here (borrowed); NULL: on the heap */
    /* The daemon hung up, said its last word or sent garbage: nothing more will come. */
    int dead;
    int refused;   /* that last word was an id-0 reply (its message is the error's sentence) */
    int garbled;   /* the frame came whole but held no Reply (another kind, or undecodable) */
    int sys_errno; /* errno of the last failed connect, 0: none */
} mxop__ctlchan_t;

/*
 * Takes a WorkerEvent and the descriptors that came with it (fds[0..nfds),
 * the callee's to close).
 */
typedef void mxop__ctlchan_event_fn(void *arg, const Mxop__WorkerEvent *ev, int *fds, int nfds);

void mxop__ctlchan_init(mxop__ctlchan_t *ch, mxop__pbarena_t *arena);
/* Closes the socket; the buffers and the id counter stay for a later connect. */
void mxop__ctlchan_hangup(mxop__ctlchan_t *ch);
/* Closes the socket and frees the buffers (not the arena). */
void mxop__ctlchan_free(mxop__ctlchan_t *ch);

/*
 * Connects to the Unix socket `path`, waiting at most timeout_ms for a full
 * listen backlog.  Returns 0, MXOP_EINVAL (empty or too long a path),
 * MXOP_EDISCONNECTED (nobody listens), MXOP_EDENIED, MXOP_ETIMEOUT or
 * MXOP_EIO, with a sentence in err (and errno in ch->sys_errno).
 */
int mxop__ctlchan_connect(mxop__ctlchan_t *ch, const char *path, int timeout_ms, char *err,
                          size_t errlen);

/*
 * Sends `req` with the next id (set in req->id) and `nfds` descriptors
 * (borrowed).  When the daemon has hung up, reads its last word first:
 * the refusal's code and message then, else MXOP_EDISCONNECTED.
 */
int mxop__ctlchan_send(mxop__ctlchan_t *ch, Mxop__Request *req, const int *fds, int nfds, char *err,
                       size_t errlen);

/*
 * Receives one frame within timeout_ms.  A WorkerEvent goes to on_event
 * (NULL: dropped) and MXOP__CTLCHAN_EVENT is returned; a reply with an id
 * is returned in *out (0), with its descriptors in fds[0..*nfds) (more than
 * max_fds, or any when fds is NULL, are closed; nfds may be NULL only with
 * fds NULL).  The daemon's last word returns its status (MXOP_EPROTOCOL when
 * that is not an error code) and sets ch->refused.  Free *out with
 * mxop__ctlchan_reply_free.
 */
int mxop__ctlchan_next(mxop__ctlchan_t *ch, int timeout_ms, mxop__ctlchan_event_fn *on_event,
                       void *arg, Mxop__Reply **out, int *fds, int max_fds, int *nfds, char *err,
                       size_t errlen);

/*
 * Receives until the reply to `id`, within timeout_ms in all: events as in
 * mxop__ctlchan_next, replies to other ids dropped.  Returns 0 with the
 * reply in *out whatever its status (see mxop__ctlchan_status), or an error.
 */
int mxop__ctlchan_await(mxop__ctlchan_t *ch, uint64_t id, int timeout_ms,
                        mxop__ctlchan_event_fn *on_event, void *arg, Mxop__Reply **out, int *fds,
                        int max_fds, int *nfds, char *err, size_t errlen);

/* mxop__ctlchan_send, then mxop__ctlchan_await with no descriptors either way. */
int mxop__ctlchan_request(mxop__ctlchan_t *ch, Mxop__Request *req, int timeout_ms,
                          mxop__ctlchan_event_fn *on_event, void *arg, Mxop__Reply **out, char *err,
                          size_t errlen);

/* Says Hello as `name` (MXOP_PROTOCOL_VERSION only); *out is the daemon's answer. */
int mxop__ctlchan_hello(mxop__ctlchan_t *ch, const char *name, int timeout_ms, Mxop__Reply **out,
                        char *err, size_t errlen);

/*
 * A reply's status as a code: 0, or the daemon's error (MXOP_EPROTOCOL when
 * the status is not an error code) with its message (or the code's) in err.
 */
int mxop__ctlchan_status(const Mxop__Reply *r, char *err, size_t errlen);

/* Frees a reply of mxop__ctlchan_next (nothing to do for an arena's). */
void mxop__ctlchan_reply_free(const mxop__ctlchan_t *ch, Mxop__Reply *r);

#endif /* MXOP_WIRE_CTLCHAN_H */
