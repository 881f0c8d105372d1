/*
 * bench/lib/daemon.c - see daemon.h.
 */
#include "bench/lib/daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What the exit and signal paths must clean up: fixed storage, so that a
 * signal handler can reach it without allocating. */
#define MAX_FILES 64
#define MAX_CHILDREN 16

static mxb_daemon_t *active;
static char files[MAX_FILES][256];
static int n_files;
static volatile pid_t children[MAX_CHILDREN];
static int hooks_installed;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void mxb_daemon_track_child(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == 0) {
            children[i] = pid;
            return;
        }
    }
}

void mxb_daemon_untrack_child(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

/* Only async-signal-safe calls: this runs from the signal handler too. */
static void kill_all(int sig)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
    if (active != NULL && active->pid > 0)
        kill(active->pid, sig);
}

static void remove_files(void)
{
    for (int i = n_files - 1; i >= 0; i--) {
        if (unlink(files[i]) != 0)
            rmdir(files[i]);
    }
    n_files = 0;
}

static void on_signal(int sig)
{
    kill_all(SIGTERM);
    if (active != NULL && active->pid > 0)
        waitpid(active->pid, NULL, 0);
    if (active != NULL && active->sock[0])
        unlink(active->sock);
    remove_files();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_exit_hook(void)
{
    if (active != NULL)
        mxb_daemon_stop(active);
}

static void install_hooks(void)
{
    if (hooks_installed)
        return;
    hooks_installed = 1;
    atexit(on_exit_hook);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* Remembers a path to remove at the end (directories before their parents: in reverse). */
static void track_file(const char *path)
{
    if (n_files < MAX_FILES)
        snprintf(files[n_files++], sizeof(files[0]), "%s", path);
}

static int copy_file(const char *src, const char *dst, char *err, size_t errlen)
{
    int rc = -1;
    char buf[65536];
    ssize_t n;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        snprintf(err, errlen, "cannot open %s: %s", src, strerror(errno));
        return -1;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (out < 0) {
        snprintf(err, errlen, "cannot create %s: %s", dst, strerror(errno));
        goto out_in;
    }
    track_file(dst);
    while ((n = read(in, buf, sizeof(buf))) > 0) {
        if (write(out, buf, (size_t)n) != n) {
            snprintf(err, errlen, "cannot write %s: %s", dst, strerror(errno));
            goto out_out;
        }
    }
    if (n < 0) {
        snprintf(err, errlen, "cannot read %s: %s", src, strerror(errno));
        goto out_out;
    }
    rc = 0;
out_out:
    close(out);
out_in:
    close(in);
    return rc;
}

/* Copies (not links: the daemon refuses links out of its directory) every .so of `from`. */
static int copy_plugins(const char *from, const char *to, const char *only, char *err,
                        size_t errlen)
{
    DIR *dir = opendir(from);
    if (dir == NULL) {
        snprintf(err, errlen, "cannot list %s: %s (run make first)", from, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0)
            continue;
        if (only != NULL && strcmp(e->d_name, only) != 0)
            continue;
        char src[512], dst[512];
        snprintf(src, sizeof(src), "%s/%s", from, e->d_name);
        snprintf(dst, sizeof(dst), "%s/%s", to, e->d_name);
        rc = copy_file(src, dst, err, errlen);
    }
    closedir(dir);
    return rc;
}

const char *mxb_daemon_plugin(const mxb_daemon_t *d, const char *lib, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", d->plugins, lib);
    return buf;
}

int mxb_daemon_start(mxb_daemon_t *d, const char *build, char *err, size_t errlen)
{
    char path[512], daemon[512];
    memset(d, 0, sizeof(*d));
    install_hooks();

    snprintf(daemon, sizeof(daemon), "%s/bin/mxop-serverd", build);
    if (access(daemon, X_OK) != 0) {
        snprintf(err, errlen, "%s: %s (run make first)", daemon, strerror(errno));
        return -1;
    }
    snprintf(d->dir, sizeof(d->dir), "/tmp/mxop-bench-XXXXXX");
    if (mkdtemp(d->dir) == NULL) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    active = d;
    track_file(d->dir);
    snprintf(d->sock, sizeof(d->sock), "%s/mxop.sock", d->dir);
    snprintf(d->plugins, sizeof(d->plugins), "%s/plugins", d->dir);
    if (mkdir(d->plugins, 0700) != 0) {
        snprintf(err, errlen, "mkdir %s: %s", d->plugins, strerror(errno));
        goto err_files;
    }
    track_file(d->plugins);
    snprintf(path, sizeof(path), "%s/plugins", build);
    if (copy_plugins(path, d->plugins, NULL, err, errlen) != 0)
        goto err_files;
    snprintf(path, sizeof(path), "%s/tests/plugins", build);
    if (copy_plugins(path, d->plugins, "crash.so", err, errlen) != 0)
        goto err_files;

    /*
     * The libraries of sections 1 to 7 are trusted (--trusted-library), so
     * those rows measure the zero-copy path as before; section 8 measures the
     * scratch mode of a session that loads an untrusted library too
     * (sum_n.so, never called).
     */
    const char *argv[] = {daemon,       "--socket",
                          d->sock,      "--plugin-dir",
                          d->plugins,   "--log-level",
                          "error",      "--trusted-library",
                          "noop.so",    "--trusted-library",
                          "relu.so",    "--trusted-library",
                          "gemm.so",    "--trusted-library",
                          "crash.so",   "--trusted-library",
                          "softmax.so", NULL};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto err_files;
    }
    if (pid == 0) {
        /* The daemon ends (cleanly, by SIGTERM) when the benchmark dies. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        execv(daemon, (char *const *)argv);
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 1000; i++) {
        if (access(d->sock, F_OK) == 0)
            return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            d->pid = 0;
            snprintf(err, errlen, "mxop-serverd exited at start (status 0x%x)", status);
            goto err_files;
        }
        sleep_ms(5);
    }
    snprintf(err, errlen, "mxop-serverd did not create %s within 5 s", d->sock);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    d->pid = 0;
err_files:
    remove_files();
    active = NULL;
    return -1;
}

void mxb_daemon_stop(mxb_daemon_t *d)
{
    kill_all(SIGTERM);
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0) {
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
    if (d->pid > 0) {
        int status = 0;
        pid_t r = 0;
        for (int i = 0; i < 1000 && r != d->pid; i++) {
            r = waitpid(d->pid, &status, WNOHANG);
            if (r != d->pid)
                sleep_ms(10);
        }
        if (r != d->pid) {
            fprintf(stderr, "bench: mxop-serverd did not stop within 10 s of SIGTERM; killed\n");
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &status, 0);
        }
        d->pid = 0;
    }
    if (d->sock[0])
        unlink(d->sock);
    remove_files();
    if (active == d)
        active = NULL;
}
