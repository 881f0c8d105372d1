/*
 * client/library.c - mxop_load_library: a daemon that went away is
 * reconnected first (reconnect.c, which reloads the earlier libraries),
 * then the library is loaded and the op table (op_table.c) updated.
 */
#include <string.h>

#include "client/client_internal.h"

/* Reads the session's mode from ListOps; c->err keeps the load's message. */
static void refresh_mode(mxop_client_t *c)
{
    char saved[MXOP__ERR_MAX];
    memcpy(saved, c->err, sizeof(saved));
    Mxop__ListOps body = MXOP__LIST_OPS__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_LIST_OPS;
    req.list_ops = &body;
    Mxop__Reply *r;
    if (mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL) == 0 &&
        r->body_case == MXOP__REPLY__BODY_OPS && r->ops != NULL && r->ops->confined)
        c->confined = 1;
    memcpy(c->err, saved, sizeof(saved));
}

int mxop_load_library(mxop_client_t *c, const char *name)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    if (name == NULL || name[0] == '\0') {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_load_library: %s library name",
                        name == NULL ? "NULL" : "empty");
        goto out;
    }
    /* A daemon that went away: reconnected (and the earlier libraries reloaded) first. */
    rc = mxop__reconnect_if_gone(c);
    if (rc < 0)
        goto out;
    Mxop__LoadLibrary body = MXOP__LOAD_LIBRARY__INIT;
    body.path = (char *)name;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_LOAD_LIBRARY;
    req.load_library = &body;
    Mxop__Reply *r;
    rc = mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL);
    if (rc < 0) {
        /* A load that failed may still have put the session in scratch mode (the daemon
         * confines it before the library's code runs): ask which mode it is in now. */
        if (!c->confined)
            refresh_mode(c);
        goto out;
    }
    if (r->body_case != MXOP__REPLY__BODY_OPS) {
        rc = mxop__fail(c, MXOP_EPROTOCOL, "mxop-serverd answered LoadLibrary without an op list");
        goto out;
    }
    if (r->ops != NULL && r->ops->confined)
        c->confined = 1;
    rc = mxop__ops_update(c, r->ops);
    if (rc == 0)
        mxop__library_note(c, name);
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}
