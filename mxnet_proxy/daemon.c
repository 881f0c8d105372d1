/*
 * mxnet_proxy/daemon.c - the proxy's configuration, its daemon and client.
 *
 * Configuration (docs/mxnet.md, "MXNet calling mxop"):
 *   MXOP_MXNET_LIBS    libraries to load, separated by ':' or ','
 *   MXOP_MXNET_CONFIG  a file of "key value" lines (# comments): library
 *                      (one per line, after those of MXOP_MXNET_LIBS),
 *                      socket, prefix, timeout_ms
 *   MXOP_SOCKET        a running daemon: the libraries are names in its
 *                      plugin directory.  Unset: a private daemon is
 *                      started, its plugin directory a private copy of the
 *                      library files named (paths)
 *   MXOP_MXNET_PREFIX  put before every op name in MXNet (default none)
 *   MXOP_MXNET_TIMEOUT_MS  the calls' deadline (default libmxop's)
 *   MXOP_SERVERD, MXOP_WORKER  the private daemon's programs
 * The environment wins over the file.
 *
 * The private daemon (common/daemon_launch.h) is the proxy's child in a
 * directory of its own; it ends with the process however that ends, and at
 * exit (or when the library is unloaded) it is stopped and its directory
 * removed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
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

#include "common/daemon_launch.h"
#include "mxnet_proxy/proxy.h"

enum { MAX_LIBS = 64 };

static struct {
    char *libs[MAX_LIBS];
    int n_libs;
    char socket[PATH_MAX];
    char prefix[64];
    int timeout_ms;
} cfg;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static mxop_client_t *client;
static mxop__launch_t private_daemon; /* private_daemon.pid 0 when none */

const char *mxop__px_config_prefix(void)
{
    return cfg.prefix;
}

/* ------------------------------------------------------------------------ */
/* Configuration */

static int add_lib(const char *name, size_t len)
{
    if (len == 0)
        return 0;
    if (cfg.n_libs == MAX_LIBS)
        return mxop__px_fail("mxop proxy: more than %d libraries configured", MAX_LIBS), -1;
    cfg.libs[cfg.n_libs] = strndup(name, len);
    if (cfg.libs[cfg.n_libs] == NULL)
        return mxop__px_fail("mxop proxy: out of memory"), -1;
    cfg.n_libs++;
    return 0;
}

static int add_lib_list(const char *list)
{
    while (list != NULL && *list != '\0') {
        size_t len = strcspn(list, ":,");
        if (add_lib(list, len) != 0)
            return -1;
        list += len;
        if (*list != '\0')
            list++;
    }
    return 0;
}

static int set_timeout(const char *v, const char *where)
{
    char *end = NULL;
    long t = strtol(v, &end, 10);
    if (end == v || *end != '\0' || t <= 0 || t > INT32_MAX)
        return mxop__px_fail("mxop proxy: %s: timeout_ms '%s' is not a positive number", where, v),
               -1;
    cfg.timeout_ms = (int)t;
    return 0;
}

static int read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return mxop__px_fail("mxop proxy: MXOP_MXNET_CONFIG '%s' cannot be read: %s", path,
                             strerror(errno)),
               -1;
    char line[PATH_MAX + 64];
    int n = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        n++;
        line[strcspn(line, "#\r\n")] = '\0';
        char *key = line + strspn(line, " \t");
        if (*key == '\0')
            continue;
        char *val = key + strcspn(key, " \t");
        if (*val != '\0')
            *val++ = '\0';
        val += strspn(val, " \t");
        size_t vl = strlen(val);
        while (vl > 0 && (val[vl - 1] == ' ' || val[vl - 1] == '\t'))
            val[--vl] = '\0';
        char where[PATH_MAX + 32];
        snprintf(where, sizeof(where), "%s line %d", path, n);
        if (strcmp(key, "library") == 0 && vl > 0)
            rc = add_lib(val, vl);
        else if (strcmp(key, "socket") == 0 && vl > 0 && cfg.socket[0] == '\0')
            snprintf(cfg.socket, sizeof(cfg.socket), "%s", val);
        else if (strcmp(key, "prefix") == 0 && cfg.prefix[0] == '\0')
            snprintf(cfg.prefix, sizeof(cfg.prefix), "%s", val);
        else if (strcmp(key, "timeout_ms") == 0)
            rc = cfg.timeout_ms ? 0 : set_timeout(val, where);
        else if (strcmp(key, "library") != 0 && strcmp(key, "socket") != 0 &&
                 strcmp(key, "prefix") != 0)
            rc = (mxop__px_fail("mxop proxy: %s: unknown key '%s' (library, socket, prefix, "
                                "timeout_ms)",
                                where, key),
                  -1);
    }
    fclose(f);
    return rc;
}

static int read_config(void)
{
    const char *v;
    if ((v = getenv("MXOP_SOCKET")) != NULL && *v != '\0')
        snprintf(cfg.socket, sizeof(cfg.socket), "%s", v);
    if ((v = getenv("MXOP_MXNET_PREFIX")) != NULL)
        snprintf(cfg.prefix, sizeof(cfg.prefix), "%s", v);
    if ((v = getenv("MXOP_MXNET_TIMEOUT_MS")) != NULL && *v != '\0' &&
        set_timeout(v, "MXOP_MXNET_TIMEOUT_MS") != 0)
        return -1;
    if (add_lib_list(getenv("MXOP_MXNET_LIBS")) != 0)
        return -1;
    if ((v = getenv("MXOP_MXNET_CONFIG")) != NULL && *v != '\0' && read_file(v) != 0)
        return -1;
    if (cfg.n_libs == 0)
        return mxop__px_fail("mxop proxy: no op library configured: set MXOP_MXNET_LIBS (e.g. "
                             "relu.so:gemm.so) or a 'library' line in MXOP_MXNET_CONFIG"),
               -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The private daemon */

/* mxop-serverd: $MXOP_SERVERD, else beside this library (../bin/, the build tree's and PREFIX's
 * layout). */
static void serverd_path(char *out, size_t len)
{
    const char *env = getenv("MXOP_SERVERD");
    if (env != NULL && *env != '\0') {
        snprintf(out, len, "%s", env);
        return;
    }
    Dl_info info;
    if (dladdr((void *)serverd_path, &info) != 0 && info.dli_fname != NULL) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", info.dli_fname);
        snprintf(out, len, "%s/../bin/mxop-serverd", dirname(tmp));
        if (access(out, X_OK) == 0)
            return;
    }
    snprintf(out, len, "mxop-serverd"); /* on PATH */
}

static int start_private(void)
{
    /* The daemon loads from its plugin directory only: each library named is copied there. */
    for (int i = 0; i < cfg.n_libs; i++)
        if (access(cfg.libs[i], R_OK) != 0)
            return mxop__px_fail(
                       "mxop proxy: library '%s' cannot be read (%s); without MXOP_SOCKET "
                       "each library is a file path",
                       cfg.libs[i], strerror(errno)),
                   -1;
    char serverd[PATH_MAX];
    serverd_path(serverd, sizeof(serverd));
    const char *level = getenv("MXOP_LOG_LEVEL");
    const char *worker = getenv("MXOP_WORKER");
    const char *args[6];
    int a = 0;
    args[a++] = "--log-level";
    args[a++] = level != NULL && *level != '\0' ? level : "warn";
    if (worker != NULL && *worker != '\0') {
        args[a++] = "--worker";
        args[a++] = worker;
    }
    args[a] = NULL;
    const char *sources[MAX_LIBS + 1];
    for (int i = 0; i < cfg.n_libs; i++)
        sources[i] = cfg.libs[i];
    sources[cfg.n_libs] = NULL;
    mxop__launch_opts_t o = {.serverd = serverd,
                             .tmp_dir = "/tmp",
                             .prefix = "mxop-mxnet",
                             .plugins = sources,
                             .args = args,
                             .ready_ms = 10000};
    char err[1024];
    if (mxop__launch_start(&private_daemon, &o, err, sizeof(err)) != 0)
        return mxop__px_fail("mxop proxy: the private daemon: %s (set MXOP_SERVERD, or "
                             "MXOP_SOCKET for a running daemon)",
                             err),
               -1;
    snprintf(cfg.socket, sizeof(cfg.socket), "%s", private_daemon.sock);
    return 0;
}

/* It ends its workers first; 5 s, then it is killed. */
static void stop_private(void)
{
    int status;
    mxop__launch_close(&private_daemon, 5000, &status);
}

/* Closes session c (if any), then stops the private daemon and forgets the
 * configuration; the caller holds the lock. */
static void teardown(mxop_client_t *c)
{
    if (c != NULL)
        mxop_close(c);
    stop_private();
    for (int i = 0; i < cfg.n_libs; i++)
        free(cfg.libs[i]);
    memset(&cfg, 0, sizeof(cfg));
}

/* At exit (or when the library is unloaded): the session, then the private daemon. */
void mxop__px_client_stop(void)
{
    pthread_mutex_lock(&lock);
    mxop_client_t *c = client;
    client = NULL;
    teardown(c);
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------------ */
/* The client */

mxop_client_t *mxop__px_client_start(void)
{
    pthread_mutex_lock(&lock);
    if (client != NULL) {
        pthread_mutex_unlock(&lock);
        return client;
    }
    mxop_client_t *c = NULL;
    if (read_config() != 0)
        goto fail;
    if (cfg.socket[0] == '\0' && start_private() != 0)
        goto fail;
    mxop_connect_opts_t o;
    memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
    o.timeout_ms = cfg.timeout_ms;
    o.client_name = "mxnet-proxy";
    int rc = mxop_connect(cfg.socket, &o, &c);
    if (rc != 0) {
        mxop__px_fail("mxop proxy: cannot connect to the daemon at %s: %s (%s)", cfg.socket,
                      mxop_connect_error(), mxop_err_name(rc));
        goto fail;
    }
    for (int i = 0; i < cfg.n_libs; i++) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", cfg.libs[i]);
        const char *name = private_daemon.pid > 0 ? basename(tmp) : cfg.libs[i];
        rc = mxop_load_library(c, name);
        if (rc != 0) {
            mxop__px_fail("mxop proxy: library '%s' did not load: %s (%s)", cfg.libs[i],
                          mxop_last_error(c), mxop_err_name(rc));
            goto fail;
        }
    }
    client = c;
    static int registered;
    if (!registered++)
        atexit(mxop__px_client_stop);
    pthread_mutex_unlock(&lock);
    return c;
fail:
    teardown(c);
    pthread_mutex_unlock(&lock);
    return NULL;
}

mxop_client_t *mxop__px_client_lock(void)
{
    pthread_mutex_lock(&lock);
    if (client == NULL) {
        pthread_mutex_unlock(&lock);
        mxop__px_fail("mxop proxy: not connected (the library failed to initialise, or the process "
                      "is exiting)");
        return NULL;
    }
    return client;
}

void mxop__px_client_unlock(void)
{
    pthread_mutex_unlock(&lock);
}
