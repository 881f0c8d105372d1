/*
 * client/inflight.h - the calling thread's worker in flight, for a watcher
 * that abandons a call by killing its worker (client/inflight.c).
 */
#ifndef MXOP_CLIENT_INFLIGHT_H
#define MXOP_CLIENT_INFLIGHT_H

#include <stdint.h>

/* Publishes `pid` as this thread's worker in flight; returns what was there. */
int32_t mxop__inflight_enter(int32_t pid);

/* Puts back what mxop__inflight_enter returned, as the call ends. */
void mxop__inflight_leave(int32_t prev);

#endif
