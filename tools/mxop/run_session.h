/*
 * The daemon `mxop run` and `mxop verify` talk to: the one at --socket or
 * $MXOP_SOCKET, else a private mxop-serverd started for the command
 * (common/daemon_launch.h): a temporary directory (mode 0700) with the
 * control socket and a plugin directory holding a copy of the library.  The
 * private daemon is stopped and its directory removed at exit, also on an
 * error or a fatal signal, and it ends with this process however that ends.
 */
#ifndef MXOP_TOOLS_RUN_SESSION_H
#define MXOP_TOOLS_RUN_SESSION_H

#include <sys/types.h>

#include "common/daemon_launch.h"
#include "mxop/client.h"

typedef struct mxop__run_daemon {
    char socket[320];    /* the control socket */
    char library[512];   /* the name mxop_load_library gets */
    mxop__launch_t proc; /* the private daemon; proc.dir "" when the daemon is not ours */
} mxop__run_daemon_t;

/*
 * Finds or starts the daemon for library `lib` (a file path, or a bare name
 * found in the build tree's plugins/ beside this program; with a socket, a
 * name relative to that daemon's plugin directory).  `socket_opt` may be
 * NULL.  `trust`: a private daemon gets --trusted-library for the library,
 * so that its outputs are written in place (zero-copy), where this process
 * sees every byte the op writes, also past an output; the library can then
 * reach only this process's own arrays.  Returns 0, or -1 with a message in
 * err; nothing is left behind on failure.
 */
int mxop__run_daemon_open(mxop__run_daemon_t *d, const char *lib, const char *socket_opt, int trust,
                          char *err, size_t errlen);

/* Stops a private daemon and removes its directory; nothing for a shared one. */
void mxop__run_daemon_close(mxop__run_daemon_t *d);

/*
 * Opens a session with the daemon and loads the library into it.
 * Returns 0 or the MXOP_E* code, with a message in err.
 */
int mxop__run_session_open(const mxop__run_daemon_t *d, const char *name, mxop_client_t **out,
                           char *err, size_t errlen);

#endif
