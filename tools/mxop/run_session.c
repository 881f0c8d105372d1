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
    /* An interrupted run leaves nothing behind: the handlers stop the daemon first. */
    mxop__launch_cleanup_on_signals();
    snprintf(d->library, sizeof(d->library), "%s", basename(path));
    const char *worker = getenv("MXOP_WORKER");
    const char *args[8] = {"--log-level", "warn"};
    int n = 2;
    if (worker && *worker) {
        args[n++] = "--worker";
        args[n++] = worker;
    }
    if (trust) {
        args[n++] = "--trusted-library";
        args[n++] = d->library;
    }
    args[n] = NULL;
    const char *sources[] = {path, NULL};
    mxop__launch_opts_t o = {.serverd = serverd,
                             .tmp_dir = tmp,
                             .prefix = "mxop-run",
                             .plugins = sources,
                             .args = args,
                             .stderr_name = "daemon.log",
                             .ready_ms = 20000}; /* generous on a loaded machine */
    if (mxop__launch_start(&d->proc, &o, err, errlen) != 0)
        return -1;
    snprintf(d->socket, sizeof(d->socket), "%s", d->proc.sock);
    return 0;
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
    return start_private(d, lib, trust, err, errlen);
}

void mxop__run_daemon_close(mxop__run_daemon_t *d)
{
    if (d->proc.dir[0] == '\0')
        return;
    int status;
    /* 10 s for a clean stop, then SIGKILL: never leave it running. */
    mxop__launch_close(&d->proc, 10000, &status);
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
