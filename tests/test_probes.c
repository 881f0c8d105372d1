/*
 * tests/test_probes.c - what a service manager or a cluster sees of the
 * daemon: `mxop health --live` and `--ready` (their exit statuses, a hung
 * loop failing liveness), and systemd's notifications (READY=1, WATCHDOG=1,
 * STOPPING=1) on a NOTIFY_SOCKET, as docs/operations.md describes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tests/harness.h"

static mxt_daemon_t daemon_;

static void stop(void)
{
    if (daemon_.pid > 0) {
        kill(daemon_.pid, SIGCONT);
        mxt_daemon_stop(&daemon_);
    }
}

/*
 * Runs `mxop health ARGS` (NULL-terminated) against the daemon's socket;
 * returns its exit status (-1: killed), its stdout and stderr in out.
 */
static int health(const char *sock, const char *const *args, char *out, size_t outlen)
{
    char prog[512];
    snprintf(prog, sizeof(prog), "%s/bin/mxop", mxt_build_dir());
    int p[2];
    cr_assert(pipe(p) == 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        const char *argv[16] = {prog, "health", "--socket", sock};
        int n = 4;
        for (int i = 0; args[i] != NULL && n < 15; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t r;
    while ((r = read(p[0], out + got, outlen - 1 - got)) > 0 && got + (size_t)r < outlen - 1)
        got += (size_t)r;
    if (r > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A healthy idle daemon: live, and ready by starting a worker of the probe's own. */
Test(probes, live_and_ready_on_a_healthy_daemon, .timeout = 60, .fini = stop)
{
    mxt_daemon_start(&daemon_, NULL);
    char out[2048];
    const char *live[] = {"--live", NULL};
    int rc = health(daemon_.sock, live, out, sizeof(out));
    cr_assert_eq(rc, 0, "--live on a healthy daemon: exit %d: %s", rc, out);
    cr_assert(strstr(out, "live:") != NULL, "%s", out);
    const char *ready[] = {"--ready", NULL};
    rc = health(daemon_.sock, ready, out, sizeof(out));
    cr_assert_eq(rc, 0, "--ready on a healthy idle daemon: exit %d: %s", rc, out);
    cr_assert(strstr(out, "a new worker started") != NULL, "%s", out);
}

/* A running session's worker proves readiness: the probe starts no worker of its own. */
Test(probes, ready_reuses_a_running_sessions_worker, .timeout = 60, .fini = stop)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    char out[2048];
    const char *ready[] = {"--ready", NULL};
    int rc = health(daemon_.sock, ready, out, sizeof(out));
    cr_assert_eq(rc, 0, "--ready: exit %d: %s", rc, out);
    char want[64];
    snprintf(want, sizeof(want), "worker %d runs in the sandbox", (int)mxt_worker_pid(c));
    cr_assert(strstr(out, want) != NULL, "expected '%s' in: %s", want, out);
    mxop_close(c);
}

/* A daemon whose loop does not run (SIGSTOP) fails liveness within the timeout, then recovers. */
Test(probes, liveness_fails_when_the_loop_is_stopped, .timeout = 60, .fini = stop)
{
    mxt_daemon_start(&daemon_, NULL);
    cr_assert(kill(daemon_.pid, SIGSTOP) == 0);
    char out[2048];
    const char *live[] = {"--live", "--timeout-ms", "500", NULL};
    double t0 = now_ms();
    int rc = health(daemon_.sock, live, out, sizeof(out));
    double took = now_ms() - t0;
    cr_expect_eq(rc, 1, "--live on a stopped daemon: exit %d (want 1): %s", rc, out);
    cr_expect(strstr(out, "did not answer") != NULL, "%s", out);
    cr_expect(took < 20000, "the probe took %.0f ms", took);
    const char *ready[] = {"--ready", "--timeout-ms", "500", NULL};
    rc = health(daemon_.sock, ready, out, sizeof(out));
    cr_expect_eq(rc, 1, "--ready on a stopped daemon: exit %d (want 1): %s", rc, out);
    cr_assert(kill(daemon_.pid, SIGCONT) == 0);
    const char *live_again[] = {"--live", NULL};
    rc = health(daemon_.sock, live_again, out, sizeof(out));
    cr_assert_eq(rc, 0, "--live after SIGCONT: exit %d: %s", rc, out);
}

/* Nothing at the socket: exit 3; bad arguments: exit 2. */
Test(probes, exit_statuses_without_a_daemon_and_for_bad_arguments, .timeout = 30)
{
    char out[2048];
    const char *live[] = {"--live", NULL};
    int rc = health("/nonexistent-mxop-probe/mxop.sock", live, out, sizeof(out));
    cr_expect_eq(rc, 3, "no daemon: exit %d (want 3): %s", rc, out);
    const char *both[] = {"--live", "--ready", NULL};
    rc = health("/nonexistent-mxop-probe/mxop.sock", both, out, sizeof(out));
    cr_expect_eq(rc, 2, "--live --ready: exit %d (want 2): %s", rc, out);
    const char *bad[] = {"--ready", "--timeout-ms", "soon", NULL};
    rc = health("/nonexistent-mxop-probe/mxop.sock", bad, out, sizeof(out));
    cr_expect_eq(rc, 2, "--timeout-ms soon: exit %d (want 2): %s", rc, out);
    cr_expect(strstr(out, "--timeout-ms") != NULL, "%s", out);
}

/* Receives datagrams on fd until one contains `want` or ms pass; 1 when it came. */
static int await_note(int fd, const char *want, int ms, char *seen, size_t seenlen)
{
    double end = now_ms() + ms;
    seen[0] = '\0';
    while (now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[512];
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        snprintf(seen, seenlen, "%s", buf);
        if (strstr(buf, want) != NULL)
            return 1;
    }
    return 0;
}

/*
 * Under a service manager (NOTIFY_SOCKET, WATCHDOG_USEC): READY=1 once the
 * socket accepts, WATCHDOG=1 pings from the loop, none while the loop is
 * stopped, STOPPING=1 at SIGTERM.
 */
Test(probes, sd_notify_ready_watchdog_and_stopping, .timeout = 60, .fini = stop)
{
    char dir[] = "/tmp/mxop-notify-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof(path), "%.40s/notify", dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind: %s", strerror(errno));

    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    mxt_daemon_start(&daemon_, NULL);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");

    char seen[512];
    int ok = await_note(fd, "READY=1", 10000, seen, sizeof(seen));
    cr_expect(ok, "no READY=1 within 10 s (last: '%s')", seen);
    char mainpid[32];
    snprintf(mainpid, sizeof(mainpid), "MAINPID=%d", (int)daemon_.pid);
    cr_expect(strstr(seen, mainpid) != NULL, "READY without %s: '%s'", mainpid, seen);
    cr_expect(await_note(fd, "WATCHDOG=1", 5000, seen, sizeof(seen)), "no WATCHDOG=1 (last '%s')",
              seen);
    cr_expect(await_note(fd, "WATCHDOG=1", 5000, seen, sizeof(seen)),
              "no second WATCHDOG=1 (last '%s')", seen);

    /* A stopped loop sends nothing: drain what is queued, then listen a while. */
    cr_assert(kill(daemon_.pid, SIGSTOP) == 0);
    mxt_sleep_ms(100);
    char junk[512];
    while (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
        ;
    cr_expect(!await_note(fd, "WATCHDOG=1", 1000, seen, sizeof(seen)),
              "a stopped daemon still pinged the watchdog");
    cr_assert(kill(daemon_.pid, SIGCONT) == 0);
    cr_expect(await_note(fd, "WATCHDOG=1", 5000, seen, sizeof(seen)), "no ping after SIGCONT");

    kill(daemon_.pid, SIGTERM);
    cr_expect(await_note(fd, "STOPPING=1", 10000, seen, sizeof(seen)),
              "no STOPPING=1 at SIGTERM (last '%s')", seen);
    /* It stops by itself (a second SIGTERM could find the default action back). */
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 1000 && r != daemon_.pid; i++) {
        r = waitpid(daemon_.pid, &status, WNOHANG);
        if (r != daemon_.pid)
            mxt_sleep_ms(10);
    }
    cr_expect(r == daemon_.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the daemon did not stop cleanly at SIGTERM (0x%x)", status);
    if (r == daemon_.pid)
        daemon_.pid = 0;
    mxt_daemon_stop(&daemon_);
    close(fd);
    unlink(path);
    rmdir(dir);
}
