/*
 * tests/test_lifecycle.c - the daemon's start and stop, both directions of
 * death, and no leaked descriptors or shared memory.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(lifecycle, .init = setup, .fini = teardown, .timeout = 60);

static void one_busy_session(int crash)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {1 << 16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    uint32_t region;
    void *base;
    cr_assert_eq(mxop_region_create(c, 1 << 20, &region, &base), 0);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0);
    if (crash)
        cr_assert_eq(mxop_forward(c, mxt_op(c, "segv"), NULL, &x, 1, &y, 1), MXOP_EWORKER_CRASHED);
    cr_assert_eq(mxop_region_release(c, region), 0);
    mxop_close(c);
}

struct counts {
    pid_t pid;
    int fds, memfds;
};

static int back_to(void *arg)
{
    struct counts *want = arg;
    pid_t kids[8];
    return mxt_fd_count(want->pid) == want->fds && mxt_memfd_count(want->pid) == want->memfds &&
           mxt_children(want->pid, kids, 8) == 0;
}

static int no_children(void *arg)
{
    pid_t kids[8];
    return mxt_children(*(pid_t *)arg, kids, 8) == 0;
}

Test(lifecycle, no_fd_or_shared_memory_leak)
{
    /* Warm up once so that lazily opened descriptors are counted in the baseline. */
    one_busy_session(0);
    /* The baseline is taken once that session is gone (its workers reaped, its regions closed). */
    cr_assert(mxt_wait_until(no_children, &daemon_.pid, 5000),
              "the warm-up session's workers live on");
    struct timespec settle = {0, 50 * 1000000L};
    nanosleep(&settle, NULL);
    struct counts daemon_before = {daemon_.pid, mxt_fd_count(daemon_.pid),
                                   mxt_memfd_count(daemon_.pid)};
    int client_fds = mxt_fd_count(getpid());
    for (int i = 0; i < 10; i++)
        one_busy_session(i % 2);
    cr_assert(mxt_wait_until(back_to, &daemon_before, 5000),
              "daemon: %d fds (%d memfds) before, %d (%d) after", daemon_before.fds,
              daemon_before.memfds, mxt_fd_count(daemon_.pid), mxt_memfd_count(daemon_.pid));
    cr_assert_eq(mxt_fd_count(getpid()), client_fds, "the client leaked descriptors");
}

Test(lifecycle, closing_a_client_ends_its_worker)
{
    mxop_client_t *c = mxt_connect(&daemon_);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert(st.worker_pid > 0);
    cr_assert_eq(kill((pid_t)st.worker_pid, 0), 0);
    mxop_close(c);
    int gone = 0;
    for (int i = 0; i < 500 && !gone; i++) {
        gone = kill((pid_t)st.worker_pid, 0) != 0;
        if (!gone) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert(gone, "worker %u outlived its session", st.worker_pid);
}

Test(lifecycle, daemon_killed_mid_session_is_reported)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    mxt_daemon_kill(&daemon_, SIGKILL);
    const char *attrs[] = {"ms", "200", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 5000};
    /* The worker dies with its daemon; the call fails promptly, it does not hang. */
    int rc = mxop_forward(c, mxt_op(c, "sleep"), &call, &x, 1, &y, 1);
    cr_assert(rc == MXOP_EDISCONNECTED || rc == MXOP_EWORKER_CRASHED, "got %s (%s)",
              mxop_err_name(rc), mxop_last_error(c));
    rc = mxop_stats(c, &st);
    cr_assert_eq(rc, MXOP_EDISCONNECTED, "got %s", mxop_err_name(rc));
    mxop_close(c);
    /* Restart so the fini's clean-stop check has a daemon to stop. */
    mxt_daemon_stop(&daemon_);
    mxt_daemon_start(&daemon_, NULL);
}

Test(lifecycle, second_daemon_on_the_same_socket_refuses)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/bin/mxop-serverd", mxt_build_dir());
    char cmd[1600];
    snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' --plugin-dir '%s' --log-level error", path,
             daemon_.sock, daemon_.plugins);
    int status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0, "second daemon started");
    /* The first one still answers. */
    mxop_client_t *c = mxt_connect(&daemon_);
    mxop_close(c);
}

Test(lifecycle, bad_command_line_is_refused)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/bin/mxop-serverd", mxt_build_dir());
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "'%s' --socket /tmp/x.sock --plugin-dir /nonexistent 2>/dev/null",
             path);
    int status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    snprintf(cmd, sizeof(cmd), "'%s' --bogus 2>/dev/null", path);
    status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

Test(lifecycle, socket_is_owner_only)
{
    struct stat st;
    cr_assert_eq(stat(daemon_.sock, &st), 0);
    cr_assert_eq(st.st_mode & 077, 0, "socket mode %o", st.st_mode & 0777);
}
