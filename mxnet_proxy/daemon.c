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
 * The private daemon is the proxy's child in a directory of its own; it is
 * started with PR_SET_PDEATHSIG, so it ends with the process however that
 * ends, and at exit it is stopped and its directory removed.
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
static pid_t daemon_pid = -1;
static char private_dir[64]; /* /tmp/mxop-mxnet-XXXXXX */

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

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in < 0)
        return -1;
    out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (out < 0)
        goto done;
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            goto done;
    rc = n == 0 ? 0 : -1;
done:
    if (out >= 0)
        close(out);
    close(in);
    return rc;
}

/* Removes the private directory: its plugin copies, then the directories (the daemon removes its
 * socket). */
static void remove_private_dir(void)
{
    if (private_dir[0] == '\0')
        return;
    char p[PATH_MAX + 300];
    for (int i = 0; i < cfg.n_libs; i++) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", cfg.libs[i]);
        snprintf(p, sizeof(p), "%s/plugins/%s", private_dir, basename(tmp));
        unlink(p);
    }
    snprintf(p, sizeof(p), "%s/plugins", private_dir);
    rmdir(p);
    snprintf(p, sizeof(p), "%s/mxop.sock", private_dir);
    unlink(p);
    rmdir(private_dir);
    private_dir[0] = '\0';
}

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
    snprintf(private_dir, sizeof(private_dir), "/tmp/mxop-mxnet-XXXXXX");
    if (mkdtemp(private_dir) == NULL) {
        private_dir[0] = '\0';
        return mxop__px_fail("mxop proxy: cannot make a private directory in /tmp: %s",
                             strerror(errno)),
               -1;
    }
    char plugins[sizeof(private_dir) + 16];
    snprintf(plugins, sizeof(plugins), "%s/plugins", private_dir);
    if (mkdir(plugins, 0700) != 0)
        return mxop__px_fail("mxop proxy: cannot make %s: %s", plugins, strerror(errno)), -1;
    /* The daemon loads from its plugin directory only: each library named is copied there. */
    for (int i = 0; i < cfg.n_libs; i++) {
        char tmp[PATH_MAX], to[PATH_MAX + 300];
        snprintf(tmp, sizeof(tmp), "%s", cfg.libs[i]);
        snprintf(to, sizeof(to), "%s/%s", plugins, basename(tmp));
        if (copy_file(cfg.libs[i], to) != 0)
            return mxop__px_fail(
                       "mxop proxy: library '%s' cannot be read (%s); without MXOP_SOCKET "
                       "each library is a file path",
                       cfg.libs[i], strerror(errno)),
                   -1;
    }
    snprintf(cfg.socket, sizeof(cfg.socket), "%s/mxop.sock", private_dir);
    char serverd[PATH_MAX];
    serverd_path(serverd, sizeof(serverd));
    const char *level = getenv("MXOP_LOG_LEVEL");
    const char *worker = getenv("MXOP_WORKER");
    const char *argv[12];
    int a = 0;
    argv[a++] = serverd;
    argv[a++] = "--socket";
    argv[a++] = cfg.socket;
    argv[a++] = "--plugin-dir";
    argv[a++] = plugins;
    argv[a++] = "--log-level";
    argv[a++] = level != NULL && *level != '\0' ? level : "warn";
    if (worker != NULL && *worker != '\0') {
        argv[a++] = "--worker";
        argv[a++] = worker;
    }
    argv[a] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return mxop__px_fail("mxop proxy: fork: %s", strerror(errno)), -1;
    if (pid == 0) {
        /* The daemon ends with this process, however it ends. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        /*
         * Nothing of the engine's but stdout and stderr: MXNet keeps a
         * descriptor open per cpu_shared array, which would keep its memory
         * alive in the daemon.
         */
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
            for (int fd = 3; fd < 65536; fd++)
                close(fd);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    daemon_pid = pid;
    /* Wait for its socket (10 s), or for it to fail. */
    for (int i = 0; i < 2000; i++) {
        struct stat st;
        if (stat(cfg.socket, &st) == 0)
            return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            daemon_pid = -1;
            return mxop__px_fail("mxop proxy: the private daemon (%s) exited at start with status "
                                 "%d (set MXOP_SERVERD, or MXOP_SOCKET for a running daemon)",
                                 serverd,
                                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)),
                   -1;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return mxop__px_fail("mxop proxy: the private daemon (%s) made no socket within 10 s", serverd),
           -1;
}

static void stop_private(void)
{
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        int status;
        /* It ends its workers first; 5 s, then it is killed. */
        for (int i = 0; i < 500 && waitpid(daemon_pid, &status, WNOHANG) == 0; i++) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
        if (waitpid(daemon_pid, &status, WNOHANG) == 0) {
            kill(daemon_pid, SIGKILL);
            waitpid(daemon_pid, &status, 0);
        }
        daemon_pid = -1;
    }
    remove_private_dir();
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
        const char *name = daemon_pid > 0 ? basename(tmp) : cfg.libs[i];
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
