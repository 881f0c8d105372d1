/*
 * server/daemon/core/main.c - mxop-serverd: the loop, signals, shutdown (options: options.c).
 *
 * The daemon runs in the foreground and logs to stderr (a service manager
 * adds timestamps and keeps the log).  It is ready when its socket path
 * exists.  SIGTERM, SIGINT or a Shutdown request end it cleanly: no new
 * connections, the calls in flight given --drain-timeout-ms to finish
 * (drain.c), every worker's process group killed and reaped, every fd
 * closed, the socket file removed, exit status 0.  SIGHUP reads the
 * --config file again (config.c) and applies what can change at run time.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "mxop/errors.h"
#include "server/daemon/core/config.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/core/integrity.h"
#include "server/daemon/core/introspect.h"
#include "server/daemon/core/layers.h"
#include "server/daemon/core/handover.h"
#include "server/daemon/session/session.h"
#include "server/daemon/core/notify.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/core/options.h"

/*
 * The arguments the daemon started with (the file's and the command
 * line's; the cfg's strings point into them until exit; SIGHUP compares
 * with them), and the command line itself, which SIGHUP merges again.
 */
static mxop__cfgargs_t start_args;
static int run_argc;
static char **run_argv;

static void signal_cb(uv_signal_t *h, int signum)
{
    mxop__daemon_t *d = h->data;
    char why[32];
    mxop__fmt(why, sizeof(why), "%s", mxop__signal_name(signum));
    /* A second signal while draining (Ctrl-C twice) means: do not wait any longer. */
    if (d->draining) {
        MXOP__LOGW(0, NULL, "%s while draining: stopping now", why);
        mxop__daemon_stop(d, why);
        mxop__watchdog_stop(d);
        return;
    }
    if (mxop__drain_begin(d, why)) {
        mxop__daemon_stop(d, d->drain_why);
        mxop__watchdog_stop(d);
    }
}

static void sighup_cb(uv_signal_t *h, int signum)
{
    (void)signum;
    mxop__config_reload(h->data, &start_args, run_argc, run_argv, mxop__options_reparse);
}

static void sigusr1_cb(uv_signal_t *h, int signum)
{
    (void)h;
    (void)signum;
    char err[MXOP__MSG_MAX];
    if (mxop__log_reopen(err, sizeof(err)) != 0)
        MXOP__LOGW(0, NULL, "SIGUSR1: %s", err);
    else
        MXOP__LOGI(0, NULL, "SIGUSR1: log file reopened");
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int main(int argc, char **argv)
{
    /*
     * The stop signals wait until their handlers are in place: one that came
     * between the listener's bind and then would end the process with its
     * default action and leave the socket (or its temporary name) behind.
     * Held ones are delivered, to the handlers, when the mask is restored.
     */
    sigset_t stop_signals, start_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    sigaddset(&stop_signals, SIGUSR1);
    sigprocmask(SIG_BLOCK, &stop_signals, &start_mask);

    mxop__daemon_t d;
    memset(&d, 0, sizeof(d));
    d.listen_fd = -1;
    d.reserve_fd = -1;
    int level = MXOP__LOG_INFO;
    bool done;

    char cerr[MXOP__MSG_MAX + 256];
    if (mxop__config_merge(argc, argv, &start_args, cerr, sizeof(cerr)) != 0) {
        fprintf(stderr, "mxop-serverd: %s\n", cerr);
        return 2;
    }
    run_argc = argc;
    run_argv = argv;
    d.cfg.config_path = start_args.path;
    /* The first call fixes the default before the descriptor limit is raised below. */
    mxop__options_fix_defaults();
    int rc = mxop__options_parse(start_args.argc, start_args.argv, start_args.origin, &d.cfg,
                                 &level, &done);
    if (rc != 0 || done) {
        free(d.cfg.plugin_dir);
        free(d.cfg.worker_path);
        mxop__config_free(&start_args);
        return rc;
    }
    mxop__log_set_level(level);
    if (d.cfg.log_file != NULL && mxop__log_open_file(d.cfg.log_file, cerr, sizeof(cerr)) != 0) {
        fprintf(stderr, "mxop-serverd: %s\n", cerr);
        free(d.cfg.plugin_dir);
        free(d.cfg.worker_path);
        mxop__config_free(&start_args);
        return 2;
    }
    /*
     * Each region is a descriptor the daemon keeps (up to 4096 per session);
     * the usual soft limit of 1024 would run out long before that.
     */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            MXOP__LOGD(0, NULL, "cannot raise the descriptor limit: %s", strerror(errno));
    }
    /* A peer that hangs up must cost us an EPIPE, not the process. */
    signal(SIGPIPE, SIG_IGN);

    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        fputs("mxop-serverd: cannot initialise the event loop\n", stderr);
        rc = 1;
        goto out_cfg;
    }
    d.loop = &loop;
    d.euid = geteuid();
    d.pid = getpid();
    d.start_ns = mxop__now_ns();
    mxop__list_init(&d.clients);
    mxop__list_init(&d.workers);

    if (access(d.cfg.worker_path, X_OK) != 0)
        MXOP__LOGW(0, NULL, "worker %s is not executable (%s); sessions will fail until it is",
                   d.cfg.worker_path, strerror(errno));

    char err[MXOP__MSG_MAX];
    char workers_as[160];
    /* Before anything is spawned: the variables are removed, so workers never see them. */
    if (mxop__notify_init(err, sizeof(err)) != 0)
        MXOP__LOGW(0, NULL, "%s", err);
    if (mxop__workeruid_settle(&d.cfg, err, sizeof(err)) != 0) {
        MXOP__LOGE(0, NULL, "%s", err);
        rc = 2;
        goto out_loop;
    }
    mxop__workeruid_describe(&d.cfg, workers_as, sizeof(workers_as));
    if (mxop__layers_check(d.cfg.sandbox, workers_as, err, sizeof(err)) != 0) {
        MXOP__LOGE(0, NULL, "%s", err);
        rc = 2;
        goto out_loop;
    }
    /* Under --take-over the running daemon's socket; accepting starts at the commit. */
    if (mxop__listener_start(&d, err, sizeof(err)) != 0 ||
        (d.cfg.take_over && mxop__listener_adopt(&d, mxop__handover_receive(&d, err, sizeof(err)),
                                                 err, sizeof(err)) != 0)) {
        MXOP__LOGE(0, NULL, "%s", err);
        rc = 1;
        goto out_loop;
    }
    if (uv_signal_init(&loop, &d.sigterm) != 0 || uv_signal_init(&loop, &d.sigint) != 0 ||
        uv_signal_init(&loop, &d.sighup) != 0 || mxop__watchdog_start(&d) != 0) {
        MXOP__LOGE(0, NULL, "cannot set up signal handling and the watchdog");
        rc = 1;
        mxop__handover_stop(&d);
        mxop__listener_stop(&d);
        goto out_walk;
    }
    d.sigterm.data = &d;
    d.sigint.data = &d;
    if (mxop__metrics_start(&d) != 0) {
        MXOP__LOGE(0, NULL, "cannot start the metrics file's timer");
        rc = 1;
        mxop__handover_stop(&d);
        mxop__listener_stop(&d);
        goto out_walk;
    }
    d.sighup.data = &d;
    uv_signal_start(&d.sigterm, signal_cb, SIGTERM);
    uv_signal_start(&d.sigint, signal_cb, SIGINT);
    uv_signal_start(&d.sighup, sighup_cb, SIGHUP);
    if (uv_signal_init(&loop, &d.sigusr1) == 0)
        uv_signal_start(&d.sigusr1, sigusr1_cb, SIGUSR1);
    sigprocmask(SIG_SETMASK, &start_mask, NULL);

    if (d.cfg.take_over) {
        /* The last check before the old daemon stops accepting: a worker that cannot run
         * would make this one useless, so the old one goes on instead (the rollback). */
        if (access(d.cfg.worker_path, X_OK) != 0) {
            MXOP__LOGE(0, NULL,
                       "--take-over: worker %s is not executable (%s); the running "
                       "daemon keeps serving",
                       d.cfg.worker_path, strerror(errno));
            rc = 1;
            mxop__handover_stop(&d);
            mxop__listener_stop(&d);
            goto out_walk;
        }
        mxop__handover_commit(&d, err, sizeof(err));
        mxop__listener_resume(&d);
    }
    mxop__accept_start(&d);
    if (!d.sock_activated && mxop__handover_listen(&d, err, sizeof(err)) != 0)
        MXOP__LOGW(0, NULL, "upgrades by --take-over are off: %s", err);

    MXOP__LOGI(0, NULL, "mxop-serverd %s listening on %s (plugins %s, worker %s)",
               MXOP_VERSION_STRING, d.cfg.socket_path, d.cfg.plugin_dir, d.cfg.worker_path);
    MXOP__LOGI(0, NULL, "workers: sandbox %s, %llu MiB for ops, %llu descriptors, as %s, %s spare",
               d.cfg.sandbox, (unsigned long long)d.cfg.worker_memory_mb,
               (unsigned long long)d.cfg.worker_max_fds, workers_as,
               d.cfg.warm_spare ? "a warm" : "no");
    /* The socket accepts and the handlers are in place: a Type=notify unit is started. */
    char ready[96];
    mxop__fmt(ready, sizeof(ready), "READY=1\nMAINPID=%d\nSTATUS=serving %s", (int)d.pid,
              d.cfg.socket_path);
    mxop__notify(ready);
    if (mxop__notify_watchdog_usec() > 0)
        MXOP__LOGI(0, NULL, "service manager's watchdog: pinging every %llu ms",
                   (unsigned long long)(mxop__notify_watchdog_usec() / 2000));
    uv_run(&loop, UV_RUN_DEFAULT);

    if (!mxop__list_empty(&d.workers)) {
        /* The guard fired: something would not die.  Leave without waiting for it. */
        rc = 1;
        goto out_cfg;
    }
    rc = 0;

out_walk:
    uv_walk(&loop, close_walk_cb, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
out_loop:
    if (uv_loop_close(&loop) != 0) {
        MXOP__LOGE(0, NULL, "event loop still has open handles at exit");
        rc = 1;
    } else if (rc == 0) {
        MXOP__LOGI(0, NULL, "stopped");
    }
out_cfg:
    mxop__notify_close();
    mxop__quarantine_free(&d);
    mxop__lease_pages_free(&d.leases);
    mxop__reload_free(&d);
    free(d.cfg.plugin_dir);
    free(d.cfg.worker_path);
    mxop__config_free(&start_args);
    return rc;
}
