/*
 * tests/test_service.c - running mxop-serverd as a service: the config
 * file (--config), SIGHUP re-reading it, the drain at SIGTERM, and socket
 * activation (LISTEN_FDS), as docs/operations.md describes them.
 */
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
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tests/harness.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* Waits up to ms for pid to exit; returns its status, or -1 (then it is killed). */
static int wait_exit(pid_t pid, int ms)
{
    int status;
    for (int waited = 0; waited <= ms; waited += 10) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return status;
        mxt_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/*
 * Runs the daemon with argv (NULL-terminated, without the program) and
 * fd 3 = fd3 when fd3 >= 0 under socket activation; stderr goes to
 * errpath.  Returns its pid.
 */
static pid_t spawn_daemon(const char *const *args, int fd3, const char *errpath)
{
    char prog[512];
    snprintf(prog, sizeof(prog), "%s/bin/mxop-serverd", mxt_build_dir());
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (e >= 0) {
            dup2(e, 2);
            close(e);
        }
        if (fd3 >= 0) {
            if (fd3 != 3) {
                dup2(fd3, 3);
                close(fd3);
            }
            char pidbuf[32];
            snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
            setenv("LISTEN_PID", pidbuf, 1);
            setenv("LISTEN_FDS", "1", 1);
        }
        const char *argv[32] = {prog};
        int n = 1;
        for (int i = 0; args[i] != NULL && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void read_text(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
}

static void relu_once(mxop_client_t *c)
{
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 3, &x);
    mxt_array(c, MXOP_F32, 1, s, 4, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "relu: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (int i = 0; i < 8; i++)
        cr_assert_eq(mxt_get(&y, i), mxt_get(&x, i) > 0 ? mxt_get(&x, i) : 0);
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
}

/* ------------------------------------------------------------------------ */
/* The config file. */

/* A bad value on line 3 of a config file: exit 2, the file, the line and the key named. */
Test(service, config_file_error_names_file_line_and_key, .timeout = 30)
{
    char dir[] = "/tmp/mxop-svc-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char conf[256], errp[256], sock[256], plugins[256], text[4096];
    snprintf(conf, sizeof(conf), "%s/mxop.conf", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    snprintf(sock, sizeof(sock), "%s/s.sock", dir);
    snprintf(plugins, sizeof(plugins), "%s/plugins", mxt_build_dir());
    write_file(conf, "# limits\n\nsession-max-libraries = lots\n");
    const char *args[] = {"--config", conf, "--socket", sock, "--plugin-dir", plugins, NULL};
    int st = wait_exit(spawn_daemon(args, -1, errp), 10000);
    read_text(errp, text, sizeof(text));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x; stderr: %s", st, text);
    char where[300];
    snprintf(where, sizeof(where), "%s:3:", conf);
    cr_assert(strstr(text, where) != NULL, "no '%s' in: %s", where, text);
    cr_assert(strstr(text, "--session-max-libraries") != NULL, "key not named: %s", text);
    cr_assert(strstr(text, "lots") != NULL, "value not named: %s", text);
    cr_assert(access(sock, F_OK) != 0, "a socket was created");

    /* An unknown key too. */
    write_file(conf, "max-connections = 4\nmax-conections = 5\n");
    st = wait_exit(spawn_daemon(args, -1, errp), 10000);
    read_text(errp, text, sizeof(text));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x; stderr: %s", st, text);
    snprintf(where, sizeof(where), "%s:2:", conf);
    cr_assert(strstr(text, where) != NULL && strstr(text, "unknown option '--max-conections'"),
              "got: %s", text);

    /* A line that is not key = value. */
    write_file(conf, "max-connections 4\n");
    st = wait_exit(spawn_daemon(args, -1, errp), 10000);
    read_text(errp, text, sizeof(text));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x; stderr: %s", st, text);
    snprintf(where, sizeof(where), "%s:1:", conf);
    cr_assert(strstr(text, where) != NULL && strstr(text, "key = value"), "got: %s", text);

    /* A missing file. */
    unlink(conf);
    st = wait_exit(spawn_daemon(args, -1, errp), 10000);
    read_text(errp, text, sizeof(text));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x; stderr: %s", st, text);
    cr_assert(strstr(text, conf) != NULL, "file not named: %s", text);
    unlink(errp);
    rmdir(dir);
}

/* Loads libraries until one fails; returns how many loaded, and the failure's code in *code. */
static int load_until_refused(mxop_client_t *c, int *code)
{
    static const char *const libs[] = {"relu.so", "softmax.so", "noop.so", "gemm.so", "sum_n.so"};
    for (int i = 0; i < 5; i++) {
        int rc = mxop_load_library(c, libs[i]);
        if (rc != 0) {
            *code = rc;
            return i;
        }
    }
    *code = 0;
    return 5;
}

/* The file's limit applies; the same option on the command line overrides it. */
Test(service, config_file_applies_and_flags_override_it, .timeout = 60)
{
    char conf[] = "/tmp/mxop-svc-conf-XXXXXX";
    int fd = mkstemp(conf);
    cr_assert(fd >= 0);
    close(fd);
    write_file(conf, "# a comment\nsession-max-libraries = 1\n  max-connections=8  \n");
    mxt_daemon_t d;
    const char *extra[] = {"--config", conf, NULL};
    mxt_daemon_start(&d, extra);
    mxop_client_t *c = mxt_connect(&d);
    int code;
    cr_assert_eq(load_until_refused(c, &code), 1);
    cr_assert_eq(code, MXOP_ELIMIT, "got %s (%s)", mxop_err_name(code), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "session-max-libraries") != NULL, "%s",
              mxop_last_error(c));
    mxop_close(c);
    mxt_daemon_stop(&d);

    const char *extra2[] = {"--config", conf, "--session-max-libraries", "3", NULL};
    mxt_daemon_start(&d, extra2);
    c = mxt_connect(&d);
    cr_assert_eq(load_until_refused(c, &code), 3);
    cr_assert_eq(code, MXOP_ELIMIT, "got %s", mxop_err_name(code));
    mxop_close(c);
    mxt_daemon_stop(&d);
    unlink(conf);
}

/* ------------------------------------------------------------------------ */
/* SIGHUP */

/* A new limit in the file applies after SIGHUP; a session opened before goes on working. */
Test(service, sighup_applies_a_new_limit_and_keeps_sessions, .timeout = 60)
{
    char conf[] = "/tmp/mxop-svc-conf-XXXXXX";
    int fd = mkstemp(conf);
    cr_assert(fd >= 0);
    close(fd);
    write_file(conf, "session-max-libraries = 1\n");
    mxt_daemon_t d;
    const char *extra[] = {"--config", conf, NULL};
    mxt_daemon_start(&d, extra);

    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *old = mxt_connect_with(&d, libs);
    relu_once(old);
    int rc = mxop_load_library(old, "softmax.so");
    cr_assert_eq(rc, MXOP_ELIMIT, "got %s", mxop_err_name(rc));

    /* A broken file at SIGHUP changes nothing (and the daemon lives on). */
    write_file(conf, "session-max-libraries = many\n");
    cr_assert_eq(kill(d.pid, SIGHUP), 0);
    mxt_sleep_ms(300);
    cr_assert(mxt_daemon_alive(&d), "a bad config file at SIGHUP ended the daemon");
    mxop_client_t *c = mxt_connect(&d);
    int code;
    cr_assert_eq(load_until_refused(c, &code), 1, "the limit changed after a failed reload");
    mxop_close(c);

    write_file(conf, "session-max-libraries = 3\n");
    cr_assert_eq(kill(d.pid, SIGHUP), 0);
    int loaded = 0;
    for (int waited = 0; waited < 10000 && loaded != 3; waited += 100) {
        mxt_sleep_ms(100);
        c = mxt_connect(&d);
        loaded = load_until_refused(c, &code);
        mxop_close(c);
    }
    cr_assert_eq(loaded, 3, "the new limit was not applied after SIGHUP (%d loaded)", loaded);
    cr_assert_eq(code, MXOP_ELIMIT);

    /* The session from before the reload still works, under the new limit. */
    relu_once(old);
    rc = mxop_load_library(old, "softmax.so");
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(old));
    relu_once(old);
    mxop_close(old);
    mxt_daemon_stop(&d);
    unlink(conf);
}

/* SIGHUP without --config changes nothing and ends nothing. */
Test(service, sighup_without_a_config_file_is_harmless, .timeout = 30)
{
    mxt_daemon_t d;
    mxt_daemon_start(&d, NULL);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&d, libs);
    cr_assert_eq(kill(d.pid, SIGHUP), 0);
    mxt_sleep_ms(200);
    cr_assert(mxt_daemon_alive(&d));
    relu_once(c);
    mxop_close(c);
    mxt_daemon_stop(&d);
}

/* ------------------------------------------------------------------------ */
/* SIGTERM: the drain. */

typedef struct slow_call {
    mxop_client_t *c;
    const char *ms;
    int rc;
    char msg[512];
    volatile int started;
} slow_call_t;

static void *slow_call_thread(void *arg)
{
    slow_call_t *sc = arg;
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(sc->c, MXOP_F32, 1, s, 1, &x);
    mxt_array(sc->c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"ms", sc->ms, NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 60000};
    sc->started = 1;
    sc->rc = mxop_forward(sc->c, mxt_op(sc->c, "sleep"), &call, &x, 1, &y, 1);
    snprintf(sc->msg, sizeof(sc->msg), "%s", mxop_last_error(sc->c));
    if (sc->rc == 0 && memcmp(x.data, y.data, x.nbytes) != 0)
        sc->rc = -1;
    return NULL;
}

/* Until `path` is gone or ms pass; 1 if it is gone. */
static int wait_gone(const char *path, int ms)
{
    for (int waited = 0; waited <= ms; waited += 10) {
        if (access(path, F_OK) != 0)
            return 1;
        mxt_sleep_ms(10);
    }
    return 0;
}

Test(service, sigterm_lets_a_call_in_flight_finish_and_refuses_new_clients, .timeout = 60)
{
    mxt_daemon_t d;
    const char *extra[] = {"--drain-timeout-ms", "20000", NULL};
    mxt_daemon_start(&d, extra);
    const char *libs[] = {"crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&d, libs);
    pid_t worker = mxt_worker_pid(c);
    cr_assert(worker > 0);
    slow_call_t sc = {.c = c, .ms = "2500"};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, slow_call_thread, &sc), 0);
    while (!sc.started)
        mxt_sleep_ms(5);
    mxt_sleep_ms(500); /* The call is published and running in the worker. */
    double t0 = now_ms();
    cr_assert_eq(kill(d.pid, SIGTERM), 0);

    /* It stops accepting at once: the socket goes, and a new client is refused. */
    cr_assert(wait_gone(d.sock, 3000), "the socket is still there while draining");
    mxop_client_t *late = NULL;
    int rc = mxop_connect(d.sock, NULL, &late);
    cr_assert_neq(rc, 0, "a new client was accepted while draining");
    cr_assert(mxt_daemon_alive(&d), "the daemon did not wait for the call in flight");

    pthread_join(t, NULL);
    cr_assert_eq(sc.rc, 0, "the call in flight failed: %s (%s)", mxop_err_name(sc.rc), sc.msg);
    int st = wait_exit(d.pid, 15000);
    double took = now_ms() - t0;
    d.pid = 0;
    cr_assert(st != -1, "the daemon did not stop after the call finished");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    cr_assert(took < 20000, "stopping took %.0f ms", took);
    cr_assert_eq(mxt_session_procs(worker), 0, "a worker outlived the daemon");
    mxop_close(c);
    mxt_daemon_stop(&d);
}

Test(service, sigterm_stops_at_the_drain_bound_when_a_call_runs_on, .timeout = 60)
{
    mxt_daemon_t d;
    const char *extra[] = {"--drain-timeout-ms", "500", NULL};
    mxt_daemon_start(&d, extra);
    const char *libs[] = {"crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&d, libs);
    pid_t worker = mxt_worker_pid(c);
    slow_call_t sc = {.c = c, .ms = "30000"};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, slow_call_thread, &sc), 0);
    while (!sc.started)
        mxt_sleep_ms(5);
    mxt_sleep_ms(500);
    double t0 = now_ms();
    cr_assert_eq(kill(d.pid, SIGTERM), 0);
    int st = wait_exit(d.pid, 15000);
    double took = now_ms() - t0;
    d.pid = 0;
    cr_assert(st != -1, "the daemon did not stop within 15 s of SIGTERM");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    /* The bound (0.5 s) plus generous slack for a loaded machine, far below the call's 30 s. */
    cr_assert(took < 10000, "stopping took %.0f ms", took);
    pthread_join(t, NULL);
    cr_assert_neq(sc.rc, 0, "the 30 s call cannot have finished");
    cr_assert(mxt_session_procs(worker) == 0, "a worker outlived the daemon");
    mxop_close(c);
    mxt_daemon_stop(&d);
}

/* ------------------------------------------------------------------------ */
/* Socket activation */

static int listening_socket(const char *path, int do_listen)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind: %s", strerror(errno));
    if (do_listen)
        cr_assert_eq(listen(fd, 16), 0);
    return fd;
}

Test(service, socket_activation_serves_the_passed_socket, .timeout = 60)
{
    char dir[] = "/tmp/mxop-svc-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char sock[256], errp[256], plugins[256], text[8192];
    snprintf(sock, sizeof(sock), "%s/act.sock", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    snprintf(plugins, sizeof(plugins), "%s/plugins", mxt_build_dir());
    int fd = listening_socket(sock, 1);
    const char *args[] = {"--socket", sock, "--plugin-dir", plugins, NULL};
    pid_t pid = spawn_daemon(args, fd, errp);
    close(fd);

    /* The socket exists before the daemon runs: connect until it answers (at most 10 s). */
    mxop_client_t *c = NULL;
    int rc = -1;
    for (int waited = 0; waited < 10000 && rc != 0; waited += 50) {
        rc = mxop_connect(sock, NULL, &c);
        if (rc != 0)
            mxt_sleep_ms(50);
    }
    read_text(errp, text, sizeof(text));
    cr_assert_eq(rc, 0, "no daemon answered on the passed socket: %s", text);
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    relu_once(c);
    mxop_close(c);

    kill(pid, SIGTERM);
    int st = wait_exit(pid, 15000);
    read_text(errp, text, sizeof(text));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x: %s", st, text);
    cr_assert(strstr(text, "service manager passed") != NULL, "not activated: %s", text);
    /* The socket file belongs to the service manager: the daemon leaves it. */
    cr_assert_eq(access(sock, F_OK), 0, "the daemon removed a socket it did not create");
    unlink(sock);
    unlink(errp);
    rmdir(dir);
}

Test(service, socket_activation_refuses_a_socket_that_does_not_listen, .timeout = 30)
{
    char dir[] = "/tmp/mxop-svc-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char sock[256], errp[256], plugins[256], text[8192];
    snprintf(sock, sizeof(sock), "%s/act.sock", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    snprintf(plugins, sizeof(plugins), "%s/plugins", mxt_build_dir());
    int fd = listening_socket(sock, 0);
    const char *args[] = {"--socket", sock, "--plugin-dir", plugins, NULL};
    pid_t pid = spawn_daemon(args, fd, errp);
    close(fd);
    int st = wait_exit(pid, 10000);
    read_text(errp, text, sizeof(text));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "status 0x%x: %s", st, text);
    cr_assert(strstr(text, "listening Unix stream socket") != NULL, "got: %s", text);
    unlink(sock);
    unlink(errp);
    rmdir(dir);
}

/* A second signal while draining stops the daemon without waiting out the bound. */
Test(service, a_second_signal_while_draining_stops_at_once, .timeout = 60)
{
    mxt_daemon_t d;
    const char *extra[] = {"--drain-timeout-ms", "60000", NULL};
    mxt_daemon_start(&d, extra);
    const char *libs[] = {"crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&d, libs);
    pid_t worker = mxt_worker_pid(c);
    slow_call_t sc = {.c = c, .ms = "30000"};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, slow_call_thread, &sc), 0);
    while (!sc.started)
        mxt_sleep_ms(5);
    mxt_sleep_ms(500);
    cr_assert_eq(kill(d.pid, SIGTERM), 0);
    cr_assert(wait_gone(d.sock, 3000), "the socket is still there while draining");
    mxt_sleep_ms(300);
    cr_assert(mxt_daemon_alive(&d), "the daemon did not wait for the call in flight");
    double t0 = now_ms();
    cr_assert_eq(kill(d.pid, SIGINT), 0);
    int st = wait_exit(d.pid, 15000);
    double took = now_ms() - t0;
    d.pid = 0;
    cr_assert(st != -1, "the daemon did not stop after the second signal");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    cr_assert(took < 10000, "stopping took %.0f ms after the second signal", took);
    pthread_join(t, NULL);
    cr_assert_neq(sc.rc, 0, "the 30 s call cannot have finished");
    cr_assert_eq(mxt_session_procs(worker), 0, "a worker outlived the daemon");
    mxop_close(c);
    mxt_daemon_stop(&d);
}

/* Until the file at path contains `needle` or ms pass; 1 if it does. */
static int wait_text(const char *path, const char *needle, int ms)
{
    char text[16384];
    for (int waited = 0; waited <= ms; waited += 20) {
        read_text(path, text, sizeof(text));
        if (strstr(text, needle) != NULL)
            return 1;
        mxt_sleep_ms(20);
    }
    return 0;
}

/* What cannot change at run time is named in the log as ignored; the rest is applied. */
Test(service, sighup_logs_what_cannot_change_as_ignored, .timeout = 60)
{
    char dir[] = "/tmp/mxop-svc-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char conf[256], errp[256], sock[256], plugins[256], text[16384];
    snprintf(conf, sizeof(conf), "%s/mxop.conf", dir);
    snprintf(errp, sizeof(errp), "%s/err", dir);
    snprintf(sock, sizeof(sock), "%s/s.sock", dir);
    snprintf(plugins, sizeof(plugins), "%s/plugins", mxt_build_dir());
    write_file(conf, "sandbox = strict\nsession-max-regions = 100\nwarm-spare = on\n");
    const char *args[] = {"--config", conf, "--socket", sock, "--plugin-dir", plugins, NULL};
    pid_t pid = spawn_daemon(args, -1, errp);
    for (int waited = 0; waited < 10000 && access(sock, F_OK) != 0; waited += 20)
        mxt_sleep_ms(20);
    read_text(errp, text, sizeof(text));
    cr_assert_eq(access(sock, F_OK), 0, "the daemon did not start: %s", text);

    write_file(conf, "sandbox = basic\nsession-max-regions = 200\nwarm-spare = on\n");
    cr_assert_eq(kill(pid, SIGHUP), 0);
    int ok = wait_text(errp, "session-max-regions 200", 10000);
    read_text(errp, text, sizeof(text));
    cr_assert(ok, "the new limit was not reported: %s", text);
    cr_assert(strstr(text, "reload: --sandbox changed") != NULL, "sandbox not named: %s", text);
    cr_assert(strstr(text, "--warm-spare changed") == NULL, "an unchanged key was named: %s", text);
    cr_assert(strstr(text, "--session-max-regions changed") == NULL,
              "a reloadable key was called ignored: %s", text);

    kill(pid, SIGTERM);
    int st = wait_exit(pid, 15000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    cr_assert(access(sock, F_OK) != 0, "the socket was left behind");
    unlink(conf);
    unlink(errp);
    rmdir(dir);
}
