/*
 * tools/mxop/reload_conn.h - the control connection of `mxop load` and
 * `mxop reload`: plain requests on the daemon's socket (Hello, then one
 * request at a time), and how a library's version is printed.
 */
#ifndef MXOP_TOOLS_RELOAD_CONN_H
#define MXOP_TOOLS_RELOAD_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "control.pb-c.h"
#include "wire/frame.h"

typedef struct mxop__rconn {
    int fd;
    uint64_t next_id;
    mxop__framebuf_t fb;
    mxop__pbarena_t arena;
} mxop__rconn_t;

/*
 * Connects to `socket_path` (NULL: $MXOP_SOCKET) and says Hello.  Returns 0,
 * or an MXOP_E* code with a sentence in err.
 */
int mxop__rconn_open(mxop__rconn_t *c, const char *socket_path, int timeout_ms, char *err,
                     size_t errlen);
/*
 * Sends `req` (its id is set here) and waits for its reply, skipping
 * events; descriptors that come with the reply are closed.  *out is valid
 * until the next request.  Returns 0, the daemon's error code (its message
 * in err), or a transport error.
 */
int mxop__rconn_request(mxop__rconn_t *c, Mxop__Request *req, int timeout_ms, Mxop__Reply **out,
                        char *err, size_t errlen);
void mxop__rconn_close(mxop__rconn_t *c);

/* Prints a library's version, as text lines (indented by `indent`) or as one JSON object. */
void mxop__print_libver(FILE *f, const Mxop__LibraryVersion *v, bool json, const char *indent);
/* Writes `s` as a JSON string. */
void mxop__json_str(FILE *f, const char *s);

#endif /* MXOP_TOOLS_RELOAD_CONN_H */
