/*
 * tests/test_pid1.c - a strict worker is pid 1 of its own pid namespace
 * (server/daemon/worker/spawn.c), and its deaths are reported as before.
 *
 * The kernel ignores the signals pid 1 sends itself while their action is
 * the default, so abort() or raise() alone would not end the worker; its
 * fault handler ends it with an exit status the daemon maps back to the
 * signal (server/worker/fault.c).  Faults of an instruction are forced by
 * the kernel and kill pid 1 as they kill any process.  Each way must be
 * reported as MXOP_EWORKER_CRASHED naming the op and the signal, and the
 * next call must get a new worker.  A signal with no fault meaning that
 * the worker raises itself (SIGTERM) is ignored now: the op returns.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static mxop_client_t *client;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
    const char *libs[] = {"pid1_signals.so", "relu.so", NULL};
    client = mxt_connect_with(&daemon_, libs);
}

static void teardown(void)
{
    mxop_close(client);
    client = NULL;
    mxt_daemon_stop(&daemon_);
}

TestSuite(pid1, .init = setup, .fini = teardown, .timeout = 60);

/* The innermost pid of host process `pid` (the last NSpid of its status), 0 if unknown. */
static long ns_pid_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    long last = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "NSpid:", 6) != 0)
            continue;
        char *p = line + 6, *end;
        for (long v = strtol(p, &end, 10); end != p; v = strtol(p, &end, 10)) {
            last = v;
            p = end;
        }
    }
    fclose(f);
    return last;
}

/* Runs `op` (attribute sig when `sig` > 0); returns its code, the message into msg. */
static int run(const char *op, int sig, char *msg, size_t len)
{
    cr_assert_eq(ns_pid_of(mxt_worker_pid(client)), 1, "the worker is not pid 1 of a namespace");
    char s_arg[16];
    snprintf(s_arg, sizeof(s_arg), "%d", sig);
    const char *attrs[] = {"sig", s_arg, NULL};
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 1, &x);
    mxt_array(client, MXOP_F32, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = sig > 0 ? attrs : NULL};
    int rc = mxop_forward(client, mxt_op(client, op), &call, &x, 1, &y, 1);
    snprintf(msg, len, "%s", mxop_last_error(client));
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
    return rc;
}

static void next_call_succeeds(void)
{
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(client, MXOP_F32, 1, s, 3, &x);
    mxt_array(client, MXOP_F32, 1, s, 4, &y);
    int rc = mxop_forward(client, mxt_op(client, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "the call after: %s: %s", mxop_err_name(rc), mxop_last_error(client));
    mxop_array_free(client, &x);
    mxop_array_free(client, &y);
}

static void expect_signal(const char *op, int sig, const char *name)
{
    char msg[1024];
    pid_t before = mxt_worker_pid(client);
    int rc = run(op, sig, msg, sizeof(msg));
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "%s(%d): %s: %s", op, sig, mxop_err_name(rc), msg);
    char want[64];
    snprintf(want, sizeof(want), "(%s)", name);
    cr_assert(strstr(msg, want) != NULL, "%s(%d): the message lacks %s: %s", op, sig, want, msg);
    cr_assert(strstr(msg, op) != NULL, "the message does not name the op: %s", msg);
    cr_assert(strstr(msg, "exited with status") == NULL, "reported as an exit: %s", msg);
    next_call_succeeds();
    cr_assert_neq(mxt_worker_pid(client), before, "the worker was not replaced");
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
}

Test(pid1, raised_crash_signals_are_reported_by_name)
{
    expect_signal("raise", SIGABRT, "SIGABRT");
    expect_signal("raise", SIGSEGV, "SIGSEGV");
    expect_signal("raise", SIGBUS, "SIGBUS");
    expect_signal("raise", SIGFPE, "SIGFPE");
    expect_signal("raise", SIGILL, "SIGILL");
}

Test(pid1, instruction_faults_are_reported_by_name)
{
    expect_signal("div_zero", 0, "SIGFPE");
    expect_signal("trap", 0, "SIGILL");
}

Test(pid1, a_raised_sigterm_is_ignored)
{
    char msg[1024];
    pid_t before = mxt_worker_pid(client);
    int rc = run("raise", SIGTERM, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "raise(SIGTERM): %s: %s", mxop_err_name(rc), msg);
    cr_assert_eq(mxt_worker_pid(client), before, "the worker was replaced");
    next_call_succeeds();
}
