/*
 * server/daemon/worker/procstat.h - reading /proc/PID/stat (server/daemon/worker/procstat.c).
 */
#ifndef MXOP_SERVER_DAEMON_PROCSTAT_H
#define MXOP_SERVER_DAEMON_PROCSTAT_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Reads /proc/<pid>/stat into buf (len bytes, NUL-terminated) and returns a
 * pointer to its third field (the state letter), past the command name,
 * which may hold anything, ')' and spaces included; NULL when the file
 * cannot be read (no such process) or has no such field.
 */
const char *mxop__proc_stat(pid_t pid, char *buf, size_t len);

#endif
