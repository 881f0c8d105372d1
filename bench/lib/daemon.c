/*
 * bench/lib/daemon.c - see daemon.h.
 */
#include "bench/lib/daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CHILDREN 16

/* What the exit and signal paths must end: fixed storage, so that a signal
 * handler can reach it without allocating. */
static mxb_daemon_t *active;
static volatile pid_t children[MAX_CHILDREN];
static int hooks_installed;

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
static void kill_children(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
}

static void on_signal(int sig)
{
    kill_children();
    mxop__launch_cleanup_now();
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

const char *mxb_daemon_plugin(const mxb_daemon_t *d, const char *lib, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", d->plugins, lib);
    return buf;
}

int mxb_daemon_start(mxb_daemon_t *d, const char *build, char *err, size_t errlen)
{
    char daemon[512], plugins[512], crash[512];
    install_hooks();
    snprintf(daemon, sizeof(daemon), "%s/bin/mxop-serverd", build);
    if (access(daemon, X_OK) != 0) {
        snprintf(err, errlen, "%s: %s (run make first)", daemon, strerror(errno));
        return -1;
    }
    snprintf(plugins, sizeof(plugins), "%s/plugins", build);
    snprintf(crash, sizeof(crash), "%s/tests/plugins/crash.so", build);
    const char *sources[] = {plugins, crash, NULL};
    /*
     * The libraries of sections 1 to 7 are trusted (--trusted-library), so
     * those rows measure the zero-copy path as before; section 8 measures the
     * scratch mode of a session that loads an untrusted library too
     * (sum_n.so, never called).
     */
    const char *args[] = {"--log-level",
                          "error",
                          "--trusted-library",
                          "noop.so",
                          "--trusted-library",
                          "relu.so",
                          "--trusted-library",
                          "gemm.so",
                          "--trusted-library",
                          "crash.so",
                          "--trusted-library",
                          "softmax.so",
                          NULL};
    mxop__launch_opts_t o = {.serverd = daemon,
                             .tmp_dir = "/tmp",
                             .prefix = "mxop-bench",
                             .plugins = sources,
                             .args = args,
                             .ready_ms = 5000};
    if (mxop__launch_start(d, &o, err, errlen) != 0)
        return -1;
    active = d;
    return 0;
}

void mxb_daemon_stop(mxb_daemon_t *d)
{
    kill_children();
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0) {
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
    int status;
    if (mxop__launch_close(d, 10000, &status) == 1)
        fprintf(stderr, "bench: mxop-serverd did not stop within 10 s of SIGTERM; killed\n");
    if (active == d)
        active = NULL;
}
