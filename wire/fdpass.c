/*
 * wire/fdpass.c - SCM_RIGHTS send and receive.
 */
#include "wire/fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/frame.h"

ssize_t mxop__send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int) * MXOP__FRAME_MAX_FDS)];
        struct cmsghdr align;
    } ctl;

    if (nfds < 0 || nfds > MXOP__FRAME_MAX_FDS)
        return -EINVAL;
    if (nfds > 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return -errno;
    }
}

ssize_t mxop__recv_fds(int sock, void *buf, size_t len, int *fds, int max_fds, int *nfds)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int) * MXOP__FRAME_MAX_FDS * 2)];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl)};
    ssize_t n;

    for (;;) {
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n >= 0)
            break;
        if (errno != EINTR)
            return -errno;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            /* Keep what the caller has room for; close the rest so nothing leaks. */
            if (fds != NULL && nfds != NULL && *nfds < max_fds)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    /* A truncated control message means descriptors were dropped by the kernel. */
    if (msg.msg_flags & MSG_CTRUNC)
        return -EMSGSIZE;
    return n;
}
