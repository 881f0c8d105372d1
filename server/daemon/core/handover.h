/*
 * server/daemon/core/handover.h - upgrading the daemon without stopping its
 * clients: a new mxop-serverd started with --take-over receives the old
 * one's listening socket (handover.c explains the exchange).
 */
#ifndef MXOP_SERVER_DAEMON_HANDOVER_H
#define MXOP_SERVER_DAEMON_HANDOVER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mxop__daemon mxop__daemon_t;

/*
 * The new daemon's side, from main.c: connects to the running daemon's
 * hand-over socket (SOCKET.takeover), asks for its listening socket and
 * returns it (non-blocking, close-on-exec; for mxop__listener_adopt), or a negative MXOP_E* code
 * with a sentence in err.  The old daemon still accepts until the commit.
 */
int mxop__handover_receive(mxop__daemon_t *d, char *err, size_t errlen);

/*
 * The new daemon's side, from main.c once its start succeeded: tells the
 * old daemon to stop accepting and waits for it to say so.  Returns 0 (the
 * caller then starts accepting), or a negative code with a sentence: the
 * start is then abandoned and the old daemon goes on serving (the rollback).
 */
int mxop__handover_commit(mxop__daemon_t *d, char *err, size_t errlen);

/*
 * Every daemon that made its own socket (or took one over) listens on
 * SOCKET.takeover for a successor (same user or root only).  Returns 0 or
 * a negative code with a sentence; failure only disables upgrades.
 */
int mxop__handover_listen(mxop__daemon_t *d, char *err, size_t errlen);

/* Stops listening for a successor and removes SOCKET.takeover if still ours. */
void mxop__handover_stop(mxop__daemon_t *d);

/* True once this daemon handed its socket over to a successor. */
bool mxop__handover_done(void);

/*
 * Each watchdog tick: drops a successor that asked for nothing in time.
 * (A daemon that handed its socket over ends through the drain, which
 * reads mxop__handover_done.)
 */
void mxop__handover_tick(mxop__daemon_t *d);

#endif /* MXOP_SERVER_DAEMON_HANDOVER_H */
