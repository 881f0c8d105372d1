/*
 * server/daemon/core/notify.c - systemd's notification protocol (sd_notify(3)),
 * which is small enough to speak without linking libsystemd: each state is
 * one datagram of "KEY=VALUE" lines sent to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or an abstract name when it starts with '@').
 *
 * With Type=notify the manager considers the service started at READY=1,
 * which the daemon sends once its socket accepts; with WatchdogSec= it
 * sets $WATCHDOG_USEC and expects WATCHDOG=1 at least that often.  The
 * pings come from the loop's own timer (watchdog.c's tick), so they stop when
 * the loop stops: a hung loop is a dead daemon for the manager.
 */
#include "server/daemon/core/notify.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"

static struct {
    int fd;
    struct sockaddr_un addr;
    socklen_t addr_len;
    uint64_t watchdog_usec;
    int64_t last_ping_ns;
} nt = {.fd = -1};

int mxop__notify_init(char *err, size_t errlen)
{
    const char *sock = getenv("NOTIFY_SOCKET");
    const char *usec = getenv("WATCHDOG_USEC");
    const char *wpid = getenv("WATCHDOG_PID");
    int rc = 0;
    if (usec != NULL) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(usec, &end, 10);
        bool ours = true;
        if (wpid != NULL) {
            char *pend;
            long p = strtol(wpid, &pend, 10);
            ours = *pend == '\0' && p == (long)getpid();
        }
        if (errno != 0 || *end != '\0' || end == usec || v == 0) {
            mxop__fmt(err, errlen, "WATCHDOG_USEC is '%.32s', not a positive number; no watchdog",
                      usec);
            rc = MXOP_EINVAL;
        } else if (ours) {
            nt.watchdog_usec = v;
        }
    }
    if (sock != NULL && sock[0] != '\0') {
        size_t n = strlen(sock);
        memset(&nt.addr, 0, sizeof(nt.addr));
        nt.addr.sun_family = AF_UNIX;
        if ((sock[0] != '/' && sock[0] != '@') || n >= sizeof(nt.addr.sun_path)) {
            mxop__fmt(err, errlen,
                      "NOTIFY_SOCKET is '%.64s': not an absolute path or '@name' that fits a "
                      "Unix socket; no notifications",
                      sock);
            rc = MXOP_EINVAL;
        } else {
            memcpy(nt.addr.sun_path, sock, n);
            if (sock[0] == '@')
                nt.addr.sun_path[0] = '\0'; /* an abstract name: no terminating NUL counted */
            nt.addr_len =
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (sock[0] == '@' ? 0 : 1));
            nt.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (nt.fd < 0) {
                mxop__fmt(err, errlen, "cannot make the notification socket: %s", strerror(errno));
                rc = MXOP_EIO;
            }
        }
    }
    if (nt.fd < 0)
        nt.watchdog_usec = 0; /* nowhere to send the pings */
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    return rc;
}

void mxop__notify(const char *state)
{
    if (nt.fd < 0)
        return;
    ssize_t r;
    do {
        r = sendto(nt.fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&nt.addr,
                   nt.addr_len);
    } while (r < 0 && errno == EINTR);
}

void mxop__notify_tick(int64_t now_ns)
{
    if (nt.watchdog_usec == 0)
        return;
    if (nt.last_ping_ns != 0 && now_ns - nt.last_ping_ns < (int64_t)nt.watchdog_usec * 500)
        return;
    nt.last_ping_ns = now_ns;
    mxop__notify("WATCHDOG=1");
}

uint64_t mxop__notify_watchdog_usec(void)
{
    return nt.watchdog_usec;
}

void mxop__notify_close(void)
{
    if (nt.fd >= 0)
        close(nt.fd);
    nt.fd = -1;
    nt.watchdog_usec = 0;
}
