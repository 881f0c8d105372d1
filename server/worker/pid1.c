/*
 * server/worker/pid1.c - the worker reaps the orphans of its libraries.
 *
 * A worker is pid 1 of its own pid namespace (server/daemon/worker/spawn.c) or,
 * without one, its processes' child subreaper (main.c): either way, every
 * process a library started whose parent died is reparented to it.  A
 * library that forks and exits (a double fork, a daemonising helper, a
 * child of a thread pool) leaves zombies nobody else will wait for; left
 * alone they would fill the worker's pid limit.  The worker reaps them, but
 * only between calls, when it is about to sleep (datachan.c): a call or a
 * load that waits for a child of its own (system(), a library's
 * waitpid(), children.c's sweep) never has its status taken from it.  A
 * library that forks in one call and waits for the child in a later one
 * may find the status gone (ECHILD): documented in docs/security.md.
 *
 * The SIGCHLD handler only interrupts the idle poll (poll is never
 * restarted after a handler), so that a child that dies while the worker
 * sleeps is reaped at once; with SA_RESTART, other system calls of an op
 * carry on as before.
 */
#include "server/worker/pid1.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

static void on_child(int sig)
{
    (void)sig;
}

int mxop__pid1_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_child;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGCHLD, &sa, NULL) == 0 ? 0 : -errno;
}

void mxop__pid1_reap(void)
{
    int saved = errno;
    for (int i = 0; i < 4096; i++) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p > 0)
            continue;
        if (p < 0 && errno == EINTR)
            continue;
        break;
    }
    errno = saved;
}
