/*
 * server/daemon/worker/procstat.c - see procstat.h.  The daemon reads a process's
 * stat line for its parent (worker_proc.c), its state (worker.c,
 * worker_proc.c) and its CPU time (idle_cpu.c); the parse of the command
 * name is here once.
 */
#include "server/daemon/worker/procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

const char *mxop__proc_stat(pid_t pid, char *buf, size_t len)
{
    char path[64];
    mxop__fmt(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n;
    while ((n = read(fd, buf, len - 1)) < 0 && errno == EINTR)
        ;
    close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    /* "pid (comm) S ...": the fields follow the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == '\0')
        return NULL;
    return p + 2;
}
