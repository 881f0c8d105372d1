/*
 * server/daemon/core/notify.h - telling a service manager how the daemon is
 * (systemd's sd_notify protocol, written here: no libsystemd).
 */
#ifndef MXOP_SERVER_DAEMON_NOTIFY_H
#define MXOP_SERVER_DAEMON_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

/*
 * Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID and removes them from
 * the environment (so that no worker sees them).  Without NOTIFY_SOCKET
 * every other call does nothing.  Returns 0, or MXOP_EINVAL with a sentence
 * in err when a variable is malformed (the daemon then logs it and goes on
 * without notifications).
 */
int mxop__notify_init(char *err, size_t errlen);

/* Sends one state string ("READY=1\nMAINPID=..."); best effort, never blocks. */
void mxop__notify(const char *state);

/*
 * Called on every tick of the daemon's loop timer: sends WATCHDOG=1 when
 * half of WATCHDOG_USEC has passed since the last one.  A loop that hangs
 * stops the pings, and the service manager kills and restarts the daemon.
 */
void mxop__notify_tick(int64_t now_ns);

/* Closes the notification socket (at exit). */
void mxop__notify_close(void);

/* The watchdog interval the manager asked for, in microseconds; 0: none. */
uint64_t mxop__notify_watchdog_usec(void);

#endif /* MXOP_SERVER_DAEMON_NOTIFY_H */
