/*
 * tools/mxop/cli_conn.c - the control connection of every `mxop` subcommand
 * that asks the daemon (status, ops, stats, top, load, reload): the control
 * layer (wire/ctlchan.h) on a plain blocking socket, without a session
 * unless a command opens one, and the sentences the command prints.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "tools/mxop/cli.h"
#include "tools/mxop/commands.h"

/* How long a reply may take: a LoadLibrary waits for the worker's load. */
#define REPLY_TIMEOUT_MS 60000

const char *mxop__cli_socket(const char *prog, const char *opt)
{
    if (opt != NULL && opt[0] != '\0')
        return opt;
    const char *env = getenv("MXOP_SOCKET");
    if (env != NULL && env[0] != '\0')
        return env;
    fprintf(stderr, "mxop %s: no daemon socket: give --socket PATH or set MXOP_SOCKET\n", prog);
    return NULL;
}

static void conn_init(mxop__cli_conn_t *c)
{
    memset(c, 0, sizeof(*c));
    /* Replies on the heap: a command may keep one while it asks the next. */
    mxop__ctlchan_init(&c->ch, NULL);
}

static void hello_request(Mxop__Hello *h, Mxop__Request *req)
{
    *h = (Mxop__Hello)MXOP__HELLO__INIT;
    h->min_version = MXOP_PROTOCOL_VERSION;
    h->max_version = MXOP_PROTOCOL_VERSION;
    h->client_name = "mxop";
    *req = (Mxop__Request)MXOP__REQUEST__INIT;
    req->body_case = MXOP__REQUEST__BODY_HELLO;
    req->hello = h;
}

/*
 * Sends `req` and waits for its reply (events skipped): the control layer's
 * code, with *sent saying whether the request went out.
 */
static int exchange(mxop__cli_conn_t *c, Mxop__Request *req, int timeout_ms, Mxop__Reply **out,
                    bool *sent, char *why, size_t whylen)
{
    *out = NULL;
    int rc = mxop__ctlchan_send(&c->ch, req, NULL, 0, why, whylen);
    *sent = rc == 0;
    if (*sent)
        rc = mxop__ctlchan_await(&c->ch, req->id, timeout_ms, NULL, NULL, out, NULL, 0, NULL, why,
                                 whylen);
    return rc;
}

void mxop__cli_close(mxop__cli_conn_t *c)
{
    mxop__ctlchan_reply_free(&c->ch, c->last);
    c->last = NULL;
    mxop__ctlchan_free(&c->ch);
}

int mxop__cli_connect(const char *prog, const char *path, mxop__cli_conn_t *c)
{
    char why[256];
    conn_init(c);
    int rc = mxop__ctlchan_connect(&c->ch, path, REPLY_TIMEOUT_MS, why, sizeof(why));
    if (rc == MXOP_EINVAL) {
        fprintf(stderr, "mxop %s: socket path '%s' is longer than %zu bytes\n", prog, path,
                sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
        return MXOP_CLI_EXIT_USAGE;
    }
    if (rc != 0) {
        fprintf(stderr, "mxop %s: cannot reach mxop-serverd at %s: %s\n", prog, path,
                strerror(c->ch.sys_errno));
        mxop__cli_close(c);
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    Mxop__Hello h;
    Mxop__Request req;
    hello_request(&h, &req);
    Mxop__Reply *r;
    rc = mxop__cli_request(prog, c, &req, &r);
    if (rc != 0) {
        mxop__cli_close(c);
        /* A peer that hangs up or garbles Hello is not a daemon we can talk to. */
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    if (r->body_case == MXOP__REPLY__BODY_HELLO && r->hello->server_version != NULL)
        snprintf(c->server_version, sizeof(c->server_version), "%s", r->hello->server_version);
    mxop__ctlchan_reply_free(&c->ch, r);
    return 0;
}

/*
 * A daemon that refuses a connection (an uid it does not allow, a worker's,
 * a full table) says why in its last word, then hangs up: printed as a
 * refusal.
 */
int mxop__cli_request(const char *prog, mxop__cli_conn_t *c, Mxop__Request *req, Mxop__Reply **out)
{
    char why[1024];
    bool sent;
    int rc = exchange(c, req, REPLY_TIMEOUT_MS, out, &sent, why, sizeof(why));
    if (rc != 0 && c->ch.refused) {
        fprintf(stderr, "mxop %s: mxop-serverd refused the connection: %s: %s\n", prog,
                mxop_err_name(rc), why);
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    if (rc != 0 && !sent) {
        fprintf(stderr, "mxop %s: cannot send to mxop-serverd: %s\n", prog, mxop_strerror(rc));
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    if (rc != 0 && c->ch.garbled) {
        fprintf(stderr, "mxop %s: mxop-serverd sent a reply that does not decode\n", prog);
        return MXOP_CLI_EXIT_FAILED;
    }
    if (rc != 0) {
        fprintf(stderr, "mxop %s: no reply from mxop-serverd: %s (%s)\n", prog, mxop_strerror(rc),
                mxop_err_name(rc));
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    if ((*out)->status != 0) {
        mxop__ctlchan_status(*out, why, sizeof(why));
        fprintf(stderr, "mxop %s: %s: %s\n", prog, mxop_err_name((*out)->status), why);
        mxop__ctlchan_reply_free(&c->ch, *out);
        *out = NULL;
        return MXOP_CLI_EXIT_FAILED;
    }
    return 0;
}

int mxop__cli_open(mxop__cli_conn_t *c, const char *socket_path, int timeout_ms, char *err,
                   size_t errlen)
{
    conn_init(c);
    const char *path = socket_path != NULL ? socket_path : getenv("MXOP_SOCKET");
    if (path == NULL || path[0] == '\0') {
        mxop__fmt(err, errlen, "no control socket: pass --socket PATH or set MXOP_SOCKET");
        return MXOP_EINVAL;
    }
    int rc = mxop__ctlchan_connect(&c->ch, path, timeout_ms, err, errlen);
    if (rc == MXOP_EINVAL) {
        mxop__fmt(err, errlen, "socket path %s is too long", path);
        return rc;
    }
    if (rc != 0) {
        mxop__fmt(err, errlen, "cannot connect to mxop-serverd at %s: %s", path,
                  strerror(c->ch.sys_errno));
        mxop__cli_close(c);
        return MXOP_EDISCONNECTED;
    }
    Mxop__Hello h;
    Mxop__Request req;
    hello_request(&h, &req);
    Mxop__Reply *r;
    rc = mxop__cli_ask(c, &req, timeout_ms, &r, err, errlen);
    if (rc != 0)
        mxop__cli_close(c);
    return rc;
}

int mxop__cli_ask(mxop__cli_conn_t *c, Mxop__Request *req, int timeout_ms, Mxop__Reply **out,
                  char *err, size_t errlen)
{
    char why[1024];
    bool sent;
    *out = NULL;
    mxop__ctlchan_reply_free(&c->ch, c->last);
    int rc = exchange(c, req, timeout_ms, &c->last, &sent, why, sizeof(why));
    if (rc != 0 && c->ch.refused)
        mxop__fmt(err, errlen, "mxop-serverd: %s", why);
    else if (rc != 0 && !sent)
        mxop__fmt(err, errlen, "cannot send to mxop-serverd: %s", mxop_strerror(rc));
    else if (rc != 0 && c->ch.garbled)
        mxop__fmt(err, errlen, "mxop-serverd sent a reply that does not decode");
    else if (rc != 0)
        mxop__fmt(err, errlen, "%s waiting for mxop-serverd's reply",
                  rc == MXOP_ETIMEOUT ? "timed out" : mxop_strerror(rc));
    else
        rc = mxop__ctlchan_status(c->last, err, errlen);
    if (rc == 0)
        *out = c->last;
    return rc;
}
