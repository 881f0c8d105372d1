/*
 * server/daemon/session/client.c - one client's control connection: frames in,
 * checked (ctl_validate.c) and decoded, handed to the protocol (ctl.c);
 * errors and the close.
 */
#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

static void client_frame_cb(mxop__conn_t *c, uint16_t kind, const uint8_t *payload, uint32_t len)
{
    mxop__client_t *cl = c->data;
    static const mxop__limits_t lim = MXOP__LIMITS_DEFAULT;
    char msg[MXOP__MSG_MAX];
    (void)kind;
    /* Bounded before decoding: what one frame costs must not delay the other clients. */
    int rc = mxop__ctl_validate(payload, len, &lim, NULL, msg, sizeof(msg));
    if (rc != 0) {
        MXOP__LOGW(cl->session ? cl->session->id : 0, NULL, "client %llu: %s; closing it",
                   (unsigned long long)cl->id, msg);
        mxop__client_reply_error(cl, 0, rc, msg);
        mxop__client_close(cl);
        return;
    }
    mxop__pbarena_reset(&c->arena);
    Mxop__Request *req = mxop__request__unpack(&c->arena.allocator, len, payload);
    if (req == NULL) {
        mxop__reply_errorf(cl, 0, MXOP_EPROTOCOL,
                           "a request of %u bytes does not decode as mxop.Request", (unsigned)len);
        MXOP__LOGW(cl->session ? cl->session->id : 0, NULL,
                   "client %llu sent an undecodable request; closing it",
                   (unsigned long long)cl->id);
        mxop__client_close(cl);
        return;
    }
    if (req->id == 0) {
        /* Id 0 is reserved for events; an answer to it could not be told apart. */
        mxop__client_reply_error(cl, 0, MXOP_EPROTOCOL,
                                 "request id 0 is reserved; ids must be non-zero");
        mxop__client_close(cl);
        mxop__pbarena_reset(&c->arena);
        return;
    }
    rc = mxop__ctl_validate(payload, len, &lim, req, msg, sizeof(msg));
    if (rc != 0) {
        /* The request is refused; the connection, whose framing is sound, stays. */
        MXOP__LOGI(cl->session ? cl->session->id : 0, NULL, "client %llu: %s refused: %s",
                   (unsigned long long)cl->id, mxop__ctl_body_name((int)req->body_case), msg);
        mxop__client_reply_error(cl, req->id, rc, msg);
        mxop__pbarena_reset(&c->arena);
        return;
    }
    mxop__ctl_verdict_t v = mxop__ctl_handle(cl, req, payload, len);
    mxop__pbarena_reset(&c->arena);
    if (v == MXOP__CTL_CLOSE)
        mxop__client_close(cl);
}

static void client_error_cb(mxop__conn_t *c, int code, const char *msg)
{
    mxop__client_t *cl = c->data;
    uint64_t sid = cl->session ? cl->session->id : 0;
    if (code == 0 || code == MXOP_EDISCONNECTED) {
        MXOP__LOGD(sid, NULL, "client %llu: %s", (unsigned long long)cl->id, msg);
    } else {
        MXOP__LOGW(sid, NULL, "client %llu: %s; closing the connection", (unsigned long long)cl->id,
                   msg);
        mxop__client_reply_error(cl, 0, code, msg);
    }
    mxop__client_close(cl);
}

static void client_closed_cb(mxop__conn_t *c)
{
    mxop__client_t *cl = c->data;
    mxop__list_remove(&cl->link);
    cl->d->n_clients--;
    if (cl->session != NULL)
        mxop__session_free(cl->session);
    free(cl);
}

void mxop__client_start(mxop__daemon_t *d, int fd, uid_t uid, pid_t pid)
{
    mxop__client_t *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        MXOP__LOGE(0, NULL, "out of memory for a new connection");
        close(fd);
        return;
    }
    cl->d = d;
    cl->id = ++d->next_client_id;
    cl->connected_ns = mxop__now_ns();
    cl->uid = uid;
    cl->pid = pid;
    mxop__list_init(&cl->link);
    if (mxop__conn_init(d, &cl->conn, fd, MXOP__KIND_CTL_REQUEST, client_frame_cb, client_error_cb,
                        client_closed_cb, cl) != 0) {
        MXOP__LOGE(0, NULL, "cannot serve a new connection");
        close(fd);
        free(cl);
        return;
    }
    mxop__list_push(&d->clients, &cl->link);
    d->n_clients++;
    MXOP__LOGD(0, NULL, "client %llu connected (uid %u, pid %d)", (unsigned long long)cl->id,
               (unsigned)uid, (int)pid);
}

void mxop__client_close(mxop__client_t *cl)
{
    if (cl->conn.closing)
        return;
    if (cl->session != NULL)
        mxop__session_end(cl->session);
    mxop__conn_close(&cl->conn);
}

void mxop__clients_tick(mxop__daemon_t *d, int64_t now)
{
    const mxop__config_t *cfg = &d->cfg;
    for (mxop__list_t *n = d->clients.next; n != &d->clients;) {
        mxop__client_t *cl = MXOP__CONTAINER_OF(n, mxop__client_t, link);
        n = n->next; /* closing does not unlink at once, but keep the walk safe */
        if (cl->conn.closing || cl->session != NULL)
            continue;
        int64_t age_ms = (now - cl->connected_ns) / 1000000;
        char msg[MXOP__MSG_MAX];
        if (!cl->hello_done && (uint64_t)age_ms > cfg->handshake_timeout_ms)
            mxop__fmt(msg, sizeof(msg),
                      "no Hello within %llu ms of connecting (--handshake-timeout-ms); closing",
                      (unsigned long long)cfg->handshake_timeout_ms);
        else if (cl->hello_done && cfg->idle_timeout_ms != 0 &&
                 (uint64_t)age_ms > cfg->idle_timeout_ms)
            mxop__fmt(msg, sizeof(msg),
                      "no session opened within %llu ms of connecting (--idle-timeout-ms); "
                      "closing",
                      (unsigned long long)cfg->idle_timeout_ms);
        else
            continue;
        MXOP__LOGI(0, NULL, "client %llu (pid %d): %s", (unsigned long long)cl->id, (int)cl->pid,
                   msg);
        mxop__client_reply_error(cl, 0, MXOP_ETIMEOUT, msg);
        mxop__client_close(cl);
    }
}
