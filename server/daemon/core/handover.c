/*
 * server/daemon/core/handover.c - a new daemon binary takes over the listening
 * socket of the running one, so that an upgrade refuses no client and ends
 * no session.
 *
 * Every daemon that made its own socket also listens on SOCKET.takeover
 * (mode 0600; only its own user or root is answered).  `mxop-serverd
 * --take-over --socket SOCKET ...` connects there and the two speak lines:
 *
 *     new -> old   TAKE-OVER <new pid>
 *     old -> new   FD <old pid>          with the listening socket (SCM_RIGHTS)
 *     ... the new daemon finishes its start; the old one still accepts ...
 *     new -> old   COMMIT
 *     old -> new   DONE                  the old one no longer accepts
 *
 * Until COMMIT nothing changed for the old daemon: a new one that fails to
 * start (a bad option, a worker it cannot run, a crash) just closes the
 * connection, and the old one logs that and goes on serving: the rollback
 * is that nothing happened.  After DONE the new daemon accepts on the same
 * socket (the same file: clients keep their path), and the old one serves
 * the clients it has, whose sessions and calls go on undisturbed, and ends
 * through the usual drain when the last of them has left (or at SIGTERM).
 * New connections queue in the socket's backlog between the two, so none
 * is refused.
 *
 * Under socket activation the service manager owns the socket; there is no
 * hand-over socket, and --take-over is refused.
 */
#include "server/daemon/core/handover.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"

/* How long either side waits for the other's line. */
#define LINE_TIMEOUT_S 10

static struct {
    /* The old daemon's side. */
    int listen_fd;
    uv_poll_t listen_poll;
    bool listening;
    dev_t dev;
    ino_t ino;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int conn_fd; /* the successor's connection (non-blocking), until COMMIT */
    uv_poll_t conn_poll;
    bool conn_polled;
    /* The line coming in on conn_fd, read as it arrives: the loop never waits on it. */
    char conn_line[64];
    size_t conn_got;
    bool conn_asked;          /* TAKE-OVER came and FD went; COMMIT is awaited */
    int64_t conn_deadline_ns; /* for TAKE-OVER: a peer that says nothing is dropped */
    long peer_pid;
    bool handed_over;
    /* The new daemon's side: the connection to the old one, until the commit. */
    int up_fd;
    long old_pid;
} ho = {.listen_fd = -1, .conn_fd = -1, .up_fd = -1};

static int takeover_path(const mxop__daemon_t *d, char *out, size_t outlen, char *err,
                         size_t errlen)
{
    size_t max = sizeof(((struct sockaddr_un *)0)->sun_path);
    int n = snprintf(out, outlen, "%s.takeover", d->cfg.socket_path);
    if (n < 0 || (size_t)n >= outlen || (size_t)n >= max) {
        mxop__fmt(err, errlen,
                  "the hand-over socket %s.takeover is longer than the %zu bytes a Unix socket "
                  "allows",
                  d->cfg.socket_path, max - 1);
        return MXOP_EINVAL;
    }
    return 0;
}

static void fill(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, strlen(path) + 1);
}

/* The peer is this process's user or root. */
static bool peer_trusted(int fd, long *pid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return false;
    if (pid != NULL)
        *pid = cred.pid;
    return cred.uid == geteuid() || cred.uid == 0;
}

static void set_timeouts(int fd)
{
    struct timeval tv = {LINE_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Reads one line (without its newline) into buf; a descriptor that comes with it into *fd. */
static int read_line(int sock, char *buf, size_t len, int *fd)
{
    if (fd != NULL)
        *fd = -1;
    size_t got = 0;
    while (got + 1 < len) {
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {buf + got, 1};
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? MXOP_EDISCONNECTED : MXOP_ETIMEOUT;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int r;
                memcpy(&r, CMSG_DATA(c), sizeof(r));
                if (fd != NULL && *fd < 0)
                    *fd = r;
                else
                    close(r);
            }
        }
        if (buf[got] == '\n') {
            buf[got] = '\0';
            return 0;
        }
        got++;
    }
    buf[got] = '\0';
    return MXOP_EPROTOCOL;
}

static int send_line(int sock, const char *line, int fd)
{
    struct iovec iov = {(void *)line, strlen(line)};
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (fd >= 0) {
        memset(cbuf, 0, sizeof(cbuf));
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n;
    do {
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n == (ssize_t)iov.iov_len ? 0 : MXOP_EDISCONNECTED;
}

/* ------------------------------------------------------------------------ */
/* The new daemon. */

int mxop__handover_receive(mxop__daemon_t *d, char *err, size_t errlen)
{
    char path[sizeof(ho.path)];
    int rc = takeover_path(d, path, sizeof(path), err, errlen);
    if (rc != 0)
        return rc;
    struct sockaddr_un sa;
    fill(&sa, path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        mxop__fmt(err, errlen, "socket: %s", strerror(errno));
        return MXOP_EIO;
    }
    set_timeouts(s);
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        mxop__fmt(err, errlen,
                  "--take-over: no daemon to take over at %s (%s); start without --take-over", path,
                  strerror(errno));
        close(s);
        return MXOP_EDISCONNECTED;
    }
    if (!peer_trusted(s, &ho.old_pid)) {
        mxop__fmt(err, errlen,
                  "--take-over: %s belongs to a process of another user; refusing its socket",
                  path);
        close(s);
        return MXOP_EDENIED;
    }
    char line[64];
    mxop__fmt(line, sizeof(line), "TAKE-OVER %d\n", (int)getpid());
    int fd = -1;
    rc = send_line(s, line, -1);
    if (rc == 0)
        rc = read_line(s, line, sizeof(line), &fd);
    if (rc != 0 || strncmp(line, "FD ", 3) != 0 || fd < 0) {
        mxop__fmt(err, errlen, "--take-over: the daemon at %s did not hand its socket over: %s",
                  path, rc != 0 ? mxop_err_name(rc) : line);
        if (fd >= 0)
            close(fd);
        close(s);
        return rc != 0 ? rc : MXOP_EPROTOCOL;
    }
    int domain = 0, type = 0, acc = 0;
    socklen_t l1 = sizeof(domain), l2 = sizeof(type), l3 = sizeof(acc);
    struct sockaddr_un got;
    socklen_t gl = sizeof(got);
    memset(&got, 0, sizeof(got));
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l1) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l3) != 0 || domain != AF_UNIX ||
        type != SOCK_STREAM || !acc || getsockname(fd, (struct sockaddr *)&got, &gl) != 0) {
        mxop__fmt(err, errlen, "--take-over: what %s passed is not a listening Unix socket", path);
        close(fd);
        close(s);
        return MXOP_EPROTOCOL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        mxop__fmt(err, errlen, "--take-over: cannot set up the passed socket: %s", strerror(errno));
        close(fd);
        close(s);
        return MXOP_EIO;
    }
    ho.up_fd = s;
    MXOP__LOGI(0, NULL,
               "took the listening socket of daemon %ld (%s); it accepts until this "
               "daemon's start is complete",
               ho.old_pid, got.sun_path);
    return fd;
}

int mxop__handover_commit(mxop__daemon_t *d, char *err, size_t errlen)
{
    (void)d;
    (void)err;
    (void)errlen;
    if (ho.up_fd < 0)
        return 0;
    /*
     * From here this daemon serves, whatever the old one answers: it holds
     * the socket, and an old daemon that does not answer may be gone.
     */
    char line[64] = "";
    int rc = send_line(ho.up_fd, "COMMIT\n", -1);
    if (rc == 0)
        rc = read_line(ho.up_fd, line, sizeof(line), NULL);
    if (rc == 0 && strcmp(line, "DONE") == 0)
        MXOP__LOGI(0, NULL,
                   "daemon %ld stopped accepting; it serves its clients until they "
                   "leave, new ones come here",
                   ho.old_pid);
    else
        MXOP__LOGW(0, NULL, "daemon %ld did not confirm the hand-over (%s); serving anyway",
                   ho.old_pid, rc != 0 ? mxop_err_name(rc) : line);
    close(ho.up_fd);
    ho.up_fd = -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The old daemon. */

static void conn_done(void)
{
    if (ho.conn_polled) {
        uv_poll_stop(&ho.conn_poll);
        uv_close((uv_handle_t *)&ho.conn_poll, NULL);
        ho.conn_polled = false;
    }
    if (ho.conn_fd >= 0)
        close(ho.conn_fd);
    ho.conn_fd = -1;
}

/*
 * Takes what conn_fd has of the current line without waiting: 1 with a
 * whole line in ho.conn_line (its newline dropped), 0 when more is to come,
 * or a negative code (the peer hung up, an error, a line too long).
 */
static int take_line(void)
{
    while (ho.conn_got + 1 < sizeof(ho.conn_line)) {
        char ch;
        ssize_t n = recv(ho.conn_fd, &ch, 1, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return n == 0 ? MXOP_EDISCONNECTED : MXOP_EIO;
        if (ch == '\n') {
            ho.conn_line[ho.conn_got] = '\0';
            ho.conn_got = 0;
            return 1;
        }
        ho.conn_line[ho.conn_got++] = ch;
    }
    return MXOP_EPROTOCOL;
}

/*
 * The successor's lines, as the loop sees them come: TAKE-OVER is answered
 * with the listening socket, COMMIT ends this daemon's accepting.  Every
 * read is non-blocking, so a successor stopped half-way through a line
 * (a tracer, SIGSTOP) holds nothing but its own hand-over.
 */
static void conn_cb(uv_poll_t *h, int status, int events)
{
    mxop__daemon_t *d = h->data;
    (void)events;
    int rc = status < 0 ? MXOP_EIO : take_line();
    if (rc == 0)
        return;
    if (!ho.conn_asked) {
        char reply[32];
        mxop__fmt(reply, sizeof(reply), "FD %d\n", (int)getpid());
        if (rc < 0 || strncmp(ho.conn_line, "TAKE-OVER ", 10) != 0 ||
            send_line(ho.conn_fd, reply, d->listen_fd) != 0) {
            MXOP__LOGW(0, NULL, "pid %ld on the hand-over socket did not ask for a take-over",
                       ho.peer_pid);
            conn_done();
            return;
        }
        ho.conn_asked = true;
        MXOP__LOGI(0, NULL, "daemon %ld is taking over the socket; accepting until it has started",
                   ho.peer_pid);
        return;
    }
    if (rc < 0 || strcmp(ho.conn_line, "COMMIT") != 0) {
        MXOP__LOGW(0, NULL,
                   "daemon %ld abandoned the take-over (%s): it did not start; this "
                   "daemon goes on serving",
                   ho.peer_pid, rc < 0 ? mxop_err_name(rc) : ho.conn_line);
        conn_done();
        return;
    }
    /* The successor started: it accepts from now on, on the same socket file. */
    mxop__listener_release(d);
    mxop__handover_stop(d);
    ho.handed_over = true;
    (void)send_line(ho.conn_fd, "DONE\n", -1);
    conn_done();
    MXOP__LOGI(0, NULL,
               "handed the socket over to daemon %ld; serving %llu client%s until "
               "they leave",
               ho.peer_pid, (unsigned long long)d->n_clients, d->n_clients == 1 ? "" : "s");
}

static void accept_cb(uv_poll_t *h, int status, int events)
{
    mxop__daemon_t *d = h->data;
    (void)events;
    if (status < 0)
        return;
    int fd = accept4(ho.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    long pid = 0;
    if (!peer_trusted(fd, &pid)) {
        MXOP__LOGW(0, NULL, "refused a take-over from pid %ld: not this daemon's user or root",
                   pid);
        close(fd);
        return;
    }
    if (ho.conn_fd >= 0 || d->draining || d->shutting_down || !d->listening) {
        (void)send_line(fd, "BUSY\n", -1);
        close(fd);
        return;
    }
    ho.conn_fd = fd;
    ho.peer_pid = pid;
    ho.conn_got = 0;
    ho.conn_asked = false;
    ho.conn_deadline_ns = mxop__now_ns() + (int64_t)LINE_TIMEOUT_S * 1000000000LL;
    if (uv_poll_init(d->loop, &ho.conn_poll, fd) != 0) {
        close(fd);
        ho.conn_fd = -1;
        return;
    }
    ho.conn_poll.data = d;
    ho.conn_polled = true;
    uv_poll_start(&ho.conn_poll, UV_READABLE | UV_DISCONNECT, conn_cb);
}

int mxop__handover_listen(mxop__daemon_t *d, char *err, size_t errlen)
{
    int rc = takeover_path(d, ho.path, sizeof(ho.path), err, errlen);
    if (rc != 0)
        return rc;
    char tmp[sizeof(ho.path) + 32];
    mxop__fmt(tmp, sizeof(tmp), "%s.tmp.%d", ho.path, (int)getpid());
    if (strlen(tmp) >= sizeof(ho.path)) {
        mxop__fmt(err, errlen, "the hand-over socket's temporary name %s is too long", tmp);
        return MXOP_EINVAL;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mxop__fmt(err, errlen, "socket: %s", strerror(errno));
        return MXOP_EIO;
    }
    struct sockaddr_un sa;
    fill(&sa, tmp);
    unlink(tmp);
    mode_t old = umask(077);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    struct stat st;
    if (b != 0 || chmod(tmp, 0600) != 0 || listen(fd, 4) != 0 || rename(tmp, ho.path) != 0 ||
        stat(ho.path, &st) != 0) {
        mxop__fmt(err, errlen, "cannot make the hand-over socket %s: %s", ho.path, strerror(errno));
        unlink(tmp);
        close(fd);
        return MXOP_EIO;
    }
    ho.dev = st.st_dev;
    ho.ino = st.st_ino;
    if (uv_poll_init(d->loop, &ho.listen_poll, fd) != 0) {
        unlink(ho.path);
        close(fd);
        mxop__fmt(err, errlen, "cannot watch the hand-over socket");
        return MXOP_EIO;
    }
    ho.listen_fd = fd;
    ho.listen_poll.data = d;
    ho.listening = true;
    uv_poll_start(&ho.listen_poll, UV_READABLE, accept_cb);
    return 0;
}

static void listen_closed_cb(uv_handle_t *h)
{
    (void)h;
    if (ho.listen_fd >= 0)
        close(ho.listen_fd);
    ho.listen_fd = -1;
}

void mxop__handover_stop(mxop__daemon_t *d)
{
    (void)d;
    if (ho.listening) {
        ho.listening = false;
        uv_poll_stop(&ho.listen_poll);
        uv_close((uv_handle_t *)&ho.listen_poll, listen_closed_cb);
        struct stat st;
        if (stat(ho.path, &st) == 0 && st.st_dev == ho.dev && st.st_ino == ho.ino)
            unlink(ho.path);
    }
    conn_done();
    if (ho.up_fd >= 0) {
        close(ho.up_fd);
        ho.up_fd = -1;
    }
}

bool mxop__handover_done(void)
{
    return ho.handed_over;
}

void mxop__handover_tick(mxop__daemon_t *d)
{
    (void)d;
    if (ho.conn_fd >= 0 && !ho.conn_asked && mxop__now_ns() > ho.conn_deadline_ns) {
        MXOP__LOGW(0, NULL, "pid %ld on the hand-over socket asked for nothing in %d s; dropped",
                   ho.peer_pid, LINE_TIMEOUT_S);
        conn_done();
    }
}
