/*
 * server/daemon/core/listener.c - the control socket: made, taken over,
 * released and closed (accept.c accepts on it).
 *
 * The socket is bound under a temporary name beside its path and renamed
 * into place once it listens, so that "the path exists" means "a daemon
 * accepts there": tests and engines can simply wait for the path.  The
 * rename also replaces a stale socket atomically, while a live daemon's
 * socket is never taken over.
 *
 * Under socket activation (systemd's LISTEN_FDS and LISTEN_PID naming this
 * process) the service manager made the socket: the daemon takes fd 3,
 * after checking that it is a listening Unix stream socket, and never
 * removes its file, which it did not create.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"

static int fill_addr(struct sockaddr_un *sa, const char *path, char *err, size_t errlen)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa->sun_path)) {
        mxop__fmt(err, errlen, "socket path '%s' is longer than the %zu bytes a Unix socket allows",
                  path, sizeof(sa->sun_path) - 1);
        return MXOP_EINVAL;
    }
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 0;
}

/*
 * Decides what to do with an existing file at the socket path: 0 means
 * "free or stale, go ahead", anything else refuses with a sentence.
 */
static int check_existing(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        mxop__fmt(err, errlen, "cannot inspect socket path %s: %s", path, strerror(errno));
        return MXOP_EIO;
    }
    if (!S_ISSOCK(st.st_mode)) {
        /* Never clobber a user's file because of a typo in --socket. */
        mxop__fmt(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
        return MXOP_EIO;
    }

    struct sockaddr_un sa;
    int rc = fill_addr(&sa, path, err, errlen);
    if (rc != 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mxop__fmt(err, errlen, "socket: %s", strerror(errno));
        return MXOP_EIO;
    }
    int r;
    do {
        r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    } while (r != 0 && errno == EINTR);
    int e = errno;
    close(fd);
    if (r == 0) {
        mxop__fmt(err, errlen, "another daemon is listening on %s", path);
        return MXOP_EIO;
    }
    if (e == ECONNREFUSED)
        return 0; /* Stale: its daemon is gone.  The rename below replaces it. */
    if (e == EAGAIN) {
        /* A full backlog still means someone is listening. */
        mxop__fmt(err, errlen, "another daemon is listening on %s (its backlog is full)", path);
        return MXOP_EIO;
    }
    mxop__fmt(err, errlen, "cannot probe existing socket %s: %s", path, strerror(e));
    return MXOP_EIO;
}

/* The first descriptor the service manager passes (sd_listen_fds(3)'s SD_LISTEN_FDS_START). */
#define LISTEN_FDS_START 3

/*
 * The socket the service manager passed, when LISTEN_PID names us: its fd
 * (non-blocking, close-on-exec), or -1 when none was passed, or -2 with a
 * sentence in err when what was passed is not usable.  The variables are
 * removed, so that no worker believes they are for it.
 */
static int activated_socket(const char *path, char *err, size_t errlen)
{
    const char *pid_s = getenv("LISTEN_PID");
    const char *fds_s = getenv("LISTEN_FDS");
    if (pid_s == NULL || fds_s == NULL)
        return -1;
    char *end;
    long pid = strtol(pid_s, &end, 10);
    if (*end != '\0' || pid != (long)getpid())
        return -1; /* Meant for another process (our parent's, say). */
    long n = strtol(fds_s, &end, 10);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (*end != '\0' || n != 1) {
        mxop__fmt(err, errlen,
                  "socket activation passed LISTEN_FDS=%s; mxop-serverd takes exactly one "
                  "socket (one ListenStream= in its .socket unit)",
                  fds_s);
        return -2;
    }
    int fd = LISTEN_FDS_START;
    int domain = 0, type = 0, acc = 0;
    socklen_t l1 = sizeof(domain), l2 = sizeof(type), l3 = sizeof(acc);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l1) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l3) != 0) {
        mxop__fmt(err, errlen, "socket activation: fd %d is not a socket (%s)", fd,
                  strerror(errno));
        return -2;
    }
    if (domain != AF_UNIX || type != SOCK_STREAM || !acc) {
        mxop__fmt(err, errlen,
                  "socket activation: fd %d must be a listening Unix stream socket "
                  "(ListenStream=/path in the .socket unit)",
                  fd);
        return -2;
    }
    struct sockaddr_un sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0] != '\0' &&
        strncmp(sa.sun_path, path, sizeof(sa.sun_path)) != 0)
        MXOP__LOGW(0, NULL, "the activated socket is %s, not --socket %s: clients must use %s",
                   sa.sun_path, path, sa.sun_path);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        mxop__fmt(err, errlen, "socket activation: cannot set up fd %d: %s", fd, strerror(errno));
        return -2;
    }
    return fd;
}

int mxop__listener_start(mxop__daemon_t *d, char *err, size_t errlen)
{
    const char *path = d->cfg.socket_path;
    char tmp[sizeof(((struct sockaddr_un *)0)->sun_path) + 32];
    struct sockaddr_un sa;
    int rc;

    d->listen_fd = -1;
    d->reserve_fd = -1;
    rc = fill_addr(&sa, path, err, errlen);
    if (rc != 0)
        return rc;
    mxop__fmt(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    rc = fill_addr(&sa, tmp, err, errlen);
    if (rc != 0)
        return rc;
    int afd = activated_socket(path, err, errlen);
    if (afd == -2)
        return MXOP_EINVAL;
    if (afd >= 0 && d->cfg.take_over) {
        close(afd);
        mxop__fmt(err, errlen,
                  "--take-over: the service manager owns the socket (socket "
                  "activation); restart the service instead");
        return MXOP_EINVAL;
    }
    if (afd >= 0) {
        d->sock_activated = true;
        if (d->cfg.socket_mode != 0600 || d->cfg.has_socket_gid)
            MXOP__LOGW(0, NULL,
                       "--socket-mode and --socket-group do not apply to the socket the "
                       "service manager made: set SocketMode= and SocketGroup= in its "
                       ".socket unit");
        d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (uv_poll_init(d->loop, &d->listen_poll, afd) != 0) {
            mxop__fmt(err, errlen, "cannot watch the activated socket");
            return MXOP_EIO;
        }
        d->listen_fd = afd;
        d->listening = true;
        MXOP__LOGI(0, NULL, "serving the socket the service manager passed (fd %d)", afd);
        return 0;
    }
    if (d->cfg.take_over)
        return 0; /* the running daemon's socket, which the caller asks for (handover.c) */
    rc = check_existing(path, err, errlen);
    if (rc != 0)
        return rc;

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mxop__fmt(err, errlen, "socket: %s", strerror(errno));
        return MXOP_EIO;
    }
    unlink(tmp); /* Left over by an earlier daemon with our pid. */
    mode_t old = umask(077);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    umask(old);
    if (b != 0) {
        mxop__fmt(err, errlen, "cannot bind %s: %s", tmp, strerror(e));
        goto err_close;
    }
    /*
     * Connecting needs only write permission: 0600 (protocol.md's default)
     * unless --socket-mode widens it, typically to 0660 for --socket-group,
     * so that the users --allow-uid and --allow-gid admit can reach it.
     */
    if (d->cfg.has_socket_gid && chown(tmp, (uid_t)-1, d->cfg.socket_gid) != 0) {
        mxop__fmt(err, errlen, "cannot give %s the group %u (--socket-group): %s", tmp,
                  (unsigned)d->cfg.socket_gid, strerror(errno));
        goto err_unlink;
    }
    if (chmod(tmp, d->cfg.socket_mode != 0 ? d->cfg.socket_mode : 0600) != 0) {
        mxop__fmt(err, errlen, "cannot set the mode of %s: %s", tmp, strerror(errno));
        goto err_unlink;
    }
    if (listen(fd, 128) != 0) {
        mxop__fmt(err, errlen, "cannot listen on %s: %s", tmp, strerror(errno));
        goto err_unlink;
    }
    if (rename(tmp, path) != 0) {
        mxop__fmt(err, errlen, "cannot move socket %s to %s: %s", tmp, path, strerror(errno));
        goto err_unlink;
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        d->sock_dev = st.st_dev;
        d->sock_ino = st.st_ino;
    }
    d->sock_created = true;

    d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (uv_poll_init(d->loop, &d->listen_poll, fd) != 0) {
        mxop__fmt(err, errlen, "cannot watch the listening socket");
        goto err_created;
    }
    d->listen_fd = fd;
    d->listening = true;
    return 0;

err_created:
    if (d->reserve_fd >= 0)
        close(d->reserve_fd);
    d->reserve_fd = -1;
    unlink(path);
    d->sock_created = false;
    close(fd);
    return MXOP_EIO;
err_unlink:
    unlink(tmp);
err_close:
    close(fd);
    return MXOP_EIO;
}

int mxop__listener_adopt(mxop__daemon_t *d, int fd, char *err, size_t errlen)
{
    if (fd < 0)
        return fd;
    d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (uv_poll_init(d->loop, &d->listen_poll, fd) != 0) {
        close(fd);
        mxop__fmt(err, errlen, "cannot watch the socket taken over");
        return MXOP_EIO;
    }
    d->listen_fd = fd;
    d->listening = true;
    return 0;
}

static void listen_closed_cb(uv_handle_t *h)
{
    mxop__daemon_t *d = MXOP__CONTAINER_OF((uv_poll_t *)h, mxop__daemon_t, listen_poll);
    close(d->listen_fd);
    d->listen_fd = -1;
}

void mxop__listener_release(mxop__daemon_t *d)
{
    d->sock_created = false; /* the file is the successor's now */
    if (d->listening) {
        d->listening = false;
        uv_poll_stop(&d->listen_poll);
        uv_close((uv_handle_t *)&d->listen_poll, listen_closed_cb);
    }
}

void mxop__listener_resume(mxop__daemon_t *d)
{
    struct stat st;
    if (stat(d->cfg.socket_path, &st) == 0) {
        d->sock_dev = st.st_dev;
        d->sock_ino = st.st_ino;
        d->sock_created = true;
    }
}

void mxop__listener_stop(mxop__daemon_t *d)
{
    if (d->listening) {
        d->listening = false;
        uv_poll_stop(&d->listen_poll);
        uv_close((uv_handle_t *)&d->listen_poll, listen_closed_cb);
    }
    if (d->sock_created) {
        /* Remove the path only if it is still our socket, not a successor's. */
        struct stat st;
        if (stat(d->cfg.socket_path, &st) == 0 && st.st_dev == d->sock_dev &&
            st.st_ino == d->sock_ino)
            unlink(d->cfg.socket_path);
        d->sock_created = false;
    }
    if (d->reserve_fd >= 0) {
        close(d->reserve_fd);
        d->reserve_fd = -1;
    }
}
