/*
 * server/daemon/worker/spawn.c - starting a worker with clone3, optionally in a
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
 * be forked outside the cgroup.  The exec's outcome is heard from the loop
 * (uv_poll on the exec-error pipe), never waited for: a child stopped
 * between clone and exec (SIGSTOP, a tracer) would otherwise hold the
 * daemon's loop, and with it every client, for as long as it stays
 * stopped.  The exit is watched through the pidfd in
 * the event loop (uv_poll, then waitid(P_PIDFD)); libuv's own SIGCHLD
 * handling waits only for the pids uv_spawn started, so it never takes
 * this status.
 */
#include "server/daemon/worker/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
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

static void handle_closed_cb(uv_handle_t *h)
{
    mxop__spawn_t *s = h->data;
    if (--s->handles == 0 && s->close_cb != NULL)
        s->close_cb((uv_handle_t *)&s->poll);
}

/* Stops watching the exec-error pipe and closes it. */
static void exec_watch_end(mxop__spawn_t *s)
{
    if (s->exec_err < 0)
        return;
    uv_poll_stop(&s->exec_poll);
    close(s->exec_err);
    s->exec_err = -1;
    uv_close((uv_handle_t *)&s->exec_poll, handle_closed_cb);
}

/*
 * Reads what the exec-error pipe holds now, without waiting: true with
 * *status when the outcome is known (EOF: the exec closed the pipe; an
 * errno: it failed), false when the child is not there yet.
 */
static bool exec_outcome(mxop__spawn_t *s, int *status)
{
    int e = 0;
    ssize_t n;
    while ((n = read(s->exec_err, &e, sizeof(e))) < 0 && errno == EINTR)
        ;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    /* The child writes its errno in one write of 4 bytes (atomic on a pipe), or nothing. */
    *status = n == (ssize_t)sizeof(e) ? -e : n == 0 ? 0 : -EIO;
    return true;
}

/* The outcome of the exec, once: start_cb, then no more watching. */
static void exec_heard(mxop__spawn_t *s, int status)
{
    exec_watch_end(s);
    if (s->exec_known)
        return;
    s->exec_known = true;
    if (s->start_cb != NULL)
        s->start_cb(s, status);
}

static void exec_poll_cb(uv_poll_t *h, int status, int events)
{
    (void)events;
    mxop__spawn_t *s = h->data;
    int outcome = 0;
    if (status < 0)
        exec_heard(s, status);
    else if (exec_outcome(s, &outcome))
        exec_heard(s, outcome);
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
    /*
     * The exec's outcome comes first, even when both pipes became readable
     * in the same turn of the loop: the child is dead, so the pipe holds
     * its errno or its EOF now.  A child killed before it ever reached the
     * exec closed the pipe by dying: -EINTR says it was stopped short.
     */
    if (!s->exec_known && s->gate < 0 && s->exec_err >= 0) {
        int outcome = -EINTR;
        if (exec_outcome(s, &outcome) && outcome == 0 &&
            !(si.si_code == CLD_EXITED && si.si_status != 127))
            outcome = -EINTR;
        exec_heard(s, outcome);
    }
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
    s->exec_known = false;
    s->handles = 0;
    s->exit_cb = cb;
    s->start_cb = NULL;
    s->close_cb = NULL;
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
    /* uv_poll_init makes the pipe non-blocking: exec_outcome() reads it without waiting. */
    s->exec_poll.data = s;
    s->poll.data = s;
    int rc = uv_poll_init(loop, &s->exec_poll, s->exec_err);
    if (rc == 0) {
        s->handles++;
        rc = uv_poll_init(loop, &s->poll, pidfd);
    }
    if (rc == 0) {
        s->handles++;
        rc = uv_poll_start(&s->poll, UV_READABLE, poll_cb);
    }
    if (rc != 0) {
        /* What was begun closes through handle_closed_cb (spawn.h: s outlives it). */
        if (s->handles >= 1)
            uv_close((uv_handle_t *)&s->exec_poll, handle_closed_cb);
        if (s->handles >= 2)
            uv_close((uv_handle_t *)&s->poll, handle_closed_cb);
        /*
         * Never released: killed, it is reaped here.  SIGKILL ends even a
         * stopped child, and one that never left its wait on the gate has
         * nothing to finish, so this wait is short.
         */
        close(s->gate);
        close(s->exec_err);
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(pidfd);
        s->gate = s->exec_err = s->pidfd = -1;
        return rc;
    }
    return 0;
}

int mxop__spawn_release(mxop__spawn_t *s, mxop__spawn_start_cb cb)
{
    if (s->gate < 0)
        return -EINVAL;
    s->start_cb = cb;
    /* One byte into an empty pipe: never waits.  EPIPE when the child is already gone. */
    ssize_t n;
    while ((n = write(s->gate, "x", 1)) < 0 && errno == EINTR)
        ;
    int e = n == 1 ? 0 : errno;
    close(s->gate);
    s->gate = -1;
    if (e != 0) {
        s->exec_known = true;
        exec_watch_end(s);
        return -e;
    }
    int rc = uv_poll_start(&s->exec_poll, UV_READABLE, exec_poll_cb);
    if (rc != 0) {
        s->exec_known = true;
        exec_watch_end(s);
        return rc;
    }
    return 0;
}

void mxop__spawn_close(mxop__spawn_t *s, uv_close_cb cb)
{
    s->close_cb = cb;
    s->exec_known = true; /* no start_cb after the close */
    if (s->gate >= 0) {
        close(s->gate);
        s->gate = -1;
    }
    exec_watch_end(s);
    /* Out of epoll before the descriptor goes. */
    uv_poll_stop(&s->poll);
    if (s->pidfd >= 0) {
        close(s->pidfd);
        s->pidfd = -1;
    }
    uv_close((uv_handle_t *)&s->poll, handle_closed_cb);
}
