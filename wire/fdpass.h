/*
 * wire/fdpass.h - sending and receiving file descriptors over Unix sockets.
 *
 * Regions (memfds) and data channels (socketpair ends) move between the
 * client, the daemon and workers as SCM_RIGHTS ancillary data.  Received
 * descriptors are always close-on-exec.
 */
#ifndef MXOP_SHM_FDPASS_H
#define MXOP_SHM_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/**
 * sendmsg() of buf[0..len) with `nfds` descriptors attached (borrowed).
 * Never raises SIGPIPE.  Returns bytes sent (may be short, like send) or
 * -errno.
 */
ssize_t mxop__send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);

/**
 * recvmsg() into buf[0..len).  Descriptors that arrive are appended to
 * fds[*nfds..max_fds) and *nfds advanced (taken by the caller); any beyond
 * max_fds are closed.  Returns bytes received (0 at EOF) or -errno.
 */
ssize_t mxop__recv_fds(int sock, void *buf, size_t len, int *fds, int max_fds, int *nfds);

#endif /* MXOP_SHM_FDPASS_H */
