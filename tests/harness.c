/*
 * tests/harness.c - see harness.h.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MXOP_TEST_BUILD_DIR
#define MXOP_TEST_BUILD_DIR "build"
#endif

const char *mxt_build_dir(void)
{
    const char *env = getenv("MXOP_BUILD_DIR");
    return env && *env ? env : MXOP_TEST_BUILD_DIR;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    cr_assert(in >= 0, "cannot open %s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    cr_assert(out >= 0, "cannot create %s: %s", dst, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        cr_assert(write(out, buf, (size_t)n) == n);
    close(in);
    close(out);
}

/* Copies every .so of `from` into `to` (copies, not links: links out of the
 * plugin directory are refused by the daemon, which is one of the tests). */
static void copy_plugins(const char *from, const char *to)
{
    DIR *dir = opendir(from);
    if (dir == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0)
            continue;
        char src[512], dst[512];
        snprintf(src, sizeof(src), "%s/%s", from, e->d_name);
        snprintf(dst, sizeof(dst), "%s/%s", to, e->d_name);
        copy_file(src, dst);
    }
    closedir(dir);
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
    size_t n = strlen(path);
    if (n >= sizeof(sa.sun_path)) {
        close(fd);
        return 1; /* too long to test this way: take the file's presence */
    }
    memcpy(sa.sun_path, path, n + 1);
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static void exec_daemon(mxt_daemon_t *d, const char *const *extra_args);

/*
 * Daemons still running when the test process exits: a test that ends early
 * (cr_skip_test, a failed assertion) never reaches its .fini, so its daemon
 * would outlive it and its directory would stay behind.
 */
static mxt_daemon_t *live[16];
static pid_t live_owner; /* forked children inherit the list, not the daemons */

static void remove_tree(const char *path);

static void stop_leftovers(void)
{
    if (getpid() != live_owner)
        return;
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        mxt_daemon_t *d = live[i];
        if (d == NULL)
            continue;
        live[i] = NULL;
        if (d->pid > 0) {
            kill(d->pid, SIGTERM);
            int waited = 0;
            while (waitpid(d->pid, NULL, WNOHANG) == 0 && waited++ < 500) {
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
            }
            if (waited > 500) {
                kill(d->pid, SIGKILL);
                waitpid(d->pid, NULL, 0);
            }
            d->pid = 0;
        }
        if (d->dir[0])
            remove_tree(d->dir);
        d->dir[0] = '\0';
    }
}

static void track(mxt_daemon_t *d, int on)
{
    static int registered;
    if (!registered) {
        live_owner = getpid();
        atexit(stop_leftovers);
        registered = 1;
    }
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        if (on && live[i] == NULL) {
            live[i] = d;
            return;
        }
        if (!on && live[i] == d) {
            live[i] = NULL;
            return;
        }
    }
}

void mxt_daemon_start(mxt_daemon_t *d, const char *const *extra_args)
{
    memset(d, 0, sizeof(*d));
    /* $TMPDIR when set, so that a run can be given a directory of its own and checked for
     * leftovers. */
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] != '/' || strlen(tmp) > 40)
        tmp = "/tmp";
    snprintf(d->dir, sizeof(d->dir), "%s/mxop-test-XXXXXX", tmp);
    cr_assert(mkdtemp(d->dir) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(d->sock, sizeof(d->sock), "%s/mxop.sock", d->dir);
    snprintf(d->plugins, sizeof(d->plugins), "%s/plugins", d->dir);
    cr_assert(mkdir(d->plugins, 0700) == 0);

    char path[512];
    snprintf(path, sizeof(path), "%s/plugins", mxt_build_dir());
    copy_plugins(path, d->plugins);
    snprintf(path, sizeof(path), "%s/tests/plugins", mxt_build_dir());
    copy_plugins(path, d->plugins);
    exec_daemon(d, extra_args);
}

void mxt_daemon_restart(mxt_daemon_t *d, const char *const *extra_args)
{
    cr_assert(d->pid == 0, "mxt_daemon_restart: the daemon still runs");
    cr_assert(d->dir[0] != '\0', "mxt_daemon_restart: no directory");
    exec_daemon(d, extra_args);
}

static void exec_daemon(mxt_daemon_t *d, const char *const *extra_args)
{
    char daemon[512];
    snprintf(daemon, sizeof(daemon), "%s/bin/mxop-serverd", mxt_build_dir());
    const char *argv[32] = {daemon,
                            "--socket",
                            d->sock,
                            "--plugin-dir",
                            d->plugins,
                            "--log-level",
                            getenv("MXOP_TEST_LOG") ? "debug" : "warn"};
    int argc = 7;
    for (int i = 0; extra_args != NULL && extra_args[i] != NULL && argc < 31; i++)
        argv[argc++] = extra_args[i];
    argv[argc] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* The daemon ends (cleanly, by SIGTERM) when the test process dies. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        /*
         * Crash fixtures must die by their signal, not by a sanitizer's report:
         * an error ASan finds (a double free) aborts, and an allocation over the
         * sandbox's memory limit returns NULL as it would without ASan.
         */
        setenv("ASAN_OPTIONS",
               "handle_segv=0:handle_sigbus=0:handle_abort=0:detect_leaks=1:abort_on_error=1:"
               "allocator_may_return_null=1",
               0);
        execv(daemon, (char *const *)argv);
        _exit(127);
    }
    d->pid = pid;
    track(d, 1);
    /* A restarted daemon replaces the socket a killed one left: wait for a connectable one. */
    for (int i = 0; i < 500; i++) {
        if (access(d->sock, F_OK) == 0 && socket_answers(d->sock))
            return;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            d->pid = 0;
            cr_assert_fail("mxop-serverd exited at start (status %d)", status);
        }
        sleep_ms(10);
    }
    cr_assert_fail("mxop-serverd did not create %s within 5 s", d->sock);
}

static void remove_tree(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "harness: could not remove %s\n", path);
}

void mxt_daemon_stop(mxt_daemon_t *d)
{
    track(d, 0);
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        int status = 0;
        pid_t r = 0;
        for (int i = 0; i < 1000; i++) {
            r = waitpid(d->pid, &status, WNOHANG);
            if (r == d->pid)
                break;
            if (r < 0 && errno == ECHILD) {
                /* Already reaped (mxt_daemon_alive reaps a daemon that exited, e.g. on a
                 * Shutdown request); its exit was the test's to check. */
                r = d->pid;
                status = 0;
                break;
            }
            sleep_ms(10);
        }
        if (r != d->pid) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &status, 0);
            d->pid = 0;
            cr_assert_fail("mxop-serverd did not stop within 10 s of SIGTERM");
        }
        d->pid = 0;
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "mxop-serverd did not exit cleanly (status 0x%x)", status);
        cr_expect(access(d->sock, F_OK) != 0, "mxop-serverd left its socket behind");
    }
    if (d->dir[0])
        remove_tree(d->dir);
    d->dir[0] = '\0';
}

void mxt_daemon_kill(mxt_daemon_t *d, int sig)
{
    if (d->pid > 0) {
        kill(d->pid, sig);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

int mxt_daemon_alive(const mxt_daemon_t *d)
{
    return d->pid > 0 && kill(d->pid, 0) == 0 && waitpid(d->pid, NULL, WNOHANG) == 0;
}

mxop_client_t *mxt_connect(const mxt_daemon_t *d)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .timeout_ms = 20000};
    int rc = mxop_connect(d->sock, &opts, &c);
    cr_assert_eq(rc, 0, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
    return c;
}

mxop_client_t *mxt_connect_with(const mxt_daemon_t *d, const char *const *libs)
{
    mxop_client_t *c = mxt_connect(d);
    for (int i = 0; libs != NULL && libs[i] != NULL; i++) {
        int rc = mxop_load_library(c, libs[i]);
        cr_assert_eq(rc, 0, "load %s: %s: %s", libs[i], mxop_err_name(rc), mxop_last_error(c));
    }
    return c;
}

const mxop_op_t *mxt_op(mxop_client_t *c, const char *name)
{
    const mxop_op_t *op = NULL;
    int rc = mxop_op_find(c, name, &op);
    cr_assert_eq(rc, 0, "op %s: %s: %s", name, mxop_err_name(rc), mxop_last_error(c));
    return op;
}

static int count_fds(pid_t pid, int memfd_only)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (memfd_only) {
            char link[400], target[256];
            snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
            ssize_t len = readlink(link, target, sizeof(target) - 1);
            if (len <= 0)
                continue;
            target[len] = '\0';
            if (strncmp(target, "/memfd:", 7) != 0)
                continue;
        }
        n++;
    }
    closedir(dir);
    /* opendir's own descriptor is counted when we look at ourselves. */
    return pid == getpid() ? n - (memfd_only ? 0 : 1) : n;
}

int mxt_fd_count(pid_t pid)
{
    return count_fds(pid, 0);
}

int mxt_memfd_count(pid_t pid)
{
    return count_fds(pid, 1);
}

int mxt_children(pid_t pid, pid_t *out, int max)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int n = 0, child;
    while (n < max && fscanf(f, "%d", &child) == 1)
        out[n++] = child;
    fclose(f);
    return n;
}

int mxt_wait_until(int (*fn)(void *), void *arg, int timeout_ms)
{
    int v = 0;
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        if ((v = fn(arg)) != 0)
            return v;
        sleep_ms(10);
    }
    return v;
}

size_t mxt_elems(const mxop_array_t *a)
{
    size_t n = 1;
    for (int i = 0; i < a->ndim; i++)
        n *= (size_t)a->shape[i];
    return n;
}

double mxt_get(const mxop_array_t *a, size_t i)
{
    if (a->dtype == MXOP_F64)
        return ((const double *)a->data)[i];
    return ((const float *)a->data)[i];
}

void mxt_set(mxop_array_t *a, size_t i, double v)
{
    if (a->dtype == MXOP_F64)
        ((double *)a->data)[i] = v;
    else
        ((float *)a->data)[i] = (float)v;
}

void mxt_array(mxop_client_t *c, int32_t dtype, int ndim, const int64_t *shape, unsigned seed,
               mxop_array_t *out)
{
    int rc = mxop_array_alloc(c, dtype, ndim, shape, out);
    cr_assert_eq(rc, 0, "mxop_array_alloc: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    /* A fixed LCG: values in [-1, 1), different per seed, the same every run. */
    uint32_t s = seed * 2654435761u + 12345u;
    size_t n = mxt_elems(out);
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        mxt_set(out, i, ((double)(s >> 8) / (double)(1u << 24)) * 2.0 - 1.0);
    }
}

void mxt_assert_close(const mxop_array_t *got, const double *want, size_t n, double rtol,
                      double atol)
{
    cr_assert_eq(mxt_elems(got), n, "element count %zu, expected %zu", mxt_elems(got), n);
    for (size_t i = 0; i < n; i++) {
        double g = mxt_get(got, i);
        double tol = atol + rtol * fabs(want[i]);
        cr_assert(fabs(g - want[i]) <= tol, "element %zu: got %.17g, expected %.17g", i, g,
                  want[i]);
    }
}

int mxt_session_procs(pid_t sid)
{
    DIR *dir = opendir("/proc");
    if (dir == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0)
            continue;
        /* Zombies are dead: only the living count. */
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *p = strrchr(buf, ')');
        char state;
        int ppid, pgrp, session;
        if (p != NULL && sscanf(p + 2, "%c %d %d %d", &state, &ppid, &pgrp, &session) == 4 &&
            session == (int)sid && state != 'Z' && state != 'X')
            n++;
    }
    closedir(dir);
    return n;
}

pid_t mxt_worker_pid(mxop_client_t *c)
{
    mxop_stats_t st;
    int rc = mxop_stats(c, &st);
    cr_assert_eq(rc, 0, "mxop_stats: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    return (pid_t)st.worker_pid;
}

int mxt_proc_field(pid_t pid, const char *file, const char *key, char *out, size_t outlen)
{
    char path[128], line[512];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t klen = strlen(key);
    int found = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, klen) != 0)
            continue;
        const char *v = line + klen;
        while (*v == ' ' || *v == '\t' || *v == ':')
            v++;
        snprintf(out, outlen, "%s", v);
        size_t n = strlen(out);
        while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
            out[--n] = '\0';
        found = 0;
        break;
    }
    fclose(f);
    return found;
}

void mxt_sleep_ms(int ms)
{
    sleep_ms(ms);
}

static int no_children(void *arg)
{
    pid_t kids[16];
    return mxt_children(*(pid_t *)arg, kids, 16) == 0;
}

static int back_to(void *arg)
{
    const mxt_baseline_t *b = arg;
    pid_t kids[16];
    return mxt_children(b->pid, kids, 16) == 0 && mxt_fd_count(b->pid) == b->fds &&
           mxt_memfd_count(b->pid) == b->memfds;
}

mxt_baseline_t mxt_baseline_take(const mxt_daemon_t *d)
{
    pid_t pid = d->pid;
    cr_assert(mxt_wait_until(no_children, &pid, 5000), "earlier workers live on");
    mxt_sleep_ms(50);
    mxt_baseline_t b = {pid, mxt_fd_count(pid), mxt_memfd_count(pid)};
    return b;
}

void mxt_baseline_expect(const mxt_baseline_t *b)
{
    int ok = mxt_wait_until(back_to, (void *)b, 5000);
    pid_t kids[16];
    cr_assert(ok, "daemon: %d fds (%d memfds) before, %d (%d) after, %d children", b->fds,
              b->memfds, mxt_fd_count(b->pid), mxt_memfd_count(b->pid),
              mxt_children(b->pid, kids, 16));
}

void mxt_other_session_correct(const mxt_daemon_t *d)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(d, libs);
    int64_t s[] = {256};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 7, &x);
    mxt_array(c, MXOP_F32, 1, s, 8, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "another session: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < 256; i++) {
        double v = mxt_get(&x, i);
        cr_assert_eq(mxt_get(&y, i), v > 0 ? v : 0, "another session: wrong result at %zu", i);
    }
    mxop_close(c);
}

/* Runs the daemon for a start that must fail (harness.h). */
int mxt_daemon_exit_status(const char *dir, const char *plugins, const char *const *extra,
                           char *err, size_t errlen)
{
    char log[600];
    snprintf(log, sizeof(log), "%s/stderr", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char bin[600], sock[600];
    snprintf(bin, sizeof(bin), "%s/bin/mxop-serverd", mxt_build_dir());
    snprintf(sock, sizeof(sock), "%s/s.sock", dir);
    const char *argv[16] = {bin, "--socket", sock, "--plugin-dir", plugins};
    int n = 5;
    for (int i = 0; extra[i] != NULL && n < 15; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st));
    FILE *f = fopen(log, "r");
    cr_assert(f != NULL);
    size_t got = fread(err, 1, errlen - 1, f);
    err[got] = '\0';
    fclose(f);
    unlink(log);
    return WEXITSTATUS(st);
}

#define MXT_RELU_ELEMS 256

/* Values that differ per caller and per call, so that a result meant for another cannot pass. */
static void relu_fill(float *p, size_t n, unsigned who, unsigned call)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((int)((i * 7 + call * 13 + who * 5) % 17) - 8) + (float)who +
               (float)call * 1e-3f;
}

/* Checked relu calls (harness.h). */
void *mxt_relu_caller(void *arg)
{
    mxt_relu_caller_t *k = arg;
    while (!k->stop) {
        if (mxt_relu_calls(k->c, k->who, k->calls, k->why, sizeof(k->why)) != NULL)
            return NULL;
        k->rounds++;
    }
    return NULL;
}

const char *mxt_relu_calls(mxop_client_t *c, unsigned who, int calls, char *why, size_t len)
{
    const mxop_op_t *op = NULL;
    if (mxop_op_find(c, "relu", &op) != 0)
        return "no op relu";
    int64_t s[] = {MXT_RELU_ELEMS};
    mxop_array_t x, y;
    if (mxop_array_alloc(c, MXOP_F32, 1, s, &x) != 0)
        return "mxop_array_alloc failed";
    if (mxop_array_alloc(c, MXOP_F32, 1, s, &y) != 0) {
        mxop_array_free(c, &x);
        return "mxop_array_alloc failed";
    }
    const char *fail = NULL;
    for (int k = 0; k < calls && fail == NULL; k++) {
        relu_fill(x.data, MXT_RELU_ELEMS, who, (unsigned)k);
        memset(y.data, 0xff, y.nbytes);
        int rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
        if (rc != 0) {
            snprintf(why, len, "caller %u, call %d: %s: %s", who, k, mxop_err_name(rc),
                     mxop_last_error(c));
            fail = why;
            break;
        }
        const float *in = x.data, *out = y.data;
        for (int i = 0; i < MXT_RELU_ELEMS; i++) {
            float want = in[i] > 0 ? in[i] : 0;
            if (out[i] != want) {
                snprintf(why, len, "caller %u, call %d, element %d: got %g, expected %g", who, k, i,
                         out[i], want);
                fail = why;
                break;
            }
        }
    }
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    return fail;
}
