/*
 * tools/mxop/cli.h - what the observability subcommands (status, ops,
 * stats, top) share: reaching the daemon (cli_conn.c) and printing
 * (cli_print.c).
 */
#ifndef MXOP_TOOLS_CLI_H
#define MXOP_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "common.pb-c.h"
#include "control.pb-c.h"
#include "wire/frame.h"

/* A control connection to mxop-serverd, after Hello. */
typedef struct mxop__cli_conn {
    int fd;
    mxop__framebuf_t fb;
    uint64_t next_id;
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

/* A JSON string literal of `s` (NULL: ""). */
void mxop__cli_json_str(FILE *f, const char *s);
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
