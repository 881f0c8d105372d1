/*
 * client/session_open.c - opening a session on the daemon's socket: the
 * control connection, Hello, OpenSession and the data channel it passes.
 * Below both the first open (session.c) and a reconnection (reconnect.c),
 * which open the same way.
 */
#include <unistd.h>

#include "client/client_internal.h"
#include "client/session_state.h"

static int hello(mxop_client_t *c, const char *name)
{
    Mxop__Reply *r;
    char why[MXOP__ERR_MAX];
    int rc = mxop__ctlchan_hello(&c->ctl, name, c->connect_timeout_ms, &r, why, sizeof why);
    if (rc < 0)
        return mxop__fail(c, rc, "%s%s", c->ctl.refused ? "mxop-serverd: " : "", why);
    rc = mxop__ctlchan_status(r, why, sizeof why);
    if (rc < 0)
        return mxop__fail(c, rc, "%s", why);
    if (r->body_case != MXOP__REPLY__BODY_HELLO || r->hello == NULL)
        return mxop__fail(c, MXOP_EPROTOCOL, "mxop-serverd answered Hello without a HelloReply");
    if (r->hello->version != MXOP_PROTOCOL_VERSION)
        return mxop__fail(c, MXOP_EVERSION,
                          "mxop-serverd chose protocol version %u; this client speaks %d",
                          r->hello->version, MXOP_PROTOCOL_VERSION);
    return 0;
}

static int open_session(mxop_client_t *c)
{
    Mxop__OpenSession body = MXOP__OPEN_SESSION__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &body;

    Mxop__Reply *r;
    int fd = -1;
    int rc = mxop__ctl_request(c, &req, NULL, 0, c->connect_timeout_ms, &r, &fd);
    if (rc < 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_OPEN_SESSION || r->open_session == NULL) {
        if (fd >= 0)
            close(fd);
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "mxop-serverd answered OpenSession without an OpenSessionReply");
    }
    if (fd < 0)
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "mxop-serverd opened the session without passing its data channel");
    mxop__sess_to(c, MXOP__SESS_SERVING, fd, 0, NULL);
    c->session = r->open_session->session;
    c->worker_pid = r->open_session->worker_pid;
    c->generation = r->open_session->generation;
    c->confined = r->open_session->confined;
    return 0;
}

int mxop__session_open(mxop_client_t *c, const char *path, const char *name)
{
    int rc = mxop__ctlchan_connect(&c->ctl, path, c->connect_timeout_ms, c->err, sizeof c->err);
    if (rc < 0)
        return rc;
    rc = hello(c, name);
    if (rc < 0)
        return rc;
    rc = open_session(c);
    if (rc < 0)
        return rc;
    /* The mailbox is set up now rather than at the first call, so that the
     * session's path is known from here on (mxop_data_path). */
    mxop__data_attach_now(c);
    return 0;
}
