/*
 * tests/test_upgrade.c - upgrading mxop-serverd under running clients
 * (--take-over, server/daemon/core/handover.c): the new daemon takes the old
 * one's listening socket, new clients go to it with none refused, the old
 * one's sessions run on with the same results and it exits once they have
 * left (a SIGTERM then waits for them too); a new daemon that fails to
 * start leaves the old one serving.
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
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tests/harness.h"

static mxt_daemon_t old_;
static pid_t new_pid;

/* Stops the new daemon (asserting a clean exit when `check`), then the old one and its dir. */
static void stop_new(int check)
{
    if (new_pid > 0) {
        kill(new_pid, SIGTERM);
        int status = 0;
        pid_t r = 0;
        for (int i = 0; i < 2000 && r != new_pid; i++) {
            r = waitpid(new_pid, &status, WNOHANG);
            if (r != new_pid)
                mxt_sleep_ms(10);
        }
        if (r != new_pid) {
            kill(new_pid, SIGKILL);
            waitpid(new_pid, &status, 0);
        }
        if (check)
            cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "the new daemon did not stop cleanly (0x%x)", status);
        new_pid = 0;
    }
}

static void fini(void)
{
    stop_new(0);
    mxt_daemon_stop(&old_);
}

/* Starts mxop-serverd --take-over on the old daemon's socket and plugins, with `extra`. */
static pid_t start_new(const char *const *extra)
{
    char prog[512];
    snprintf(prog, sizeof(prog), "%s/bin/mxop-serverd", mxt_build_dir());
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        const char *argv[24] = {prog,
                                "--socket",
                                old_.sock,
                                "--plugin-dir",
                                old_.plugins,
                                "--log-level",
                                getenv("MXOP_TEST_LOG") ? "debug" : "warn",
                                "--take-over"};
        int n = 8;
        for (int i = 0; extra != NULL && extra[i] != NULL && n < 23; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* The pid of the daemon that answers at the socket now (`mxop health --live`), or -1. */
static long serving_pid(const char *sock)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxop health --live --timeout-ms 5000 --socket %s 2>&1",
             mxt_build_dir(), sock);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    char line[512] = "";
    long pid = -1;
    if (fgets(line, sizeof(line), p) != NULL) {
        const char *at = strstr(line, ", pid ");
        if (at != NULL)
            pid = strtol(at + 6, NULL, 10);
    }
    pclose(p);
    return pid;
}

/* Waits up to 12 s for daemon `pid` to answer at `sock`; returns the pid that answers last. */
static long take_over_done(const char *sock, pid_t pid)
{
    long now = -1;
    for (int i = 0; i < 600 && now != (long)pid; i++) {
        now = serving_pid(sock);
        if (now != (long)pid)
            mxt_sleep_ms(20);
    }
    return now;
}

/* One fresh client: connect, relu, close; NULL or what failed. */
static const char *fresh_client(const char *sock, char *why, size_t len)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {.struct_size = sizeof(o), .timeout_ms = 20000};
    int rc = mxop_connect(sock, &o, &c);
    if (rc != 0) {
        snprintf(why, len, "mxop_connect: %s: %s", mxop_err_name(rc), mxop_connect_error());
        return why;
    }
    rc = mxop_load_library(c, "relu.so");
    const char *bad = NULL;
    if (rc != 0) {
        snprintf(why, len, "load relu.so: %s: %s", mxop_err_name(rc), mxop_last_error(c));
        bad = why;
    } else {
        bad = mxt_relu_calls(c, 3, 3, why, len);
    }
    mxop_close(c);
    return bad;
}

/*
 * A session runs calls in a loop through the upgrade (same results, no
 * error), new clients are served all along and end up at the new daemon,
 * and the old daemon exits by itself once its last client has left.
 */
Test(upgrade, take_over_keeps_sessions_and_refuses_no_one, .timeout = 120, .fini = fini)
{
    mxt_daemon_start(&old_, NULL);
    const char *libs[] = {"relu.so", NULL};
    mxt_relu_caller_t k = {.c = mxt_connect_with(&old_, libs), .who = 7, .calls = 20};
    pthread_t th;
    cr_assert(pthread_create(&th, NULL, mxt_relu_caller, &k) == 0);

    new_pid = start_new(NULL);
    char why[512];
    int fresh = 0, moved = 0;
    for (int i = 0; i < 600 && !(moved && fresh >= 5); i++) {
        const char *bad = fresh_client(old_.sock, why, sizeof(why));
        cr_assert(bad == NULL, "a new client during the upgrade: %s", bad);
        fresh++;
        moved = serving_pid(old_.sock) == (long)new_pid;
        if (!moved)
            mxt_sleep_ms(20);
    }
    cr_assert(moved, "the new daemon %d never answered at the socket", (int)new_pid);
    int before = k.rounds;
    for (int i = 0; i < 500 && k.rounds < before + 3 && k.why[0] == '\0'; i++)
        mxt_sleep_ms(10);
    k.stop = 1;
    pthread_join(th, NULL);
    cr_assert(k.why[0] == '\0', "the session's calls through the upgrade: %s", k.why);
    cr_expect(k.rounds >= before + 3, "the session made no calls after the upgrade");
    cr_expect(mxt_daemon_alive(&old_), "the old daemon ended while its session ran");

    /* The session's worker is still the old daemon's child: its calls never moved. */
    mxop_close(k.c);
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 1500 && r != old_.pid; i++) {
        r = waitpid(old_.pid, &status, WNOHANG);
        if (r != old_.pid)
            mxt_sleep_ms(10);
    }
    cr_assert_eq(r, old_.pid, "the old daemon did not exit after its last client left");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "old daemon exit 0x%x", status);
    old_.pid = 0;
    cr_assert(fresh_client(old_.sock, why, sizeof(why)) == NULL,
              "the socket after the old daemon left: %s", why);
    stop_new(1);
    cr_expect(access(old_.sock, F_OK) != 0, "the new daemon left the socket behind");
}

/* Runs the first half of a take-over (TAKE-OVER, the socket received) and dies: a crashed start. */
static void half_take_over(const char *sock)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.90s.takeover", sock);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0)
            _exit(2);
        char line[64];
        snprintf(line, sizeof(line), "TAKE-OVER %d\n", (int)getpid());
        if (write(s, line, strlen(line)) != (ssize_t)strlen(line))
            _exit(3);
        char buf[64];
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t n = recvmsg(s, &mh, 0);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (n <= 0 || c == NULL || c->cmsg_type != SCM_RIGHTS)
            _exit(4);
        _exit(0); /* the received socket and the connection close with the process */
    }
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the half take-over did not get the socket (exit 0x%x)", status);
}

/*
 * An upgrade whose new daemon fails to start rolls back: a bad option, or a
 * start that dies after receiving the socket, leaves the old daemon serving
 * its session and new clients; a later take-over still works.
 */
Test(upgrade, a_failed_start_leaves_the_old_daemon_serving, .timeout = 120, .fini = fini)
{
    mxt_daemon_start(&old_, NULL);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&old_, libs);
    char why[512];

    const char *bad_opt[] = {"--sandbox", "sideways", NULL};
    pid_t p = start_new(bad_opt);
    int status;
    waitpid(p, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "bad option: exit 0x%x", status);

    half_take_over(old_.sock);
    mxt_sleep_ms(200);
    cr_assert(mxt_daemon_alive(&old_), "the old daemon died");
    cr_assert_eq(serving_pid(old_.sock), (long)old_.pid, "the old daemon no longer answers");
    cr_assert(mxt_relu_calls(c, 5, 20, why, sizeof(why)) == NULL, "its session: %s", why);
    cr_assert(fresh_client(old_.sock, why, sizeof(why)) == NULL, "a new client: %s", why);

    /* The failed attempts did not wedge the hand-over socket. */
    new_pid = start_new(NULL);
    cr_assert_eq(take_over_done(old_.sock, new_pid), (long)new_pid,
                 "a take-over after the failed ones did not happen");
    cr_assert(mxt_relu_calls(c, 5, 20, why, sizeof(why)) == NULL, "the old session: %s", why);
    mxop_close(c);
}

/*
 * A successor that stops half-way through a line on the hand-over socket
 * (a tracer, SIGSTOP) holds nothing but its own hand-over: the old
 * daemon's loop reads the line as it comes, so its clients are answered
 * meanwhile, and a peer that never finishes the line is dropped.
 */
Test(upgrade, a_stalled_successor_does_not_stall_the_loop, .timeout = 120, .fini = fini)
{
    mxt_daemon_start(&old_, NULL);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&old_, libs);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.90s.takeover", old_.sock);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(s >= 0);
    cr_assert_eq(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    cr_assert_eq(write(s, "TAKE", 4), 4);
    mxt_sleep_ms(200);
    /* Each round trip stays far below the 10 s a blocking read of the line would hold. */
    char why[512];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert(mxt_relu_calls(c, 5, 20, why, sizeof(why)) == NULL, "its session: %s", why);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0, "%s", mxop_last_error(c));
    cr_assert(fresh_client(old_.sock, why, sizeof(why)) == NULL, "a new client: %s", why);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_lt(took, 5.0, "the old daemon's clients waited %.1f s behind a half line", took);
    /* The half line is given up on after the hand-over's line timeout (10 s). */
    char buf[8];
    struct timeval tv = {30, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    cr_assert_eq(read(s, buf, sizeof(buf)), 0, "the stalled peer was not dropped");
    close(s);
    /* The hand-over socket still works for a real successor. */
    new_pid = start_new(NULL);
    cr_assert_eq(take_over_done(old_.sock, new_pid), (long)new_pid,
                 "a take-over after the stalled one did not happen");
    mxop_close(c);
}

/* --take-over with no daemon running: exit 1, a sentence naming the hand-over socket. */
Test(upgrade, take_over_without_a_daemon_says_so, .timeout = 30)
{
    char dir[] = "/tmp/mxop-upg-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char err[2048];
    const char *args[] = {"--take-over", NULL};
    int rc = mxt_daemon_exit_status(dir, dir, args, err, sizeof(err));
    cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "no daemon to take over") != NULL, "%s", err);
    rmdir(dir);
}

/*
 * A daemon that handed its socket over and is then stopped (SIGTERM: a
 * replaced pod) serves its session on until the client leaves, within
 * --drain-timeout-ms, then exits 0; before the hand-over, SIGTERM waits
 * only for calls in flight (test_service).
 */
Test(upgrade, sigterm_after_a_hand_over_waits_for_the_clients, .timeout = 120, .fini = fini)
{
    const char *args[] = {"--drain-timeout-ms", "60000", NULL};
    mxt_daemon_start(&old_, args);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&old_, libs);
    new_pid = start_new(NULL);
    cr_assert_eq(take_over_done(old_.sock, new_pid), (long)new_pid, "the take-over did not happen");
    cr_assert(kill(old_.pid, SIGTERM) == 0);
    char why[512];
    for (int i = 0; i < 10; i++) {
        mxt_sleep_ms(100);
        cr_assert(mxt_relu_calls(c, 9, 10, why, sizeof(why)) == NULL,
                  "the session after SIGTERM to its handed-over daemon: %s", why);
    }
    cr_assert(mxt_daemon_alive(&old_), "the old daemon stopped with its client connected");
    mxop_close(c);
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 1500 && r != old_.pid; i++) {
        r = waitpid(old_.pid, &status, WNOHANG);
        if (r != old_.pid)
            mxt_sleep_ms(10);
    }
    cr_assert_eq(r, old_.pid, "the old daemon did not exit after its client left");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "old daemon exit 0x%x", status);
    old_.pid = 0;
    cr_assert(fresh_client(old_.sock, why, sizeof(why)) == NULL, "the new daemon: %s", why);
}
