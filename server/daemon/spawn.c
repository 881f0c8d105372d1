/*
 * server/daemon/spawn.c - starting a worker with clone3, optionally in a
 * pid namespace of its own, and watching its exit through a pidfd.
 *
 * uv_spawn cannot pass CLONE_NEWPID, and a worker that unshared its own
 * pid namespace would only put its children in it: the daemon would then
 * hold the pid of an intermediate process.  So the daemon clones the
 * worker itself: the pid it holds is the worker's host pid (kill, the
 * exit status, /proc/<pid>/stat, the cgroup all stay the worker's), and
 * inside its namespace the worker is pid 1, whose death takes every
 * process it or its libraries started with it.
 *
 * What uv_spawn did is done here the same way: a new session (setsid, as
 * UV_PROCESS_DETACHED), fds 0..n-1 as given (/dev/null where none is), fds
 * 0..2 made blocking, every other descriptor close-on-exec, signal
 * dispositions back to the default and none blocked; a failed exec is
 * reported to the caller with its errno, through a close-on-exec pipe.
 * Between clone and exec the child runs only async-signal-safe calls (the
 * daemon may have threads: the Python binding embeds it).
 *
 * The child waits on a pipe before exec until the daemon has put its pid
 * into the worker's cgroup (mxop__spawn_release), so nothing it starts can
 * be forked outside the cgroup.  The exit is watched through the pidfd in
 * the event loop (uv_poll, then waitid(P_PIDFD)); libuv's own SIGCHLD
 * handling waits only for the pids uv_spawn started, so it never takes
 * this status.
 */
#include "server/daemon/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The first version of clone3's argument (CLONE_ARGS_SIZE_VER0, 64 bytes). */
typedef struct clone_args_v0 {
    uint64_t flags;
    uint64_t pidfd;
    uint64_t child_tid;
    uint64_t parent_tid;
    uint64_t exit_signal;
    uint64_t stack;
    uint64_t stack_size;
    uint64_t tls;
} clone_args_v0_t;

static void child_fail(int err_w, int e)
{
    ssize_t n = write(err_w, &e, sizeof(e));
    (void)n;
    _exit(127);
}

/* The child, between clone and exec: async-signal-safe calls only. */
static void child(const char *file, char *const args[], const int *fds, int nfds, int gate_r,
                  int err_w)
{
    if (setsid() < 0)
        child_fail(err_w, errno);
    /* Every source above the last target first, so that placing one cannot overwrite another. */
    int tmp[MXOP__SPAWN_FDS_MAX];
    for (int i = 0; i < nfds; i++) {
        int src = fds[i];
        int opened = -1;
        if (src < 0) {
            opened = open("/dev/null", (i == 0 ? O_RDONLY : O_RDWR) | O_CLOEXEC);
            if (opened < 0)
                child_fail(err_w, errno);
            src = opened;
        }
        tmp[i] = fcntl(src, F_DUPFD_CLOEXEC, nfds);
        if (tmp[i] < 0)
            child_fail(err_w, errno);
        if (opened >= 0)
            close(opened);
    }
    for (int i = 0; i < nfds; i++) {
        if (dup2(tmp[i], i) < 0)
            child_fail(err_w, errno);
        if (i <= 2) {
            int fl = fcntl(i, F_GETFL);
            if (fl >= 0 && (fl & O_NONBLOCK))
                (void)fcntl(i, F_SETFL, fl & ~O_NONBLOCK);
        }
    }
    /* Whatever a library of the daemon's process opened without O_CLOEXEC stays behind too. */
    (void)syscall(SYS_close_range, (unsigned)nfds, ~0U, CLOSE_RANGE_CLOEXEC);

    for (int n = 1; n < 32; n++) {
        if (n == SIGKILL || n == SIGSTOP)
            continue;
        (void)signal(n, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    /* Dies with the daemon from here on; before, the gate's EOF says the daemon is gone. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    char c = 0;
    ssize_t r;
    while ((r = read(gate_r, &c, 1)) < 0 && errno == EINTR)
        ;
    if (r != 1)
        _exit(127);
    execv(file, args);
    child_fail(err_w, errno);
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    mxop__spawn_t *s = h->data;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    int rc = waitid(P_PIDFD, (id_t)s->pidfd, &si, WEXITED | WNOHANG);
    if (rc != 0 && errno == EINVAL) /* a kernel before 5.4 */
        rc = waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOHANG);
    if (rc != 0 && errno == EINTR)
        return;
    if (rc == 0 && si.si_pid == 0)
        return; /* not yet */
    uv_poll_stop(h);
    int64_t exit_status = 0;
    int term_signal = 0;
    if (rc != 0)
        exit_status = 127; /* reaped elsewhere: cannot happen; say it ended */
    else if (si.si_code == CLD_EXITED)
        exit_status = si.si_status;
    else
        term_signal = si.si_status;
    /* pid 1 cannot kill itself with the signals it sends itself: it says which instead. */
    if (s->new_pid_ns && term_signal == 0 && exit_status > MXOP__SPAWN_EXIT_SIGNAL &&
        exit_status < MXOP__SPAWN_EXIT_SIGNAL + 32) {
        term_signal = (int)(exit_status - MXOP__SPAWN_EXIT_SIGNAL);
        exit_status = 0;
    }
    s->exit_cb(s, exit_status, term_signal);
}

int mxop__spawn_start(uv_loop_t *loop, mxop__spawn_t *s, const char *file, char *const args[],
                      const int *fds, int nfds, bool new_pid_ns, mxop__spawn_exit_cb cb)
{
    if (nfds < 3 || nfds > MXOP__SPAWN_FDS_MAX)
        return -EINVAL;
    int gate[2] = {-1, -1};
    int errp[2] = {-1, -1};
    s->pid = 0;
    s->pidfd = -1;
    s->gate = -1;
    s->exec_err = -1;
    s->new_pid_ns = new_pid_ns;
    s->exit_cb = cb;
    if (pipe2(gate, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (gate[i] >= 0)
                close(gate[i]);
        }
        return -e;
    }
    /* No handler of the daemon's may run in the child before it resets them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int pidfd = -1;
    clone_args_v0_t a;
    memset(&a, 0, sizeof(a));
    a.flags = CLONE_PIDFD | (new_pid_ns ? CLONE_NEWPID : 0);
    a.pidfd = (uint64_t)(uintptr_t)&pidfd;
    a.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &a, sizeof(a));
    if (pid == 0)
        child(file, args, fds, nfds, gate[0], errp[1]);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(gate[0]);
    close(errp[1]);
    if (pid < 0) {
        close(gate[1]);
        close(errp[0]);
        return -e;
    }
    s->pid = (pid_t)pid;
    s->pidfd = pidfd;
    s->gate = gate[1];
    s->exec_err = errp[0];
    int rc = uv_poll_init(loop, &s->poll, pidfd);
    if (rc == 0) {
        s->poll.data = s;
        rc = uv_poll_start(&s->poll, UV_READABLE, poll_cb);
        if (rc != 0)
            uv_close((uv_handle_t *)&s->poll, NULL);
    }
    if (rc != 0) {
        /* Never released: the child sees the gate's EOF and exits; reap it here. */
        close(s->gate);
        close(s->exec_err);
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(pidfd);
        return rc;
    }
    return 0;
}

int mxop__spawn_release(mxop__spawn_t *s)
{
    if (s->gate < 0)
        return -EINVAL;
    ssize_t n;
    while ((n = write(s->gate, "x", 1)) < 0 && errno == EINTR)
        ;
    close(s->gate);
    s->gate = -1;
    /* EOF when the exec closed the pipe; an errno when it failed. */
    int e = 0;
    size_t got = 0;
    while (got < sizeof(e)) {
        n = read(s->exec_err, (char *)&e + got, sizeof(e) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(s->exec_err);
    s->exec_err = -1;
    return got == sizeof(e) ? -e : 0;
}

void mxop__spawn_close(mxop__spawn_t *s, uv_close_cb cb)
{
    if (s->gate >= 0) {
        close(s->gate);
        s->gate = -1;
    }
    if (s->exec_err >= 0) {
        close(s->exec_err);
        s->exec_err = -1;
    }
    /* Out of epoll before the descriptor goes. */
    uv_poll_stop(&s->poll);
    if (s->pidfd >= 0) {
        close(s->pidfd);
        s->pidfd = -1;
    }
    uv_close((uv_handle_t *)&s->poll, cb);
}
