/*
 * tests/test_worker_start.c - a worker that cannot start says why
 * (server/daemon/worker/worker_output.c, server/daemon/worker/worker.c).
 *
 * A worker that dies at start-up writes its reason on stderr
 * ("mxop-worker: ...") and exits at once, often before the daemon's loop
 * has read the pipe.  Its last stderr line must still reach the daemon's
 * log before its death is reported, and the report the session gets must
 * carry it instead of a bare "exited with status 2".  The worker here is a
 * stand-in script passed with --worker, under every sandbox level.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define REASON "mxop-worker: cannot start: the stand-in of this test refuses"

static mxt_daemon_t daemon_;
static char script_dir[64];
static char script[128];

static void write_script(const char *interpreter)
{
    snprintf(script_dir, sizeof(script_dir), "/tmp/mxt-wstart-XXXXXX");
    cr_assert(mkdtemp(script_dir) != NULL);
    chmod(script_dir, 0755);
    snprintf(script, sizeof(script), "%s/worker.sh", script_dir);
    FILE *f = fopen(script, "we");
    cr_assert(f != NULL);
    fprintf(f, "#!%s\necho '" REASON "' >&2\nexit 2\n", interpreter);
    fclose(f);
    cr_assert_eq(chmod(script, 0755), 0);
}

static void start(const char *sandbox)
{
    write_script("/bin/sh");
    const char *args[] = {"--worker", script, "--sandbox", sandbox, NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
    unlink(script);
    rmdir(script_dir);
}

/*
 * The session's error names the worker's last stderr line.  A request may
 * also find the worker gone before its exit was seen ("cannot forward ...:
 * worker crashed"); the next one then gets the exit's report, so a few are
 * tried, and every report of the exit must carry the reason.
 */
static void expect_reason(void)
{
    mxop_client_t *c = NULL;
    int rc = mxop_connect(daemon_.sock, NULL, &c);
    if (rc != 0) {
        const char *msg = mxop_connect_error();
        cr_assert(strstr(msg, REASON) != NULL, "%s: %s", mxop_err_name(rc), msg);
        cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
        return;
    }
    int reported = 0;
    for (int i = 0; i < 10 && reported == 0; i++) {
        rc = mxop_load_library(c, "relu.so");
        const char *msg = mxop_last_error(c);
        cr_assert_neq(rc, 0, "a session without a worker loaded a library");
        if (strstr(msg, "exited with status 2") == NULL)
            continue;
        cr_assert(strstr(msg, REASON) != NULL, "the reason is missing: %s: %s", mxop_err_name(rc),
                  msg);
        reported++;
    }
    cr_assert_eq(reported, 1, "no request was told how the worker exited");
    mxop_close(c);
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
}

Test(worker_start, strict_says_why_the_worker_exited, .fini = teardown, .timeout = 60)
{
    start("strict");
    expect_reason();
}

Test(worker_start, basic_says_why_the_worker_exited, .fini = teardown, .timeout = 60)
{
    start("basic");
    expect_reason();
}

/*
 * A worker that cannot even be executed (its interpreter is missing: execve
 * fails with ENOENT after the clone) is a failed start with the errno
 * named, as with uv_spawn, and leaves no process, descriptor or cgroup.
 */
Test(worker_start, a_failed_exec_is_named_and_leaves_nothing, .fini = teardown, .timeout = 60)
{
    write_script("/nonexistent/mxt-sh");
    const char *args[] = {"--worker", script, NULL};
    mxt_daemon_start(&daemon_, args);
    mxt_baseline_t base;
    for (int i = 0; i < 4; i++) {
        /*
         * The baseline after the first attempt: libuv opens a reserve
         * descriptor (/dev/null) once per loop, at its first stream, which
         * a daemon whose workers never start meets only here.
         */
        if (i == 1)
            base = mxt_baseline_take(&daemon_);
        mxop_client_t *c = NULL;
        int rc = mxop_connect(daemon_.sock, NULL, &c);
        const char *msg = rc == 0 ? NULL : mxop_connect_error();
        if (rc == 0) {
            rc = mxop_load_library(c, "relu.so");
            msg = mxop_last_error(c);
        }
        cr_assert_neq(rc, 0, "a session without a worker succeeded");
        cr_assert(strstr(msg, "cannot start worker") != NULL &&
                      strstr(msg, strerror(ENOENT)) != NULL,
                  "%s: %s", mxop_err_name(rc), msg);
        if (c != NULL)
            mxop_close(c);
    }
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    mxt_baseline_expect(&base);
}
