/*
 * server/daemon/core/accept.c - accepting a client on the control socket:
 * peer credentials (uids, groups), workers refused, the connection limit,
 * refusals logged at most once a second.
 *
 * Apart from listener.c, which makes, releases and closes the socket: the
 * accepting hands each connection to the session layer (client.c), which
 * sits above the drain and the hand-over, while those close the socket
 * (listener.c) from below it.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/session/session.h"

static bool gid_listed(const mxop__daemon_t *d, gid_t gid)
{
    for (int i = 0; i < d->cfg.n_allow_gids; i++)
        if (d->cfg.allow_gids[i] == gid)
            return true;
    return false;
}

/*
 * Root, the daemon's user, an --allow-uid, or a member of an --allow-gid
 * group: the peer's gid, or one of the supplementary groups the kernel
 * recorded when it connected (SO_PEERGROUPS: no race with a later setgroups).
 */
static bool peer_allowed(const mxop__daemon_t *d, int fd, const struct ucred *cred)
{
    if (cred->uid == d->euid || cred->uid == 0)
        return true;
    for (int i = 0; i < d->cfg.n_allow_uids; i++)
        if (d->cfg.allow_uids[i] == cred->uid)
            return true;
    if (d->cfg.n_allow_gids == 0)
        return false;
    if (gid_listed(d, cred->gid))
        return true;
    gid_t groups[256];
    socklen_t len = sizeof(groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return false; /* more than 256 groups, or an old kernel: the primary gid only */
    for (size_t i = 0; i < len / sizeof(gid_t); i++)
        if (gid_listed(d, groups[i]))
            return true;
    return false;
}

/* Sends a refusal (`code`, `msg`) on a connection that never becomes a client, then closes it. */
static void refuse(int fd, int code, char *msg)
{
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.id = 0;
    r.status = code;
    r.message = msg;
    uint8_t buf[MXOP__FRAME_HDR + 256];
    size_t plen = mxop__reply__get_packed_size(&r);
    if (plen <= sizeof(buf) - MXOP__FRAME_HDR) {
        mxop__frame_hdr_encode(buf, MXOP__KIND_CTL_REPLY, (uint32_t)plen);
        mxop__reply__pack(&r, buf + MXOP__FRAME_HDR);
        /* A fresh socket's buffer takes a small frame whole; a short write only loses the reason.
         */
        ssize_t n = send(fd, buf, MXOP__FRAME_HDR + plen, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
    }
    /* Unread input would turn our close into a reset that can hide the reason. */
    char junk[512];
    while (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
        ;
    close(fd);
}

/* The last refusal the rate limit kept quiet, for the summary. */
static char quiet_msg[200];

/*
 * Logs a refused connection, but at most one a second: a peer that is
 * refused (a uid not allowed, a full table, the fd limit) cannot write
 * thousands of lines a second by reconnecting.  The ones not logged are
 * counted, and summarised by the next logged refusal or by the tick.
 */
static void log_refusal(mxop__daemon_t *d, const char *msg)
{
    int64_t now = mxop__now_ns();
    if (now - d->refuse_log_ns < 1000000000LL) {
        d->refused_quiet++;
        mxop__fmt(quiet_msg, sizeof(quiet_msg), "%s", msg);
        return;
    }
    if (d->refused_quiet > 0)
        MXOP__LOGW(0, NULL, "refused a connection: %s (and %llu more in the last second)", msg,
                   (unsigned long long)d->refused_quiet);
    else
        MXOP__LOGW(0, NULL, "refused a connection: %s", msg);
    d->refuse_log_ns = now;
    d->refused_quiet = 0;
}

void mxop__accept_tick(mxop__daemon_t *d, int64_t now_ns)
{
    if (d->refused_quiet == 0 || now_ns - d->refuse_log_ns < 1000000000LL)
        return;
    MXOP__LOGW(0, NULL, "refused %llu more connections in the last second (the last: %s)",
               (unsigned long long)d->refused_quiet, quiet_msg);
    d->refused_quiet = 0;
    d->refuse_log_ns = now_ns;
}

static void accept_one(mxop__daemon_t *d, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        MXOP__LOGW(0, NULL, "cannot read peer credentials of a new connection: %s",
                   strerror(errno));
        close(fd);
        return;
    }
    char msg[160], line[200];
    if (!peer_allowed(d, fd, &cred)) {
        mxop__fmt(line, sizeof(line), "uid %u (pid %d) is not allowed", (unsigned)cred.uid,
                  (int)cred.pid);
        log_refusal(d, line);
        mxop__fmt(msg, sizeof(msg),
                  "uid %u is not allowed to use this daemon (see --allow-uid, --allow-gid)",
                  (unsigned)cred.uid);
        refuse(fd, MXOP_EDENIED, msg);
        return;
    }
    /*
     * A worker runs as the daemon's own user; if its ops could open
     * sessions, one op could start workers without end.  Workers, and what
     * their ops start, are refused.
     */
    /*
     * The workers' uids (a root daemon's range, or --worker-uid) are never
     * a client's, whatever --allow-uid says: anything a worker starts
     * keeps its uid, since strict's filter refuses every change of uid.
     */
    if (mxop__workeruid_is_workers(&d->cfg, cred.uid)) {
        mxop__fmt(line, sizeof(line), "uid %u (pid %d) is a workers' uid", (unsigned)cred.uid,
                  (int)cred.pid);
        log_refusal(d, line);
        mxop__fmt(msg, sizeof(msg), "uid %u is a workers' uid and may not connect",
                  (unsigned)cred.uid);
        refuse(fd, MXOP_EDENIED, msg);
        return;
    }
    if (mxop__is_worker_process(d, cred.pid)) {
        mxop__fmt(line, sizeof(line), "pid %d is a worker (or started by one)", (int)cred.pid);
        log_refusal(d, line);
        mxop__fmt(msg, sizeof(msg), "workers may not connect to the daemon");
        refuse(fd, MXOP_EDENIED, msg);
        return;
    }
    if (d->n_clients >= d->cfg.max_conns) {
        mxop__fmt(msg, sizeof(msg),
                  "mxop-serverd serves at most %llu connections at once (--max-connections)",
                  (unsigned long long)d->cfg.max_conns);
        log_refusal(d, msg);
        refuse(fd, MXOP_ELIMIT, msg);
        return;
    }
    mxop__client_start(d, fd, cred.uid, cred.pid);
}

static void listen_cb(uv_poll_t *h, int status, int events)
{
    mxop__daemon_t *d = MXOP__CONTAINER_OF(h, mxop__daemon_t, listen_poll);
    (void)events;
    if (status < 0) {
        MXOP__LOGE(0, NULL, "listening socket error: %s", uv_strerror(status));
        return;
    }
    /* A bounded batch, so a connection storm cannot starve the other handles. */
    for (int i = 0; i < 64 && d->listening; i++) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accept_one(d, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        if ((errno == EMFILE || errno == ENFILE) && d->reserve_fd >= 0) {
            /*
             * Out of descriptors: the pending connection would keep the
             * socket readable forever.  Spend the reserve to accept and
             * drop it, so the client sees the failure instead of a hang.
             */
            char msg[160];
            mxop__fmt(msg, sizeof(msg),
                      "mxop-serverd is out of file descriptors (%s); try again later",
                      errno == EMFILE ? "its RLIMIT_NOFILE" : "the system's");
            log_refusal(d, msg);
            close(d->reserve_fd);
            d->reserve_fd = -1;
            int tmp = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (tmp >= 0)
                refuse(tmp, MXOP_ELIMIT, msg);
            d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            continue;
        }
        MXOP__LOGE(0, NULL, "accept failed: %s", strerror(errno));
        return;
    }
}

void mxop__accept_start(mxop__daemon_t *d)
{
    if (d->listening)
        uv_poll_start(&d->listen_poll, UV_READABLE, listen_cb);
}
