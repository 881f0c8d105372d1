/*
 * shm/region.h - shared memory regions: memfds sealed against shrinking.
 *
 * A region is created by the client (or is an fd the engine already has),
 * registered with the daemon over SCM_RIGHTS, and mapped by the worker:
 * twice, read-only for inputs and read-write for outputs, so an op that
 * writes into an input faults instead of corrupting the engine's data.
 */
#ifndef MXOP_SHM_REGION_H
#define MXOP_SHM_REGION_H

#include <stddef.h>
#include <stdint.h>

/**
 * Creates a memfd of `size` bytes (named `name`), sized with
 * posix_fallocate so that a full /dev/shm fails here and not with SIGBUS
 * later, and sealed against shrinking.  *fd_out is close-on-exec.
 * Returns 0, MXOP_EINVAL (size 0), MXOP_ESHM (with errno kept).
 */
int mxop__region_create_fd(const char *name, size_t size, int *fd_out);

/**
 * The same; with `sealable` the memfd is not sealed against further seals
 * (no F_SEAL_SEAL), so that the daemon can seal it read-only when its
 * session goes to scratch mode (server/daemon/session/memconfine.c).  Only the
 * bytes from `reserve_from` on are reserved here; the caller reserves the
 * rest with mxop__region_reserve_pages before anyone relies on them
 * (client/regions.c does it while its registration is on its way).
 */
int mxop__region_create_fd_sealable(const char *name, size_t size, int sealable,
                                    size_t reserve_from, int *fd_out);

/*
 * Regions of at least this many bytes are reserved in two parts: the upper
 * one before the registration is sent, the lower one while it is on its
 * way, so that the worker faults in its writable view
 * (server/worker/prefill.c) while the client reserves.  With a mailbox the
 * client says how far it has come (shm/mailbox.h's reserve words) and the
 * worker follows it down, so the upper part is an eighth; without one, the
 * worker waits for the first call for the lower part, and it is half.
 * Measured on a 64 MiB region (bench/diag/reserve_overlap.c):
 * reserving takes about 0.3 ms a MiB here and faulting in a view about as
 * much, and the two run on two CPUs.
 */
#define MXOP__REGION_SPLIT_MIN ((size_t)8 << 20)

/**
 * Where the reservation of a new region of `size` bytes splits: 0 below
 * MXOP__REGION_SPLIT_MIN (all reserved before the registration); else,
 * rounded down to MXOP__PREFAULT_MAX (the worker's chunk), half of it, or
 * seven eighths when the client tells the worker its progress as it
 * reserves the rest (`told`, the mailbox's reserve words): the worker
 * then faults in each part soon after it is reserved.
 */
size_t mxop__region_split(size_t size, int told);

/* The bytes reserved between two words of progress (client/regions.c). */
#define MXOP__REGION_RESERVE_STEP ((size_t)4 << 20)

/**
 * Reserves [off, off + len) of a region's memfd (posix_fallocate).
 * Returns 0, or MXOP_ESHM with errno set (ENOSPC: /dev/shm is full).
 */
int mxop__region_reserve_pages(int fd, size_t off, size_t len);

/**
 * Checks that `fd` can back a region of `size` bytes: a regular file (or
 * memfd) at least that large.  Writes a reason into err[errlen] on failure.
 * Returns 0 or MXOP_EINVAL.
 */
int mxop__region_check_fd(int fd, uint64_t size, char *err, size_t errlen);

/**
 * mmap(MAP_SHARED) of the first `size` bytes of `fd`, with `writable`
 * choosing PROT_READ|PROT_WRITE or PROT_READ.  Returns 0 or MXOP_ESHM.
 */
int mxop__region_map(int fd, size_t size, int writable, void **base);

/** munmap; accepts base NULL. */
void mxop__region_unmap(void *base, size_t size);

/*
 * The most bytes of a mapping mxop__region_prefault faults in.  Beyond
 * that, pre-faulting at registration costs more than the first use saves:
 * on this VM populating both worker mappings of a fresh 64 MiB region took
 * 45-60 ms, while the first call that touched it unfaulted cost 6 ms more
 * than later calls as an input and 20-30 ms more as an output (make bench,
 * section 4 and bench_prefault).  The worker faults
 * the rest of a writable view in after answering, in the background and
 * under each call's outputs (server/worker/prefill.c).  Huge pages, which
 * would cut the faults 512-fold, are not there for shared memory on this
 * machine (/sys/kernel/mm/transparent_hugepage/shmem_enabled is "never").
 */
#define MXOP__PREFAULT_MAX ((size_t)2 << 20)

/**
 * Faults the first MXOP__PREFAULT_MAX bytes of a mapping in now (all of a
 * small one: the mailbox, small regions), so that the first op that
 * touches them runs at full speed; the rest is faulted in by its first
 * use (or, for a worker's writable view, by server/worker/prefill.c).
 * Uses MADV_POPULATE_READ/WRITE where the kernel has it, else touches each
 * page.  Returns 0.
 */
int mxop__region_prefault(void *base, size_t size, int writable);

#endif /* MXOP_SHM_REGION_H */
