/*
 * server/worker/prefill.h - faulting in the writable view of a new region
 * in the background (server/worker/prefill.c).
 */
#ifndef MXOP_SERVER_WORKER_PREFILL_H
#define MXOP_SERVER_WORKER_PREFILL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/region.h"

/*
 * Regions whose writable view is at most this many bytes are faulted in at
 * once, all of them, before the map is answered (mxop__region_prefault);
 * larger ones have this head faulted in at once and the rest here.
 */
#define MXOP__PREFILL_MIN MXOP__PREFAULT_MAX

/*
 * The most bytes of one region faulted in the background: about 1 us of
 * CPU a page here, so 512 MiB is about 130 ms, far below what the
 * daemon's idle-CPU watchdog tolerates (server/daemon/worker/worker.h).
 * Beyond it, pages are faulted in by their first use.
 */
#define MXOP__PREFILL_MAX ((size_t)512 << 20)

/**
 * Queues the writable view rw (size bytes) of a new region, whose memfd's
 * inode number is `ino`: a background thread faults it in from the end
 * towards the head, 2 MiB at a time.  With reserved_from 0 the head
 * (MXOP__PREFILL_MIN) is already faulted in (mxop__region_prefault).
 * Otherwise the client may still be reserving the bytes before
 * reserved_from (RegisterRegion.reserved_from): the chunks that reach
 * below it are held back until the client's progress words say they are
 * reserved (mxop__prefill_watch), or a call claims a span of the view,
 * which it can only do once the client's registration returned.  Does
 * nothing where the thread cannot be started (the first use faults).
 */
void mxop__prefill_start(void *rw, size_t size, size_t reserved_from, uint64_t ino);

/**
 * Where the client says how far it has reserved the region it registers
 * (the mailbox's reserve words, shm/mailbox.h), or NULL, NULL: called when
 * a mailbox is attached, and before it is unmapped (the thread reads the
 * words only under the lock this takes).
 */
void mxop__prefill_watch(const _Atomic uint64_t *ino, const _Atomic uint64_t *from);

/**
 * Before a call writes [off, off + len) of the view at rw: releases the
 * view's held chunks to the background, and faults in the chunks of that
 * span not yet done, from the head, on the calling thread.  Costs one
 * relaxed load when no view is pending.
 */
void mxop__prefill_claim(void *rw, size_t off, size_t len);

/**
 * Stops any prefill of the mapping at rw and returns once the thread no
 * longer touches it: called before rw is unmapped.
 */
void mxop__prefill_cancel(void *rw);

#endif
