/*
 * server/daemon/session/memconfine.h - the engine's memory is the engine's: which
 * sessions run in scratch mode, and the read-only descriptors their
 * workers get (memconfine.c, docs/security.md "The engine's memory").
 */
#ifndef MXOP_SERVER_DAEMON_MEMCONFINE_H
#define MXOP_SERVER_DAEMON_MEMCONFINE_H

#include <stdbool.h>
#include <stddef.h>

#include "server/daemon/core/daemon.h"

/**
 * Whether loading the library `resolved` (a realpath in the plugin
 * directory) leaves the session zero-copy: any library under --sandbox
 * none or basic, under strict only one named by --trusted-library.
 */
bool mxop__memconfine_trusted(const mxop__daemon_t *d, const char *resolved);

/**
 * Puts session `s` in scratch mode for good, before an untrusted library
 * is sent to its worker: seals every memfd region it has (and those being
 * registered) against new writable mappings, and sets s->mem_confined.
 * Returns 0, or MXOP_ESHM with a sentence when a region cannot be made
 * read-only (nothing changed then).
 */
int mxop__memconfine_session(mxop__session_t *s, char *err, size_t errlen);

/**
 * The descriptor a worker of a scratch-mode session gets for region fd
 * `fd`: a read-only reopen (that no mprotect or mmap can make writable),
 * with the memfd sealed against new writable mappings so that a reopen
 * through /proc/self/fd cannot give write access back either.  Returns
 * the new descriptor (the caller closes it) or -1 with a sentence in err.
 */
int mxop__memconfine_ro_fd(int fd, char *err, size_t errlen);

/**
 * Before a new region of session `s` goes to its worker: in scratch mode,
 * whether fd can be given read-only (sealed, reopened).  Returns 0, or
 * MXOP_ESHM with a sentence in err.
 */
int mxop__memconfine_check_region(const mxop__session_t *s, int fd, bool scratch, char *err,
                                  size_t errlen);

#endif /* MXOP_SERVER_DAEMON_MEMCONFINE_H */
