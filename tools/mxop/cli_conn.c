/*
 * tools/mxop/cli_conn.c - the control connection of `mxop status`, `ops`,
 * `stats` and `top`: a plain blocking Unix socket speaking the control
 * protocol (docs/protocol.md), without a session unless a command opens one.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

int mxop__cli_connect(const char *prog, const char *path, mxop__cli_conn_t *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->next_id = 1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "mxop %s: socket path '%s' is longer than %zu bytes\n", prog, path,
                sizeof(sa.sun_path) - 1);
        return MXOP_CLI_EXIT_USAGE;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "mxop %s: cannot reach mxop-serverd at %s: %s\n", prog, path,
                strerror(errno));
        mxop__cli_close(c);
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    Mxop__Hello h = MXOP__HELLO__INIT;
    h.min_version = 1;
    h.max_version = 1;
    h.client_name = "mxop";
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_HELLO;
    req.hello = &h;
    Mxop__Reply *r;
    int rc = mxop__cli_request(prog, c, &req, &r);
    if (rc != 0) {
        mxop__cli_close(c);
        /* A peer that hangs up or garbles Hello is not a daemon we can talk to. */
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    if (r->body_case == MXOP__REPLY__BODY_HELLO && r->hello->server_version != NULL)
        snprintf(c->server_version, sizeof(c->server_version), "%s", r->hello->server_version);
    mxop__reply__free_unpacked(r, NULL);
    return 0;
}

void mxop__cli_close(mxop__cli_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    mxop__framebuf_free(&c->fb);
}

/*
 * A daemon that refuses a connection (an uid it does not allow, a worker's,
 * a full table) sends one reply with id 0, an error status and no body, then
 * hangs up: a send may already fail.  Prints that reason when it is there.
 */
static bool refused(const char *prog, const Mxop__Reply *r)
{
    if (r->id != 0 || r->status == 0 || r->body_case != MXOP__REPLY__BODY__NOT_SET)
        return false;
    fprintf(stderr, "mxop %s: mxop-serverd refused the connection: %s: %s\n", prog,
            mxop_err_name(r->status),
            r->message != NULL && r->message[0] ? r->message : mxop_strerror(r->status));
    return true;
}

static bool read_refusal(const char *prog, mxop__cli_conn_t *c)
{
    uint16_t kind;
    uint32_t len;
    int fds[MXOP__FRAME_MAX_FDS];
    int nfds = 0;
    int rc = mxop__frame_recv(c->fd, &c->fb, &kind, &len, fds, MXOP__FRAME_MAX_FDS, &nfds, 1000);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (rc != 0 || kind != MXOP__KIND_CTL_REPLY)
        return false;
    Mxop__Reply *r = mxop__reply__unpack(NULL, len, c->fb.data);
    bool yes = r != NULL && refused(prog, r);
    if (r != NULL)
        mxop__reply__free_unpacked(r, NULL);
    return yes;
}

int mxop__cli_request(const char *prog, mxop__cli_conn_t *c, Mxop__Request *req, Mxop__Reply **out)
{
    *out = NULL;
    req->id = c->next_id++;
    int rc = mxop__frame_send(c->fd, &c->fb, MXOP__KIND_CTL_REQUEST, (const ProtobufCMessage *)req,
                              NULL, 0);
    if (rc != 0) {
        if (!read_refusal(prog, c))
            fprintf(stderr, "mxop %s: cannot send to mxop-serverd: %s\n", prog, mxop_strerror(rc));
        return MXOP_CLI_EXIT_NO_DAEMON;
    }
    for (;;) {
        uint16_t kind;
        uint32_t len;
        int fds[MXOP__FRAME_MAX_FDS];
        int nfds = 0;
        rc = mxop__frame_recv(c->fd, &c->fb, &kind, &len, fds, MXOP__FRAME_MAX_FDS, &nfds,
                              REPLY_TIMEOUT_MS);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (rc != 0) {
            fprintf(stderr, "mxop %s: no reply from mxop-serverd: %s (%s)\n", prog,
                    mxop_strerror(rc), mxop_err_name(rc));
            return MXOP_CLI_EXIT_NO_DAEMON;
        }
        if (kind != MXOP__KIND_CTL_REPLY)
            continue;
        Mxop__Reply *r = mxop__reply__unpack(NULL, len, c->fb.data);
        if (r == NULL) {
            fprintf(stderr, "mxop %s: mxop-serverd sent a reply that does not decode\n", prog);
            return MXOP_CLI_EXIT_FAILED;
        }
        if (refused(prog, r)) {
            mxop__reply__free_unpacked(r, NULL);
            return MXOP_CLI_EXIT_NO_DAEMON;
        }
        if (r->id != req->id) { /* an event (id 0) or a stale reply */
            mxop__reply__free_unpacked(r, NULL);
            continue;
        }
        if (r->status != 0) {
            fprintf(stderr, "mxop %s: %s: %s\n", prog, mxop_err_name(r->status),
                    r->message != NULL && r->message[0] ? r->message : mxop_strerror(r->status));
            mxop__reply__free_unpacked(r, NULL);
            return MXOP_CLI_EXIT_FAILED;
        }
        *out = r;
        return 0;
    }
}
