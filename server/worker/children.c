/*
 * server/worker/children.c - no process of a library's outlives its load.
 *
 * A worker is one process: its channels have exactly one reader.  Under
 * strict the seccomp filter refuses fork; under basic and none a library
 * may fork in a constructor or in mxop_plugin_init, and the child would
 * hold the worker's channels (a second reader, stealing calls).  The
 * worker is its own children's subreaper (main.c), so even a child that
 * double-forked and called setsid() ends up as the worker's child once its
 * parent dies; after every load the worker kills and reaps every child it
 * has, until none is left, and the load is refused with the pid named.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/worker/worker.h"

#define MAX_ROUND 256

/* Kills every child of this process, their pids into pids[]; returns how many. */
static int kill_children(pid_t *pids)
{
    char path[320];
    char buf[4096];
    int n = 0;
    pid_t me = getpid();
    snprintf(path, sizeof(path), "/proc/%d/task", (int)me);
    DIR *tasks = opendir(path);
    if (tasks == NULL)
        return 0;
    struct dirent *t;
    while ((t = readdir(tasks)) != NULL && n < MAX_ROUND) {
        if (t->d_name[0] < '0' || t->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)me, t->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        char *p = buf;
        while (n < MAX_ROUND) {
            char *end;
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            p = end;
            if (pid <= 0)
                continue;
            pids[n++] = (pid_t)pid;
            kill((pid_t)pid, SIGKILL);
        }
    }
    closedir(tasks);
    return n;
}

int mxop__children_sweep(pid_t *first)
{
    pid_t pids[MAX_ROUND];
    int total = 0;
    *first = 0;
    /*
     * Each round kills the children there are and reaps exactly those (a
     * grandchild that comes to us meanwhile is alive: waiting for any child
     * would wait for it); their orphans are the next round's children.
     */
    for (int round = 0; round < 1000; round++) {
        int n = kill_children(pids);
        if (n == 0)
            break;
        if (total == 0)
            *first = pids[0];
        total += n;
        for (int i = 0; i < n; i++)
            while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
                ;
    }
    return total;
}
