/*
 * The daemon of `mxop run` and `mxop verify`: see run_session.h.
 */

#include "tools/mxop/run_session.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/*
 * The one private daemon of this process, for the fatal-signal handler:
 * it stops the daemon and removes what it made with async-signal-safe
 * calls only (kill, waitpid, unlink, rmdir), so that an interrupted run
 * leaves nothing behind.
 */
static mxop__run_daemon_t *active;

/*
 * Unlinks every entry of the directory open as `dfd` (one level: the
 * entries are files and sockets) and closes it.  Every name, not only the
 * ones this program made: a daemon stopped while it started leaves its
 * socket's temporary name (mxop.sock.tmp.PID) before it renames it.  Raw
 * getdents64 and unlinkat: no allocation, so the signal handler may use it.
 */
static void unlink_entries(int dfd)
{
    char buf[4096] __attribute__((aligned(8)));
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct dirent64 *e = (struct dirent64 *)(void *)(buf + off);
            off += e->d_reclen;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            unlinkat(dfd, e->d_name, 0);
        }
    }
    close(dfd);
}

static void remove_files(const mxop__run_daemon_t *d)
{
    char plugins[160];
    /* Built with plain copies: snprintf is not async-signal-safe in theory. */
    size_t n = strlen(d->dir);
    memcpy(plugins, d->dir, n);
    memcpy(plugins + n, "/plugins", sizeof("/plugins"));
    int pfd = open(plugins, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (pfd >= 0)
        unlink_entries(pfd);
    rmdir(plugins);
    int dfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0)
        unlink_entries(dfd);
    rmdir(d->dir);
}

static void on_fatal_signal(int sig)
{
    mxop__run_daemon_t *d = active;
    if (d && d->pid > 0) {
        kill(d->pid, SIGTERM);
        waitpid(d->pid, NULL, 0);
    }
    if (d && d->dir[0])
        remove_files(d);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in < 0)
        return -1;
    out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (out >= 0) {
        char buf[65536];
        ssize_t n;
        rc = 0;
        while ((n = read(in, buf, sizeof(buf))) > 0)
            if (write(out, buf, (size_t)n) != n) {
                rc = -1;
                break;
            }
        if (n < 0 || close(out) != 0)
            rc = -1;
    }
    close(in);
    return rc;
}

/* This program's directory, from /proc/self/exe. */
static void self_dir(char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    snprintf(buf, len, "%s", n > 0 ? dirname(exe) : ".");
}

static int find_serverd(char *out, size_t len)
{
    const char *env = getenv("MXOP_SERVERD");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    char dir[2048];
    self_dir(dir, sizeof(dir));
    snprintf(out, len, "%.2048s/mxop-serverd", dir);
    return access(out, X_OK);
}

/* A bare name not found as a file: the build tree's plugins/ beside bin/. */
static void resolve_library(const char *lib, char *out, size_t len)
{
    if (strchr(lib, '/') == NULL && access(lib, R_OK) != 0) {
        char dir[2048];
        self_dir(dir, sizeof(dir));
        snprintf(out, len, "%.2048s/../plugins/%.1024s", dir, lib);
        if (access(out, R_OK) == 0)
            return;
    }
    snprintf(out, len, "%s", lib);
}

static int wait_socket(mxop__run_daemon_t *d, char *err, size_t errlen)
{
    for (int i = 0; i < 2000; i++) { /* 20 s: generous on a loaded machine */
        struct stat st;
        if (stat(d->socket, &st) == 0)
            return 0;
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return fail(err, errlen, "mxop-serverd exited at start (status %d); see its log %s",
                        WIFEXITED(status) ? WEXITSTATUS(status) : -1, d->log);
        }
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return fail(err, errlen, "mxop-serverd did not create %s within 20 s", d->socket);
}

static int start_private(mxop__run_daemon_t *d, const char *lib, int trust, char *err,
                         size_t errlen)
{
    char path[4096], serverd[4096];
    resolve_library(lib, path, sizeof(path));
    if (access(path, R_OK) != 0)
        return fail(err, errlen,
                    "library %s: %s (give a path to the .so, or --socket for a running daemon)",
                    path, strerror(errno));
    if (find_serverd(serverd, sizeof(serverd)) != 0)
        return fail(err, errlen,
                    "mxop-serverd not found beside this program (%s): set MXOP_SERVERD, or "
                    "give --socket / $MXOP_SOCKET",
                    serverd);
    const char *tmp = getenv("TMPDIR");
    /* A socket path has at most 107 bytes: TMPDIR/mxop-run-XXXXXX/mxop.sock. */
    if (!tmp || !*tmp || strlen(tmp) > 80)
        tmp = "/tmp";
    /* Before the directory exists, so that no signal can come between. */
    active = d;
    struct sigaction sa = {.sa_handler = on_fatal_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    snprintf(d->dir, sizeof(d->dir), "%s/mxop-run-XXXXXX", tmp);
    if (!mkdtemp(d->dir)) {
        int e = errno;
        d->dir[0] = '\0';
        return fail(err, errlen, "cannot make a private directory in %s: %s", tmp, strerror(e));
    }
    char plugins[160];
    snprintf(plugins, sizeof(plugins), "%s/plugins", d->dir);
    snprintf(d->socket, sizeof(d->socket), "%s/mxop.sock", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
    char *base = basename(path);
    snprintf(d->library, sizeof(d->library), "%s", base);
    snprintf(d->lib_copy, sizeof(d->lib_copy), "%s/%s", plugins, base);
    if (mkdir(plugins, 0700) != 0 || copy_file(path, d->lib_copy) != 0)
        return fail(err, errlen, "cannot copy %s into %s: %s", path, plugins, strerror(errno));
    pid_t parent = getpid();
    /*
     * The fatal signals wait until d->pid holds the child: a signal between
     * fork's return and that store would leave the handler without a daemon
     * to stop, and the daemon would make its files after the cleanup.
     */
    sigset_t fatal, was;
    sigemptyset(&fatal);
    sigaddset(&fatal, SIGINT);
    sigaddset(&fatal, SIGTERM);
    sigaddset(&fatal, SIGHUP);
    sigprocmask(SIG_BLOCK, &fatal, &was);
    pid_t pid = fork();
    d->pid = pid > 0 ? pid : 0;
    if (pid != 0)
        sigprocmask(SIG_SETMASK, &was, NULL);
    if (pid < 0)
        return fail(err, errlen, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* The cleanup is the parent's; the daemon handles its own signals. */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigprocmask(SIG_SETMASK, &was, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            close(fd);
        }
        const char *worker = getenv("MXOP_WORKER");
        char *argv[12] = {serverd, "--socket",    d->socket, "--plugin-dir",
                          plugins, "--log-level", "warn",    NULL};
        int n = 7;
        if (worker && *worker) {
            argv[n++] = "--worker";
            argv[n++] = (char *)worker;
        }
        if (trust) {
            argv[n++] = "--trusted-library";
            argv[n++] = d->library;
        }
        argv[n] = NULL;
        execv(serverd, argv);
        _exit(127);
    }
    return wait_socket(d, err, errlen);
}

int mxop__run_daemon_open(mxop__run_daemon_t *d, const char *lib, const char *socket_opt, int trust,
                          char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    const char *sock = socket_opt ? socket_opt : getenv("MXOP_SOCKET");
    if (sock && *sock) {
        snprintf(d->socket, sizeof(d->socket), "%s", sock);
        /* A running daemon loads names relative to its plugin directory. */
        char tmp[512];
        snprintf(tmp, sizeof(tmp), "%s", lib);
        snprintf(d->library, sizeof(d->library), "%s", lib[0] == '/' ? basename(tmp) : lib);
        return 0;
    }
    if (start_private(d, lib, trust, err, errlen) != 0) {
        mxop__run_daemon_close(d);
        return -1;
    }
    return 0;
}

void mxop__run_daemon_close(mxop__run_daemon_t *d)
{
    if (d->dir[0] == '\0')
        return;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        int status;
        /* 10 s for a clean stop, then SIGKILL: never leave it running. */
        for (int i = 0; i < 1000 && waitpid(d->pid, &status, WNOHANG) == 0; i++)
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        if (kill(d->pid, 0) == 0) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &status, 0);
        }
        d->pid = 0;
    }
    remove_files(d);
    d->dir[0] = '\0';
    active = NULL;
}

int mxop__run_session_open(const mxop__run_daemon_t *d, const char *name, mxop_client_t **out,
                           char *err, size_t errlen)
{
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .client_name = name};
    int rc = mxop_connect(d->socket, &opts, out);
    if (rc != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s: %s", d->socket, mxop_err_name(rc),
                 mxop_connect_error());
        return rc;
    }
    rc = mxop_load_library(*out, d->library);
    if (rc != 0) {
        snprintf(err, errlen, "cannot load %s: %s: %s", d->library, mxop_err_name(rc),
                 mxop_last_error(*out));
        mxop_close(*out);
        *out = NULL;
    }
    return rc;
}
