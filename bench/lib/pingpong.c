/*
 * bench/lib/pingpong.c - see pingpong.h.
 */
#include "bench/lib/pingpong.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/lib/daemon.h"

/* Blocking full-length transfers: a stream socket may split a message. */
static int read_full(int fd, unsigned char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = read(fd, buf + off, len - off);
        if (n > 0)
            off += (size_t)n;
        else if (n == 0 || errno != EINTR)
            return -1;
    }
    return 0;
}

static int write_full(int fd, const unsigned char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, buf + off, len - off);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

/* recv of exactly len bytes, polling first as mxop's frame reader does. */
static int poll_recv(int fd, unsigned char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            return -1;
        /* With room for descriptors, as wire/fdpass.c reads every frame. */
        union {
            char buf[CMSG_SPACE(sizeof(int) * 8)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = buf + off, .iov_len = len - off};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = ctl.buf,
                             .msg_controllen = sizeof(ctl)};
        ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (n > 0)
            off += (size_t)n;
        else if (n == 0 || errno != EINTR)
            return -1;
    }
    return 0;
}

static int send_msg(int fd, const unsigned char *buf, size_t len)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    return sendmsg(fd, &msg, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

_Noreturn static void echo(int fd, int idle_fd, int mode)
{
    unsigned char buf[MXB_PING_BYTES];
    for (;;) {
        int rc;
        if (mode == MXB_PING_RAW) {
            rc = read_full(fd, buf, sizeof(buf));
            if (rc == 0)
                rc = write_full(fd, buf, sizeof(buf));
        } else {
            /* The serving loop's poll of the supervisor and data sockets. */
            struct pollfd p[2] = {{idle_fd, POLLIN, 0}, {fd, POLLIN, 0}};
            if (poll(p, 2, -1) <= 0 || (p[1].revents & (POLLHUP | POLLERR)))
                break;
            if (mode == MXB_PING_MXOP) {
                rc = poll_recv(fd, buf, MXB_PING_HDR);
                if (rc == 0)
                    rc = poll_recv(fd, buf + MXB_PING_HDR, sizeof(buf) - MXB_PING_HDR);
            } else {
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                rc = n > 0 ? 0 : -1;
                if (n > 0 && (size_t)n < sizeof(buf))
                    rc = read_full(fd, buf + n, sizeof(buf) - (size_t)n);
            }
            if (rc == 0)
                rc = send_msg(fd, buf, sizeof(buf));
        }
        if (rc != 0)
            break;
    }
    _exit(0);
}

/* recv without waiting until len bytes are in, polling only when nothing is there. */
static int recv_dontwait(int fd, unsigned char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(fd, buf + off, len - off, MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            return -1;
    }
    return 0;
}

/* One round trip in the caller's pattern. */
static int round_trip(const mxb_pingpong_t *p, const unsigned char *msg, unsigned char *back)
{
    if (p->mode == MXB_PING_RAW)
        return write_full(p->fd, msg, MXB_PING_BYTES) || read_full(p->fd, back, MXB_PING_BYTES);
    if (p->mode == MXB_PING_LEAN)
        return send_msg(p->fd, msg, MXB_PING_BYTES) || read_full(p->fd, back, MXB_PING_BYTES);
    /* MXOP: the check for news before the call, then the result awaited on both sockets. */
    struct pollfd ready[2] = {{p->idle_fd, POLLIN, 0}, {p->fd, POLLIN, 0}};
    if (poll(ready, 2, 0) < 0 || send_msg(p->fd, msg, MXB_PING_BYTES) != 0)
        return -1;
    struct pollfd wait[2] = {{p->fd, POLLIN, 0}, {p->idle_fd, POLLIN, 0}};
    if (poll(wait, 2, 10000) <= 0)
        return -1;
    return recv_dontwait(p->fd, back, MXB_PING_HDR) ||
           recv_dontwait(p->fd, back + MXB_PING_HDR, MXB_PING_BYTES - MXB_PING_HDR);
}

int mxb_pingpong_start(mxb_pingpong_t *p, int mode, char *err, size_t errlen)
{
    int sv[2], idle[2];
    p->fd = -1;
    p->idle_fd = -1;
    p->mode = mode;
    p->peer = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    /* Each side polls its end of a second pair that never carries anything. */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, idle) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        goto err_sv;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto err_idle;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        /* Only its own two sockets: a copy of another peer's socket kept
         * here would keep that peer from ever seeing its end of file. */
        long max = sysconf(_SC_OPEN_MAX);
        for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 1024); fd++)
            if (fd != sv[1] && fd != idle[1])
                close(fd);
        echo(sv[1], idle[1], mode);
    }
    close(sv[1]);
    close(idle[1]);
    mxb_daemon_track_child(pid);
    p->fd = sv[0];
    p->idle_fd = idle[0];
    p->peer = pid;
    return 0;

err_idle:
    close(idle[0]);
    close(idle[1]);
err_sv:
    close(sv[0]);
    close(sv[1]);
    return -1;
}

int mxb_pingpong_run(mxb_pingpong_t *p, int n, mxb_samples_t *s)
{
    unsigned char msg[MXB_PING_BYTES], back[MXB_PING_BYTES];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (unsigned char)i;
    for (int i = 0; i < n; i++) {
        msg[0] = (unsigned char)i;
        int64_t t0 = mxb_now_ns();
        if (round_trip(p, msg, back) != 0)
            return -1;
        int64_t t1 = mxb_now_ns();
        /* The echo is checked like every other result: no timing of wrong answers. */
        if (memcmp(msg, back, sizeof(msg)) != 0)
            return -1;
        if (s != NULL)
            mxb_samples_add(s, t1 - t0);
    }
    return 0;
}

void mxb_pingpong_stop(mxb_pingpong_t *p)
{
    if (p->fd >= 0)
        close(p->fd);
    if (p->idle_fd >= 0)
        close(p->idle_fd);
    p->fd = -1;
    p->idle_fd = -1;
    if (p->peer > 0) {
        waitpid(p->peer, NULL, 0);
        mxb_daemon_untrack_child(p->peer);
    }
    p->peer = 0;
}
