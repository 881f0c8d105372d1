/*
 * server/daemon/session/reply.c - encoding replies and worker events for a client.
 *
 * Every answer the daemon gives a client goes out here, so that a reply
 * too large for a frame is turned into an error the client can read
 * rather than silence.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/session/session.h"

void mxop__reply_send(mxop__client_t *cl, Mxop__Reply *r, int fd)
{
    mxop__reply_send_fds(cl, r, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
}

void mxop__reply_send_fds(mxop__client_t *cl, Mxop__Reply *r, const int *fds, int nfds)
{
    if (cl == NULL || cl->conn.closing)
        return;
    int rc = mxop__conn_send(&cl->conn, MXOP__KIND_CTL_REPLY, &r->base, fds, nfds);
    if (rc == MXOP_EFRAME_TOO_LARGE) {
        /* Say so rather than leave the client waiting for an answer. */
        Mxop__Reply e = MXOP__REPLY__INIT;
        e.id = r->id;
        e.status = MXOP_EFRAME_TOO_LARGE;
        e.message = "the reply exceeds the maximum frame size";
        rc = mxop__conn_send(&cl->conn, MXOP__KIND_CTL_REPLY, &e.base, NULL, 0);
    }
    if (rc != 0 && rc != MXOP_EDISCONNECTED)
        MXOP__LOGW(cl->session ? cl->session->id : 0, NULL,
                   "cannot send a reply to client %llu: %s", (unsigned long long)cl->id,
                   mxop_err_name(rc));
}

void mxop__client_reply_error(mxop__client_t *cl, uint64_t id, int code, const char *msg)
{
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = id;
    r.status = code;
    r.message = (char *)(msg != NULL && msg[0] != '\0' ? msg : mxop_strerror(code));
    mxop__reply_send(cl, &r, -1);
}

void mxop__reply_errorf(mxop__client_t *cl, uint64_t id, int code, const char *fmt, ...)
{
    char msg[MXOP__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mxop__client_reply_error(cl, id, code, msg);
}

void mxop__reply_ok(mxop__client_t *cl, uint64_t id)
{
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = id;
    mxop__reply_send(cl, &r, -1);
}

void mxop__reply_ops(mxop__session_t *s, uint64_t id)
{
    Mxop__OpInfo *stack[64];
    Mxop__OpInfo **ptrs = stack;
    if (s->n_ops > 64) {
        ptrs = malloc(sizeof(*ptrs) * s->n_ops);
        if (ptrs == NULL) {
            mxop__client_reply_error(s->client, id, MXOP_ENOMEM, "out of memory for the op list");
            return;
        }
    }
    for (size_t i = 0; i < s->n_ops; i++)
        ptrs[i] = &s->ops[i];
    Mxop__OpList list = MXOP__OP_LIST__INIT;
    list.n_ops = s->n_ops;
    list.ops = ptrs;
    list.confined = s->mem_confined;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = id;
    r.body_case = MXOP__REPLY__BODY_OPS;
    r.ops = &list;
    mxop__reply_send(s->client, &r, -1);
    if (ptrs != stack)
        free(ptrs);
}

void mxop__reply_event(mxop__session_t *s, const mxop__worker_exit_t *e, const char *message,
                       bool restarted, int client_fd)
{
    Mxop__WorkerEvent ev = MXOP__WORKER_EVENT__INIT;
    ev.code = e->code;
    ev.signal = e->term_signal;
    ev.exit_status = e->exit_status;
    ev.call_id = e->call_id;
    ev.op = (char *)e->op;
    ev.message = (char *)message;
    ev.generation = s->generation;
    ev.worker_pid = s->worker != NULL ? (uint32_t)s->worker->pid : 0;
    ev.restarted = restarted;
    ev.idle_cpu = s->idle_cpu_killed;
    s->idle_cpu_killed = false;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = 0;
    r.status = e->code;
    r.message = (char *)message;
    r.body_case = MXOP__REPLY__BODY_EVENT;
    r.event = &ev;
    mxop__reply_send(s->client, &r, client_fd);
}
