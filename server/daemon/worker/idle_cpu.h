/*
 * server/daemon/worker/idle_cpu.h - a worker that burns CPU with no call in flight
 * (idle_cpu.c).
 */
#ifndef MXOP_SERVER_DAEMON_IDLE_CPU_H
#define MXOP_SERVER_DAEMON_IDLE_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CPU time an idle worker may use, all its threads together, before it is replaced. */
#define MXOP__IDLE_CPU_MAX_MS 2000

/* How often a worker's CPU time is read (the watchdog ticks far more often). */
#define MXOP__IDLE_CPU_CHECK_MS 250

/**
 * Called by the watchdog for every live worker at every tick.  Returns 1
 * (with the reason in msg) when worker `pid` has used more than
 * MXOP__IDLE_CPU_MAX_MS of CPU since it was last seen running a call
 * (`busy`, or `call_id` changed since the last look), else 0.
 */
int mxop__idle_cpu_over(pid_t pid, bool busy, uint64_t call_id, char *msg, size_t msglen);

#endif /* MXOP_SERVER_DAEMON_IDLE_CPU_H */
