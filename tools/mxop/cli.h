/*
 * tools/mxop/cli.h - what the subcommands that ask the daemon (status,
 * ops, stats, top, load, reload) share: reaching it (cli_conn.c) and
 * printing (cli_print.c).
 */
#ifndef MXOP_TOOLS_CLI_H
#define MXOP_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common.pb-c.h"
#include "control.pb-c.h"
#include "wire/ctlchan.h"

/* A control connection to mxop-serverd, after Hello. */
typedef struct mxop__cli_conn {
    mxop__ctlchan_t ch; /* replies on the heap */
    Mxop__Reply *last;  /* mxop__cli_ask's, until the next ask or close */
    char server_version[64];
} mxop__cli_conn_t;

/*
 * The socket: `opt` (--socket) if given, else $MXOP_SOCKET; NULL when
 * neither (with a sentence on stderr).
 */
const char *mxop__cli_socket(const char *prog, const char *opt);

/*
 * Connects to the daemon at `path` and says Hello.  Returns 0, or an exit
 * status (MXOP_CLI_EXIT_NO_DAEMON, MXOP_CLI_EXIT_FAILED) after a sentence
 * on stderr naming `prog`.
 */
int mxop__cli_connect(const char *prog, const char *path, mxop__cli_conn_t *c);
void mxop__cli_close(mxop__cli_conn_t *c);

/*
 * Sends `req` (its id is set here) and waits for its reply (events are
 * skipped; descriptors that come are closed).  On success *out is the
 * reply (free with mxop__reply__free_unpacked(*out, NULL)); a reply with a
 * non-zero status is a failure.  Returns 0 or an exit status after a
 * sentence on stderr.
 */
int mxop__cli_request(const char *prog, mxop__cli_conn_t *c, Mxop__Request *req, Mxop__Reply **out);

/*
 * The same connection for a command that words its own errors (load,
 * reload): connects to `socket_path` (NULL: $MXOP_SOCKET) and says Hello.
 * Returns 0, or an MXOP_E* code with a sentence in err (MXOP_EINVAL: no or
 * too long a path).
 */
int mxop__cli_open(mxop__cli_conn_t *c, const char *socket_path, int timeout_ms, char *err,
                   size_t errlen);
/*
 * Sends `req` (its id is set here) and waits for its reply, skipping
 * events; descriptors that come with the reply are closed.  *out is valid
 * until the next request or mxop__cli_close.  Returns 0, the daemon's
 * error code (its message in err), or a transport error.
 */
int mxop__cli_ask(mxop__cli_conn_t *c, Mxop__Request *req, int timeout_ms, Mxop__Reply **out,
                  char *err, size_t errlen);

/* A JSON string literal of `s` (NULL: ""); bytes past ASCII escaped as Latin-1. */
void mxop__cli_json_str(FILE *f, const char *s);
/* A JSON string literal of `s`, bytes past ASCII as they are (library paths, op names). */
void mxop__json_str(FILE *f, const char *s);
/* Prints a library's version, as text lines (indented by `indent`) or as one JSON object. */
void mxop__print_libver(FILE *f, const Mxop__LibraryVersion *v, bool json, const char *indent);
/* A duration in ns as "812ns", "3.2us", "1.50ms", "2.00s". */
const char *mxop__cli_dur(uint64_t ns, char *buf, size_t len);
/* A byte count as "512B", "4.0KiB", "1.5MiB", "2.0GiB". */
const char *mxop__cli_bytes(uint64_t n, char *buf, size_t len);
/* An attribute type's name ("int", "float_list", ...). */
const char *mxop__cli_attr_type(int32_t type);
/* An op's flags as a comma-separated word list into buf ("" when none). */
const char *mxop__cli_op_flags(const Mxop__OpInfo *o, char *buf, size_t len);
/* One op, with its signature, attributes and flags, as text (ops) or a JSON object. */
void mxop__cli_op_text(FILE *f, const Mxop__OpInfo *o);
void mxop__cli_op_json(FILE *f, const Mxop__OpInfo *o);

/*
 * Replaces control characters in every string of `m` (and the messages it
 * holds) with '?': names and messages come from libraries and workers, and
 * text output must not carry their terminal escapes.  JSON output escapes
 * instead.
 */
void mxop__cli_sanitize(ProtobufCMessage *m);

#endif /* MXOP_TOOLS_CLI_H */
