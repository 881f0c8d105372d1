/*
 * tests/test_reload.c - hot reload (Reload, `mxop reload`, `mxop load`,
 * --watch) and administrators (--admin-uid; Shutdown and Reload refused to
 * others).
 *
 * The library under reload is "version.so" in the plugin directory, a copy
 * of tests/plugins/version_a.so (its op writes 1.0 into every output
 * element) or version_b.so (2.0), put in place with rename() as a package
 * manager would.  What "answered by the right version" means here, exactly:
 *
 *   - every answer is 1.0 or 2.0 in all of its elements (never a mix, never
 *     anything else), and every call succeeds (none is lost);
 *   - a call begun after `mxop reload` returned is answered by the file
 *     installed before that reload (the reply waits until every session
 *     using the library runs its new worker);
 *   - a call in flight while the reload is asked for finishes on whichever
 *     version it began on (checked only for a whole, unmixed answer).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sha256.h"
#include "harness.h"

#define NOBODY 65534

static mxt_daemon_t daemon_;

static void stop(void)
{
    mxt_daemon_stop(&daemon_);
}

/* Puts tests/plugins/version_<which>.so in place as version.so, atomically. */
static void install(char which)
{
    char src[600], tmp[600], dst[600];
    snprintf(src, sizeof(src), "%s/version_%c.so", daemon_.plugins, which);
    snprintf(tmp, sizeof(tmp), "%s/.version.so.new", daemon_.plugins);
    snprintf(dst, sizeof(dst), "%s/version.so", daemon_.plugins);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    cr_assert(in >= 0, "%s: %s", src, strerror(errno));
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    cr_assert(out >= 0, "%s: %s", tmp, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        cr_assert_eq(write(out, buf, (size_t)n), n);
    close(in);
    cr_assert_eq(fsync(out), 0);
    close(out);
    cr_assert_eq(rename(tmp, dst), 0, "rename: %s", strerror(errno));
}

static void start(const char *const *args, char first)
{
    mxt_daemon_start(&daemon_, args);
    install(first);
}

/* Runs `mxop ARGS` against the daemon; its stdout (and stderr) into out.  Returns its exit status.
 */
static int run_mxop(char *out, size_t outlen, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxop %s --socket %s 2>&1", mxt_build_dir(), args,
             daemon_.sock);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t got = fread(out, 1, outlen - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The value of "key: " in the text output of mxop, or "" */
static void field(const char *text, const char *key, char *out, size_t outlen)
{
    out[0] = '\0';
    const char *p = strstr(text, key);
    if (p == NULL)
        return;
    p += strlen(key);
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, "\n");
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static void file_sha256(const char *name, char hex[65])
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", daemon_.plugins, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0);
    cr_assert_eq(mxop__sha256_fd(fd, hex), 0);
    close(fd);
}

/* One forward of "version" with x[0] = sleep_ms; the version it answered, or a negative code. */
static double call_version(mxop_client_t *c, const mxop_op_t *op, double sleep_ms, int *rc_out,
                           int *mixed)
{
    int64_t shape[] = {256};
    mxop_array_t x, y;
    *mixed = 0;
    if (mxop_array_alloc(c, MXOP_F64, 1, shape, &x) != 0 ||
        mxop_array_alloc(c, MXOP_F64, 1, shape, &y) != 0) {
        *rc_out = MXOP_ENOMEM;
        return -1;
    }
    ((double *)x.data)[0] = sleep_ms;
    for (size_t i = 0; i < 256; i++)
        ((double *)y.data)[i] = -7;
    *rc_out = mxop_forward(c, op, NULL, &x, 1, &y, 1);
    double v = ((double *)y.data)[0];
    for (size_t i = 1; i < 256; i++)
        if (((double *)y.data)[i] != v)
            *mixed = 1;
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Reload under load. */

#define CLIENTS 4

/*
 * 0: version A; 1: B being installed and reloaded (either answer is right);
 * 2: B reloaded; 3: A being installed and reloaded; 4: A reloaded.
 */
static atomic_int phase;
static atomic_int running; /* cleared to stop the callers */

typedef struct caller {
    pthread_t th;
    mxop_client_t *c;
    const mxop_op_t *op;
    double sleep_ms;
    int calls[5]; /* calls begun in each phase */
    int errors;   /* calls that failed (lost) */
    int mixed;    /* answers mixing values */
    int strange;  /* answers neither 1.0 nor 2.0 */
    int wrong;    /* answers from another version than that of the one phase the call ran in */
    int first_rc;
    char first_err[512];
} caller_t;

static void *caller_main(void *arg)
{
    caller_t *k = arg;
    while (atomic_load(&running)) {
        int p = atomic_load(&phase);
        int rc, mixed;
        double v = call_version(k->c, k->op, k->sleep_ms, &rc, &mixed);
        /*
         * A call still on its way when the next reload begins may be
         * answered by the replacement (a call the retiring worker did not
         * run goes to it): either version is right for it.
         */
        int straddled = atomic_load(&phase) != p;
        k->calls[p]++;
        if (rc != 0) {
            if (k->errors++ == 0) {
                k->first_rc = rc;
                snprintf(k->first_err, sizeof(k->first_err), "%s", mxop_last_error(k->c));
            }
            continue;
        }
        k->mixed += mixed;
        if (v != 1.0 && v != 2.0)
            k->strange++;
        else if (!straddled &&
                 ((p == 0 && v != 1.0) || (p == 2 && v != 2.0) || (p == 4 && v != 1.0)))
            k->wrong++;
    }
    return NULL;
}

static int enough_calls(void *arg)
{
    caller_t *k = arg;
    int p = atomic_load(&phase);
    for (int i = 0; i < CLIENTS; i++)
        if (k[i].calls[p] < 5)
            return 0;
    return 1;
}

Test(reload, under_load_no_call_lost_none_from_the_wrong_version, .timeout = 180, .fini = stop)
{
    start(NULL, 'a');
    caller_t k[CLIENTS];
    memset(k, 0, sizeof(k));
    const char *libs[] = {"version.so", NULL};
    atomic_store(&phase, 0);
    atomic_store(&running, 1);
    for (int i = 0; i < CLIENTS; i++) {
        k[i].c = mxt_connect_with(&daemon_, libs);
        k[i].op = mxt_op(k[i].c, "version");
        /* One caller is slow, so that a call is in flight when the reload comes. */
        k[i].sleep_ms = i == 0 ? 30 : 0;
        cr_assert_eq(pthread_create(&k[i].th, NULL, caller_main, &k[i]), 0);
    }
    char out[8192], v[128];
    for (int round = 1; round <= 2; round++) {
        cr_assert(mxt_wait_until(enough_calls, k, 30000), "callers made no progress");
        mxt_sleep_ms(300);
        atomic_store(&phase, 2 * round - 1);
        install(round == 1 ? 'b' : 'a');
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int st = run_mxop(out, sizeof(out), "reload version.so");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cr_log_info("reload %d under load: `mxop reload` took %.1f ms", round,
                    (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                        (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
        cr_assert_eq(st, 0, "mxop reload: exit %d: %s", st, out);
        field(out, "sessions:", v, sizeof(v));
        cr_assert(strncmp(v, "4 (", 3) == 0, "every session is moved: %s", out);
        atomic_store(&phase, 2 * round);
    }
    cr_assert(mxt_wait_until(enough_calls, k, 30000), "callers made no progress");
    mxt_sleep_ms(300);
    atomic_store(&running, 0);
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(k[i].th, NULL);
        cr_expect_eq(k[i].errors, 0, "caller %d: %d calls lost, the first: %s: %s", i, k[i].errors,
                     mxop_err_name(k[i].first_rc), k[i].first_err);
        cr_expect_eq(k[i].mixed, 0, "caller %d: %d answers mixed two versions", i, k[i].mixed);
        cr_expect_eq(k[i].strange, 0, "caller %d: %d answers were no version", i, k[i].strange);
        cr_expect_eq(
            k[i].wrong, 0,
            "caller %d: %d calls begun and answered between two reloads got another version", i,
            k[i].wrong);
        for (int p = 0; p < 5; p += 2)
            cr_expect(k[i].calls[p] >= 5, "caller %d made %d calls in phase %d", i, k[i].calls[p],
                      p);
        mxop_stats_t st;
        cr_assert_eq(mxop_stats(k[i].c, &st), 0);
        cr_expect(st.worker_restarts >= 2, "caller %d: %llu worker replacements", i,
                  (unsigned long long)st.worker_restarts);
        cr_log_info("caller %d: %d calls (%d, %d, %d, %d, %d by phase), %llu worker replacements",
                    i,
                    k[i].calls[0] + k[i].calls[1] + k[i].calls[2] + k[i].calls[3] + k[i].calls[4],
                    k[i].calls[0], k[i].calls[1], k[i].calls[2], k[i].calls[3], k[i].calls[4],
                    (unsigned long long)st.worker_restarts);
        mxop_close(k[i].c);
    }
}

Test(reload, stateful_instance_is_lost, .timeout = 60, .fini = stop)
{
    start(NULL, 'a');
    const char *libs[] = {"version.so", "running_mean.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    const mxop_op_t *op = mxt_op(c, "running_mean_norm");
    mxop_shape_t s = {2, {2, 2}};
    int32_t dt = MXOP_F64;
    uint64_t state;
    cr_assert_eq(mxop_state_create(c, op, NULL, 1, &dt, &s, &state), 0, "%s", mxop_last_error(c));
    install('b');
    char out[8192];
    cr_assert_eq(run_mxop(out, sizeof(out), "reload version.so"), 0, "%s", out);
    int64_t shape[] = {2, 2};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 2, shape, 3, &x);
    mxt_array(c, MXOP_F64, 2, shape, 4, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .state = state};
    int rc = mxop_forward(c, op, &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ESTATE_LOST, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
    /* The session goes on, on the new version. */
    int mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    cr_assert(v == 2.0 && !mixed, "answered %g after the reload", v);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
}

Test(reload, load_reports_the_version_and_new_sessions_get_the_new_file, .timeout = 60,
     .fini = stop)
{
    start(NULL, 'a');
    char out[8192], v[128], want[65];
    cr_assert_eq(run_mxop(out, sizeof(out), "load version.so"), 0, "%s", out);
    cr_assert(strstr(out, "version ") != NULL, "the op is listed: %s", out);
    field(out, "sha256:", v, sizeof(v));
    file_sha256("version_a.so", want);
    cr_assert_str_eq(v, want, "%s", out);
    field(out, "path:", v, sizeof(v));
    cr_assert(strstr(v, "/version.so") != NULL, "%s", out);

    install('b');
    /* No reload: a new session opens the file now at the path. */
    cr_assert_eq(run_mxop(out, sizeof(out), "load version.so"), 0, "%s", out);
    field(out, "sha256:", v, sizeof(v));
    file_sha256("version_b.so", want);
    cr_assert_str_eq(v, want, "%s", out);
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int rc, mixed;
    double got = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && got == 2.0 && !mixed, "rc %d, answered %g", rc, got);
    mxop_close(c);

    /* A library that is not there is named. */
    cr_assert_eq(run_mxop(out, sizeof(out), "reload nothere.so"), 1, "%s", out);
    cr_assert(strstr(out, "MXOP_ELIB_NOT_FOUND") != NULL && strstr(out, "nothere.so"), "%s", out);
}

static int answers_two(void *arg)
{
    mxop_client_t *c = arg;
    int rc, mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    return rc == 0 && !mixed && v == 2.0;
}

Test(reload, watch_picks_up_a_changed_file, .timeout = 60, .fini = stop)
{
    const char *args[] = {"--watch", "on", NULL};
    start(args, 'a');
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int rc, mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && v == 1.0, "rc %d, answered %g", rc, v);
    pid_t before = mxt_worker_pid(c);
    install('b');
    cr_assert(mxt_wait_until(answers_two, c, 20000),
              "the session still runs the old file 20 s after it changed");
    cr_assert_neq(mxt_worker_pid(c), before, "the worker was not replaced");
    mxop_close(c);
}

/* Without --watch, a changed file reaches running sessions only by a reload. */
Test(reload, without_watch_running_sessions_keep_their_version, .timeout = 60, .fini = stop)
{
    start(NULL, 'a');
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    install('b');
    mxt_sleep_ms(2500);
    int rc, mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && v == 1.0, "rc %d, answered %g", rc, v);
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* Administrators. */

/* Lets uid NOBODY reach the socket (the harness made it owner-only). */
static void open_up(void)
{
    cr_assert_eq(chmod(daemon_.dir, 0755), 0);
    cr_assert_eq(chmod(daemon_.sock, 0666), 0);
}

/* Forks a child that becomes uid NOBODY and runs fn; returns its exit status. */
static int as_nobody(int (*fn)(void))
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(100);
        _exit(fn());
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 200;
}

static int shutdown_as_nobody(void)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .timeout_ms = 20000};
    if (mxop_connect(daemon_.sock, &opts, &c) != 0) {
        fprintf(stderr, "connect: %s\n", mxop_connect_error());
        return 10;
    }
    int rc = mxop_shutdown_daemon(c);
    if (rc == MXOP_EDENIED) {
        /* The refusal names the uid and how to allow it. */
        int named = strstr(mxop_last_error(c), "65534") != NULL &&
                    strstr(mxop_last_error(c), "--admin-uid") != NULL;
        if (!named)
            fprintf(stderr, "refusal: %s\n", mxop_last_error(c));
        mxop_close(c);
        return named ? 1 : 12;
    }
    return rc == 0 ? 0 : 11;
}

Test(admin, non_admin_shutdown_is_refused, .timeout = 60, .fini = stop)
{
    if (geteuid() != 0)
        cr_skip_test("switching to another uid needs the tests to run as root");
    const char *args[] = {"--allow-uid", "65534",
                          /* the workers' uid is never a client's: another one */
                          "--worker-uid", "65533", NULL};
    start(args, 'a');
    open_up();
    cr_assert_eq(as_nobody(shutdown_as_nobody), 1, "Shutdown from a non-administrator");
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon stopped");
    /* Still serving. */
    mxop_client_t *c = mxt_connect(&daemon_);
    mxop_close(c);
}

Test(admin, admin_uid_shutdown_is_accepted, .timeout = 60, .fini = stop)
{
    if (geteuid() != 0)
        cr_skip_test("switching to another uid needs the tests to run as root");
    const char *args[] = {"--admin-uid", "65534",
                          /* the workers' uid is never a client's: another one */
                          "--worker-uid", "65533", NULL};
    start(args, 'a');
    open_up();
    cr_assert_eq(as_nobody(shutdown_as_nobody), 0, "Shutdown from an --admin-uid");
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 1000 && r != daemon_.pid; i++) {
        r = waitpid(daemon_.pid, &st, WNOHANG);
        if (r != daemon_.pid)
            mxt_sleep_ms(10);
    }
    cr_assert_eq(r, daemon_.pid, "the daemon did not stop after an --admin-uid's Shutdown");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    daemon_.pid = 0;
}

static int reload_as_nobody(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxop reload --socket %s version.so 2>&1", mxt_build_dir(),
             daemon_.sock);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return 20;
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 21;
    bool named = strstr(out, "MXOP_EDENIED") != NULL && strstr(out, "--admin-uid") != NULL;
    if (code != 1 || !named)
        fprintf(stderr, "mxop reload as uid 65534: exit %d: %s\n", code, out);
    return code == 1 && named ? 1 : 22;
}

Test(admin, non_admin_reload_is_refused, .timeout = 60, .fini = stop)
{
    if (geteuid() != 0)
        cr_skip_test("switching to another uid needs the tests to run as root");
    struct stat st;
    char bin[600];
    snprintf(bin, sizeof(bin), "%s/bin/mxop", mxt_build_dir());
    if (stat(bin, &st) != 0 || !(st.st_mode & S_IXOTH))
        cr_skip_test("%s is not executable by uid 65534", bin);
    const char *args[] = {"--allow-uid", "65534",
                          /* the workers' uid is never a client's: another one */
                          "--worker-uid", "65533", NULL};
    start(args, 'a');
    open_up();
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t before = mxt_worker_pid(c);
    install('b');
    cr_assert_eq(as_nobody(reload_as_nobody), 1, "Reload from a non-administrator");
    int rc, mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && v == 1.0, "rc %d, answered %g: the refused reload happened", rc, v);
    cr_assert_eq(mxt_worker_pid(c), before);
    mxop_close(c);
}

/* A new file whose ops differ cannot take over a session: its calls would reach other ops. */
Test(reload, changed_ops_fail_the_session_never_run_another_op, .timeout = 60, .fini = stop)
{
    start(NULL, 'a');
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    const mxop_op_t *op = mxt_op(c, "version");
    int64_t shape[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, shape, 1, &x);
    mxt_array(c, MXOP_F64, 1, shape, 2, &y);
    ((double *)x.data)[0] = 0;
    for (int i = 0; i < 16; i++)
        ((double *)y.data)[i] = -7;
    install('c');
    char out[8192];
    cr_assert_eq(run_mxop(out, sizeof(out), "reload version.so"), 0, "%s", out);
    int rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "version_renamed") != NULL, "%s", mxop_last_error(c));
    for (int i = 0; i < 16; i++)
        cr_assert_eq(((double *)y.data)[i], -7, "another op ran for the call");
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
    /* A new session gets the new file and its op. */
    c = mxt_connect_with(&daemon_, libs);
    mxt_op(c, "version_renamed");
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* Requests the retiring worker never read go to its replacement. */

typedef struct loader {
    mxop_client_t *c;
    int rc;
    char err[512];
} loader_t;

static void *load_main(void *arg)
{
    loader_t *l = arg;
    l->rc = mxop_load_library(l->c, "running_mean.so");
    snprintf(l->err, sizeof(l->err), "%s", l->rc ? mxop_last_error(l->c) : "");
    return NULL;
}

Test(reload, requests_sent_while_retiring_go_to_the_replacement, .timeout = 60, .fini = stop)
{
    start(NULL, 'a');
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    /* Stopped, the worker cannot read its Retire yet: what comes after it waits behind. */
    cr_assert_eq(kill(w, SIGSTOP), 0);
    install('b');
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxop reload --socket %s version.so 2>&1", mxt_build_dir(),
             daemon_.sock);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    mxt_sleep_ms(300);
    loader_t l = {.c = c};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, load_main, &l), 0);
    mxt_sleep_ms(300);
    cr_assert_eq(kill(w, SIGCONT), 0);
    pthread_join(th, NULL);
    cr_assert_eq(l.rc, 0, "LoadLibrary sent while the worker retired: %s: %s", mxop_err_name(l.rc),
                 l.err);
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mxop reload: %s", out);
    cr_assert_neq(mxt_worker_pid(c), w, "the worker was not replaced");
    mxt_op(c, "running_mean_norm");
    int rc, mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && v == 2.0 && !mixed, "rc %d, answered %g", rc, v);
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* Retiring with a deadline (docs/operations.md, "Hot reload"). */

/* The most a reload may take here: the daemon's retirement bound and a cold start, generously. */
#define RELOAD_BOUND_MS 10000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Starts `mxop reload --timeout-ms 30000 version.so`; read its answer with finish_reload(). */
static FILE *begin_reload(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxop reload --socket %s --timeout-ms 30000 version.so 2>&1",
             mxt_build_dir(), daemon_.sock);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    return p;
}

/* Waits for the reload begun at `t0` (mono_ms); asserts it succeeded within RELOAD_BOUND_MS. */
static void finish_reload(FILE *p, int64_t t0)
{
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    int64_t took = mono_ms() - t0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mxop reload (after %lld ms): %s",
              (long long)took, out);
    cr_assert_lt(took, RELOAD_BOUND_MS, "the reload took %lld ms", (long long)took);
}

static int gone(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    char state[32];
    return kill(pid, 0) != 0 ||
           (mxt_proc_field(pid, "status", "State", state, sizeof(state)) == 0 && state[0] == 'Z');
}

/*
 * A library whose destructor or atexit handler hangs: the retired worker
 * ends with _exit after its Retire, so the reload is answered at once and
 * the next call reaches the replacement (before: the reload hung, and the
 * next call went to the old worker and failed with MXOP_ETIMEOUT).
 */
static void reload_past_a_hanging_exit(const char *lib)
{
    start(NULL, 'a');
    const char *libs[] = {"version.so", lib, NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(mxop_set_timeout(c, 8000), 0);
    pid_t w = mxt_worker_pid(c);
    install('b');
    int64_t t0 = mono_ms();
    finish_reload(begin_reload(), t0);
    int rc, mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && v == 2.0 && !mixed, "rc %s (%s), answered %g", mxop_err_name(rc),
              rc ? mxop_last_error(c) : "", v);
    cr_assert(mxt_wait_until(gone, &w, 5000), "the retired worker %d still runs", (int)w);
    mxop_close(c);
}

Test(reload, retired_worker_runs_no_library_destructor, .timeout = 90, .fini = stop)
{
    reload_past_a_hanging_exit("hang_dtor.so");
}

Test(reload, retired_worker_runs_no_atexit_handler, .timeout = 90, .fini = stop)
{
    reload_past_a_hanging_exit("hang_atexit.so");
}

/*
 * A retiring worker whose serving loop a library deadlocked never reads
 * its Retire: it is killed MXOP__RETIRE_TIMEOUT_MS later, the reload is
 * answered, and a call the client sent to it meanwhile is answered by the
 * replacement (before: the reload waited for ever, the call timed out).
 * The probe is set far off so that only the retirement's bound can act.
 */
Test(reload, retiring_worker_that_never_exits_is_killed_in_bound, .timeout = 90, .fini = stop)
{
    const char *args[] = {"--probe-interval-ms", "600000", NULL};
    start(args, 'a');
    const char *libs[] = {"version.so", "deadlock_loop.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(mxop_set_timeout(c, 8000), 0);
    pid_t w = mxt_worker_pid(c);
    int64_t shape[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, shape, 1, &x);
    mxt_array(c, MXOP_F32, 1, shape, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "deadlock_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s", mxop_last_error(c));
    mxt_sleep_ms(600); /* its loop is deadlocked by now */
    install('b');
    int64_t t0 = mono_ms();
    FILE *p = begin_reload();
    mxt_sleep_ms(300); /* the Retire is sent: the call below comes after it */
    int mixed;
    double v = call_version(c, mxt_op(c, "version"), 0, &rc, &mixed);
    cr_assert(rc == 0 && v == 2.0 && !mixed, "the call sent while retiring: %s (%s), answered %g",
              mxop_err_name(rc), rc ? mxop_last_error(c) : "", v);
    finish_reload(p, t0);
    cr_assert(mxt_wait_until(gone, &w, 5000), "the retired worker %d still runs", (int)w);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
}
