/*
 * client/shared_heap.h - what the rest of libmxop asks of the shared heap
 * (client/shared_heap.c).  Not installed.
 *
 * Locking: the heap has one lock of its own, taken after a client's lock
 * and never held while a client's lock is taken or a request is sent.
 */
#ifndef MXOP_CLIENT_SHARED_HEAP_H
#define MXOP_CLIENT_SHARED_HEAP_H

#include <stdint.h>

#include "mxop/client.h"

/** Whether any block is mapped now: without one no pointer needs a lookup. */
int mxop__shared_any(void);

/**
 * For a call of c (c->lock held): when [p, p + n) lies in a live block,
 * registers the block with c's session unless it is already (a control
 * round trip, once per block and session) and gives the block's region
 * and p's offset in it.  `write`: the call writes the array (an output, a
 * mutated input).  Returns 1 (resolved), 0 (staged as before: not in a
 * block, or a block this call cannot use in place), or an error with
 * c->err set.
 */
int mxop__shared_resolve(mxop_client_t *c, const void *p, uint64_t n, int write, uint32_t *region,
                         uint64_t *offset);

/**
 * A safe point of c (c->lock held): unregisters from c's session the
 * blocks that were freed while exposed and are to be revoked, and unmaps
 * those that no session holds any more.  No syscall when none is pending.
 */
void mxop__shared_revoke(mxop_client_t *c);

/** c closes: its registrations are forgotten (its session ends with them). */
void mxop__shared_forget(mxop_client_t *c);

#endif /* MXOP_CLIENT_SHARED_HEAP_H */
