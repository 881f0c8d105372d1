/*
 * common/daemon_launch.c - a private mxop-serverd: see daemon_launch.h.
 */
#include "common/daemon_launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"

extern char **environ;

#define DEFAULT_READY_MS 5000
/* Deeper trees than this under the private directory are left (none is made). */
#define REMOVE_DEPTH 8

/*
 * The daemons started and not yet removed, for the exit and signal
 * clean-ups.  Fixed storage, so that a signal handler can walk it without
 * allocating; each entry is checked against its owner, so that a forked
 * child (which inherits the table and the atexit handler) leaves its
 * parent's daemons alone.
 */
static mxop__launch_t *volatile live[32];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static int atexit_done;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void at_exit(void);

static int track(mxop__launch_t *d)
{
    int rc = -1;
    pthread_mutex_lock(&live_lock);
    if (!atexit_done) {
        atexit(at_exit);
        atexit_done = 1;
    }
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        if (live[i] == NULL || live[i] == d) {
            live[i] = d;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return rc;
}

static void untrack(mxop__launch_t *d)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
        if (live[i] == d)
            live[i] = NULL;
    pthread_mutex_unlock(&live_lock);
}

/*
 * Removes `name` under the directory `parent` (a file, or a directory and
 * everything in it).  Raw getdents64 and unlinkat, no allocation: the signal
 * handler uses it.  Every name goes, not only the ones made here: a daemon
 * stopped while it started leaves its socket's temporary name.  Entries
 * removed while listing can make the listing skip others, hence the passes.
 */
static void remove_at(int parent, const char *name, int depth)
{
    if (unlinkat(parent, name, 0) == 0 || errno != EISDIR)
        return;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        char buf[2048] __attribute__((aligned(8)));
        for (int pass = 0; pass < 8; pass++) {
            int seen = 0;
            long n;
            lseek(fd, 0, SEEK_SET);
            while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
                for (long off = 0; off < n;) {
                    struct dirent64 *e = (struct dirent64 *)(void *)(buf + off);
                    off += e->d_reclen;
                    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                    seen = 1;
                    if (depth < REMOVE_DEPTH)
                        remove_at(fd, e->d_name, depth + 1);
                }
            }
            if (!seen)
                break;
        }
        close(fd);
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

static void remove_dir(const char *path)
{
    if (path[0] != '\0')
        remove_at(AT_FDCWD, path, 0);
}

/* Only async-signal-safe calls. */
void mxop__launch_cleanup_now(void)
{
    int saved = errno;
    pid_t me = getpid();
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        mxop__launch_t *d = live[i];
        if (d == NULL || d->owner != me)
            continue;
        live[i] = NULL;
        if (d->pid > 0) {
            kill(d->pid, SIGTERM);
            waitpid(d->pid, NULL, 0);
            d->pid = 0;
        }
        remove_dir(d->dir);
        d->dir[0] = '\0';
    }
    errno = saved;
}

static void on_fatal_signal(int sig)
{
    mxop__launch_cleanup_now();
    signal(sig, SIG_DFL);
    raise(sig);
}

void mxop__launch_cleanup_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* A daemon its owner never stopped (a test that ended early, an error path): stopped now. */
static void at_exit(void)
{
    pid_t me = getpid();
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        mxop__launch_t *d = live[i];
        if (d != NULL && d->owner == me) {
            int status;
            mxop__launch_close(d, 5000, &status);
        }
    }
}

static int copy_file(const char *src, const char *dst, char *err, size_t errlen)
{
    int rc = MXOP_EIO;
    char buf[65536];
    ssize_t n = 0;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        mxop__fmt(err, errlen, "cannot open %s: %s", src, strerror(errno));
        return MXOP_EIO;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (out < 0) {
        mxop__fmt(err, errlen, "cannot create %s: %s", dst, strerror(errno));
        goto out_in;
    }
    while ((n = read(in, buf, sizeof(buf))) > 0) {
        if (write(out, buf, (size_t)n) != n) {
            mxop__fmt(err, errlen, "cannot write %s: %s", dst, strerror(errno));
            goto out_out;
        }
    }
    if (n < 0) {
        mxop__fmt(err, errlen, "cannot read %s: %s", src, strerror(errno));
        goto out_out;
    }
    rc = 0;
out_out:
    if (close(out) != 0 && rc == 0) {
        mxop__fmt(err, errlen, "cannot write %s: %s", dst, strerror(errno));
        rc = MXOP_EIO;
    }
out_in:
    close(in);
    return rc;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* A file is copied under its own name; a directory gives every *.so in it. */
static int copy_plugin_source(const char *src, const char *to, char *err, size_t errlen)
{
    char dst[1024];
    struct stat st;
    if (stat(src, &st) != 0) {
        mxop__fmt(err, errlen, "plugin source %s: %s", src, strerror(errno));
        return MXOP_EIO;
    }
    if (!S_ISDIR(st.st_mode)) {
        mxop__fmt(dst, sizeof(dst), "%s/%s", to, base_name(src));
        return copy_file(src, dst, err, errlen);
    }
    DIR *dir = opendir(src);
    if (dir == NULL) {
        mxop__fmt(err, errlen, "cannot list %s: %s", src, strerror(errno));
        return MXOP_EIO;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0)
            continue;
        char from[1024];
        mxop__fmt(from, sizeof(from), "%s/%s", src, e->d_name);
        mxop__fmt(dst, sizeof(dst), "%s/%s", to, e->d_name);
        rc = copy_file(from, dst, err, errlen);
    }
    closedir(dir);
    return rc;
}

/* Whether something accepts connections at the socket path. */
static int socket_answers(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1); /* its length was checked at start */
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static void describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        mxop__fmt(buf, len, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        mxop__fmt(buf, len, "killed by %s", mxop__signal_name(WTERMSIG(status)));
    else
        mxop__fmt(buf, len, "wait status 0x%x", (unsigned)status);
}

/*
 * The last line the daemon wrote to its stderr file, into out ("" for none):
 * the reason it gives for exiting at start, which the caller's error must
 * carry, since the file goes with the private directory.
 */
static void last_line(const char *log, char *out, size_t len)
{
    out[0] = '\0';
    if (log[0] == '\0')
        return;
    int fd = open(log, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[512];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
    close(fd);
    if (n <= 0)
        return;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    char *start = strrchr(buf, '\n');
    mxop__fmt(out, len, "%s", start ? start + 1 : buf);
}

/*
 * The daemon's command line and environment, made before fork: the child
 * only calls async-signal-safe functions, as a child of a process with
 * other threads must.
 */
static int build_argv(const mxop__launch_t *d, const mxop__launch_opts_t *o, char ***argv_out,
                      char ***envp_out)
{
    size_t na = 0, ne = 0, nenv = 0;
    while (o->args != NULL && o->args[na] != NULL)
        na++;
    while (environ != NULL && environ[ne] != NULL)
        ne++;
    while (o->env != NULL && o->env[nenv] != NULL)
        nenv++;
    char **argv = calloc(na + 6, sizeof(*argv));
    char **envp = calloc(ne + nenv + 1, sizeof(*envp));
    if (argv == NULL || envp == NULL) {
        free(argv);
        free(envp);
        return MXOP_ENOMEM;
    }
    size_t n = 0;
    argv[n++] = (char *)o->serverd;
    argv[n++] = "--socket";
    argv[n++] = (char *)d->sock;
    argv[n++] = "--plugin-dir";
    argv[n++] = (char *)d->plugins;
    for (size_t i = 0; i < na; i++)
        argv[n++] = (char *)o->args[i];
    argv[n] = NULL;
    n = 0;
    for (size_t i = 0; i < ne; i++)
        envp[n++] = environ[i];
    for (size_t i = 0; i < nenv; i++) {
        const char *eq = strchr(o->env[i], '=');
        size_t klen = eq ? (size_t)(eq - o->env[i]) : strlen(o->env[i]);
        int present = 0;
        for (size_t j = 0; j < ne && !present; j++)
            present = strncmp(environ[j], o->env[i], klen) == 0 && environ[j][klen] == '=';
        if (!present && eq != NULL)
            envp[n++] = (char *)o->env[i];
    }
    envp[n] = NULL;
    *argv_out = argv;
    *envp_out = envp;
    return 0;
}

/* In the child: the parent's handlers are not the daemon's (exec would reset them too late). */
static void child_signals(const sigset_t *mask)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            signal(sigs[i], SIG_DFL);
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
}

/* A program named without a '/' is looked for on $PATH, as a shell would. */
static int find_program(const char *name, char *out, size_t len)
{
    if (strchr(name, '/') != NULL) {
        mxop__fmt(out, len, "%s", name);
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    while (path != NULL && *path != '\0') {
        size_t n = strcspn(path, ":");
        mxop__fmt(out, len, "%.*s/%s", (int)n, path, name);
        if (n > 0 && access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    mxop__fmt(out, len, "%s", name);
    errno = ENOENT;
    return -1;
}

static int spawn(mxop__launch_t *d, const mxop__launch_opts_t *opts, char *err, size_t errlen)
{
    char program[1024];
    if (find_program(opts->serverd, program, sizeof(program)) != 0) {
        mxop__fmt(err, errlen, "%s: %s", opts->serverd, strerror(errno));
        return MXOP_EIO;
    }
    mxop__launch_opts_t found = *opts;
    found.serverd = program;
    const mxop__launch_opts_t *o = &found;
    char **argv = NULL, **envp = NULL;
    if (build_argv(d, o, &argv, &envp) != 0) {
        mxop__fmt(err, errlen, "out of memory for mxop-serverd's command line");
        return MXOP_ENOMEM;
    }
    /*
     * The fatal signals wait until d->pid holds the child: a signal between
     * fork's return and that store would leave a clean-up handler without a
     * daemon to stop, and the daemon would make its files after it.
     */
    sigset_t fatal, was;
    sigemptyset(&fatal);
    sigaddset(&fatal, SIGINT);
    sigaddset(&fatal, SIGTERM);
    sigaddset(&fatal, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &fatal, &was);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        child_signals(&was);
        /* The daemon ends (cleanly, by SIGTERM) when its owner dies. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0 && nul != 0) {
            dup2(nul, 0);
            close(nul);
        }
        if (d->log[0] != '\0') {
            int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0) {
                dup2(fd, 2);
                close(fd);
            }
        }
        /*
         * Nothing of the owner's but stdout and stderr: a descriptor the
         * daemon inherited would keep what it names alive as long as the
         * daemon runs (MXNet keeps one open per cpu_shared array).
         */
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
            for (int fd = 3; fd < 65536; fd++)
                close(fd);
        execve(o->serverd, argv, envp);
        _exit(127);
    }
    int fork_errno = errno;
    d->pid = pid > 0 ? pid : 0;
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    free(argv);
    free(envp);
    if (pid < 0) {
        mxop__fmt(err, errlen, "fork: %s", strerror(fork_errno));
        return MXOP_EIO;
    }

    int ready_ms = o->ready_ms > 0 ? o->ready_ms : DEFAULT_READY_MS;
    for (int waited = 0; waited < ready_ms; waited += 10) {
        if (access(d->sock, F_OK) == 0 && socket_answers(d->sock))
            return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            char how[64];
            describe_status(status, how, sizeof(how));
            char said[256];
            last_line(d->log, said, sizeof(said));
            d->pid = 0;
            mxop__fmt(err, errlen, "mxop-serverd exited at start (%s)%s%s", how,
                      said[0] ? ": " : "", said);
            return MXOP_EINTERNAL;
        }
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    d->pid = 0;
    mxop__fmt(err, errlen, "mxop-serverd did not answer at %s within %d ms", d->sock, ready_ms);
    return MXOP_ETIMEOUT;
}

int mxop__launch_start(mxop__launch_t *d, const mxop__launch_opts_t *o, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    if (o->serverd == NULL || o->tmp_dir == NULL || o->prefix == NULL) {
        mxop__fmt(err, errlen, "a private daemon needs its program, a directory and a prefix");
        return MXOP_EINVAL;
    }
    /* The socket's path must fit a sockaddr_un: DIR/mxop.sock, DIR = TMP/PREFIX-XXXXXX. */
    size_t need = strlen(o->tmp_dir) + 1 + strlen(o->prefix) + 7 + sizeof("/mxop.sock");
    if (need > sizeof(((struct sockaddr_un *)0)->sun_path)) {
        mxop__fmt(err, errlen, "%s is too long a directory for a daemon's socket (%zu bytes)",
                  o->tmp_dir, need);
        return MXOP_EINVAL;
    }
    d->owner = getpid();
    mxop__fmt(d->dir, sizeof(d->dir), "%s/%s-XXXXXX", o->tmp_dir, o->prefix);
    /* Tracked before the directory exists, so that no signal finds it untracked. */
    if (track(d) != 0) {
        d->dir[0] = '\0';
        mxop__fmt(err, errlen, "too many private daemons in one process");
        return MXOP_ELIMIT;
    }
    if (mkdtemp(d->dir) == NULL) {
        mxop__fmt(err, errlen, "cannot make a private directory in %s: %s", o->tmp_dir,
                  strerror(errno));
        d->dir[0] = '\0';
        untrack(d);
        return MXOP_EIO;
    }
    mxop__fmt(d->sock, sizeof(d->sock), "%s/mxop.sock", d->dir);
    mxop__fmt(d->plugins, sizeof(d->plugins), "%s/plugins", d->dir);
    if (o->stderr_name != NULL)
        mxop__fmt(d->log, sizeof(d->log), "%s/%s", d->dir, o->stderr_name);
    int rc;
    if (mkdir(d->plugins, 0700) != 0) {
        mxop__fmt(err, errlen, "mkdir %s: %s", d->plugins, strerror(errno));
        rc = MXOP_EIO;
        goto err_dir;
    }
    for (size_t i = 0; o->plugins != NULL && o->plugins[i] != NULL; i++) {
        rc = copy_plugin_source(o->plugins[i], d->plugins, err, errlen);
        if (rc != 0)
            goto err_dir;
    }
    rc = spawn(d, o, err, errlen);
    if (rc != 0)
        goto err_dir;
    return 0;
err_dir:
    mxop__launch_remove(d);
    return rc;
}

int mxop__launch_restart(mxop__launch_t *d, const mxop__launch_opts_t *o, char *err, size_t errlen)
{
    if (d->pid != 0 || d->dir[0] == '\0' || o->serverd == NULL) {
        mxop__fmt(err, errlen, "a restart needs a stopped daemon's directory and the program");
        return MXOP_EINVAL;
    }
    if (o->stderr_name != NULL)
        mxop__fmt(d->log, sizeof(d->log), "%s/%s", d->dir, o->stderr_name);
    return spawn(d, o, err, errlen);
}

int mxop__launch_stop(mxop__launch_t *d, int timeout_ms, int *status)
{
    *status = 0;
    if (d->pid <= 0)
        return 0;
    kill(d->pid, SIGTERM);
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        pid_t r = waitpid(d->pid, status, WNOHANG);
        if (r == d->pid || (r < 0 && errno == ECHILD)) {
            /* ECHILD: reaped already (mxop__launch_alive saw it exit). */
            if (r < 0)
                *status = 0;
            d->pid = 0;
            return 0;
        }
        sleep_ms(10);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, status, 0);
    d->pid = 0;
    return 1;
}

void mxop__launch_kill(mxop__launch_t *d, int sig)
{
    if (d->pid > 0) {
        kill(d->pid, sig);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

int mxop__launch_alive(const mxop__launch_t *d)
{
    return d->pid > 0 && kill(d->pid, 0) == 0 && waitpid(d->pid, NULL, WNOHANG) == 0;
}

void mxop__launch_remove(mxop__launch_t *d)
{
    untrack(d);
    remove_dir(d->dir);
    d->dir[0] = '\0';
}

int mxop__launch_close(mxop__launch_t *d, int timeout_ms, int *status)
{
    int rc = mxop__launch_stop(d, timeout_ms, status);
    mxop__launch_remove(d);
    return rc;
}
