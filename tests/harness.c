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

/* The daemon's arguments before the test's own. */
static void launch_opts(mxop__launch_opts_t *o, char *daemon, size_t len,
                        const char *const *extra_args, const char **argv, size_t argv_max)
{
    snprintf(daemon, len, "%s/bin/mxop-serverd", mxt_build_dir());
    size_t n = 0;
    argv[n++] = "--log-level";
    argv[n++] = getenv("MXOP_TEST_LOG") ? "debug" : "warn";
    for (size_t i = 0; extra_args != NULL && extra_args[i] != NULL && n + 1 < argv_max; i++)
        argv[n++] = extra_args[i];
    argv[n] = NULL;
    /*
     * Crash fixtures must die by their signal, not by a sanitizer's report:
     * an error ASan finds (a double free) aborts, and an allocation over the
     * sandbox's memory limit returns NULL as it would without ASan.
     */
    static const char *const env[] = {
        "ASAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_abort=0:detect_leaks=1:"
        "abort_on_error=1:allocator_may_return_null=1",
        NULL};
    *o = (mxop__launch_opts_t){.serverd = daemon, .args = argv, .env = env, .ready_ms = 5000};
}

void mxt_daemon_start(mxt_daemon_t *d, const char *const *extra_args)
{
    char daemon[512], err[1024], plugins[512], fixtures[512];
    const char *argv[32];
    mxop__launch_opts_t o;
    launch_opts(&o, daemon, sizeof(daemon), extra_args, argv, 32);
    /* $TMPDIR when set, so that a run can be given a directory of its own and checked for
     * leftovers. */
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] != '/' || strlen(tmp) > 40)
        tmp = "/tmp";
    snprintf(plugins, sizeof(plugins), "%s/plugins", mxt_build_dir());
    snprintf(fixtures, sizeof(fixtures), "%s/tests/plugins", mxt_build_dir());
    const char *sources[] = {plugins, fixtures, NULL};
    o.tmp_dir = tmp;
    o.prefix = "mxop-test";
    o.plugins = sources;
    int rc = mxop__launch_start(d, &o, err, sizeof(err));
    cr_assert_eq(rc, 0, "starting mxop-serverd: %s", err);
}

void mxt_daemon_restart(mxt_daemon_t *d, const char *const *extra_args)
{
    cr_assert(d->pid == 0, "mxt_daemon_restart: the daemon still runs");
    cr_assert(d->dir[0] != '\0', "mxt_daemon_restart: no directory");
    char daemon[512], err[1024];
    const char *argv[32];
    mxop__launch_opts_t o;
    launch_opts(&o, daemon, sizeof(daemon), extra_args, argv, 32);
    int rc = mxop__launch_restart(d, &o, err, sizeof(err));
    cr_assert_eq(rc, 0, "restarting mxop-serverd: %s", err);
}

void mxt_daemon_stop(mxt_daemon_t *d)
{
    int status = 0, had = d->pid > 0;
    int killed = mxop__launch_stop(d, 10000, &status);
    int socket_left = had && access(d->sock, F_OK) == 0;
    mxop__launch_remove(d);
    if (!had)
        return;
    cr_assert(!killed, "mxop-serverd did not stop within 10 s of SIGTERM");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "mxop-serverd did not exit cleanly (status 0x%x)", status);
    cr_expect(!socket_left, "mxop-serverd left its socket behind");
}

void mxt_daemon_kill(mxt_daemon_t *d, int sig)
{
    mxop__launch_kill(d, sig);
}

int mxt_daemon_alive(const mxt_daemon_t *d)
{
    return mxop__launch_alive(d);
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
