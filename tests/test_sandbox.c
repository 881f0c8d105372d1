/*
 * tests/test_sandbox.c - the workers' sandbox, tested from inside and out.
 *
 * From inside: tests/plugins/probe.c tries every operation a strict worker
 * must be refused (tracing the daemon, reading its memory, mounting,
 * loading modules, executing programs, forking, network sockets,
 * connecting to the daemon, changing user, ...) and the test fails if any
 * one is not refused.  From outside: the limits, the seccomp mode, the
 * capabilities, no_new_privs in /proc/<worker>/.  Then the levels below
 * strict, and a separate uid with a network namespace when run as root.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

static void setup_strict(void)
{
    /* The defaults, but a known memory budget to look for in the limits. */
    const char *args[] = {"--worker-memory-mb", "512", "--worker-max-fds", "256", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void setup_none(void)
{
    const char *args[] = {"--sandbox", "none", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(sandbox, .init = setup_strict, .fini = teardown, .timeout = 60);
TestSuite(sandbox_basic, .init = setup_basic, .fini = teardown, .timeout = 60);
TestSuite(sandbox_none, .init = setup_none, .fini = teardown, .timeout = 60);
TestSuite(sandbox_uid, .fini = teardown, .timeout = 60);

/* The order of out[] of tests/plugins/probe.c. */
static const char *const probes[] = {
    "ptrace_traceme",
    "ptrace_attach_daemon",
    "process_vm_readv",
    "open_daemon_mem",
    "kill_daemon",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "bpf",
    "perf_event_open",
    "execve",
    "fork",
    "socket_inet",
    "socket_inet6",
    "socket_packet",
    "socket_netlink",
    "connect_daemon",
    "bind_unix_path",
    "mknod_char",
    "keyctl",
    "unshare",
    "setns",
    "personality",
    "io_uring_setup",
    "reboot",
    "swapon",
    "setuid",
};
#define N_PROBES ((int)(sizeof(probes) / sizeof(probes[0])))

static int probe_index(const char *name)
{
    for (int i = 0; i < N_PROBES; i++)
        if (strcmp(probes[i], name) == 0)
            return i;
    cr_assert_fail("no probe named %s", name);
    return -1;
}

/* Runs the probe in a fresh session; out[] into r.  Returns the call's status. */
static int run_probe(double *r, char *msg, size_t msglen)
{
    const char *libs[] = {"probe.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    char pid[24];
    snprintf(pid, sizeof(pid), "%d", (int)daemon_.pid);
    const char *attrs[] = {"daemon_pid", pid, "socket", daemon_.sock, "dir", daemon_.dir, NULL};
    int64_t s1[] = {1};
    int64_t sn[] = {N_PROBES};
    mxop_array_t x, y;
    cr_assert_eq(mxop_array_alloc(c, MXOP_F64, 1, s1, &x), 0);
    cr_assert_eq(mxop_array_alloc(c, MXOP_F64, 1, sn, &y), 0);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 20000};
    int rc = mxop_forward(c, mxt_op(c, "sandbox_probe"), &call, &x, 1, &y, 1);
    snprintf(msg, msglen, "%s", mxop_last_error(c));
    memcpy(r, y.data, sizeof(double) * N_PROBES);
    mxop_close(c);
    return rc;
}

Test(sandbox, probe_from_inside_finds_everything_refused)
{
    double r[N_PROBES];
    char msg[1024];
    int rc = run_probe(r, msg, sizeof(msg));
    char allowed[1024] = "";
    size_t at = 0;
    for (int i = 0; i < N_PROBES; i++)
        if (r[i] >= 0 && at + 1 < sizeof(allowed))
            at += (size_t)snprintf(allowed + at, sizeof(allowed) - at, " %s", probes[i]);
    cr_assert_eq(rc, 0, "the probe says: %s (%s)", msg, mxop_err_name(rc));
    cr_assert_str_empty(allowed, "not refused:%s", allowed);
    /*
     * The connection to the daemon: the socket is not in the worker's minimal root
     * (server/worker/namespaces.c: ENOENT); without namespaces the daemon refuses it
     * (ECONNRESET), or the kernel does before it (EACCES: workers run under the
     * unprivileged uid a root daemon gives them, and the socket's directory is root's).
     */
    double conn = r[probe_index("connect_daemon")];
    cr_assert(conn == -(double)ENOENT || conn == -(double)ECONNRESET || conn == -(double)EACCES,
              "connect_daemon: %g", conn);
    cr_assert(mxt_daemon_alive(&daemon_));
}

Test(sandbox, limits_filter_and_capabilities_seen_from_outside)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    char v[256];
    cr_assert_eq(mxt_proc_field(w, "status", "Seccomp:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "2", "Seccomp: %s (2 is a filter)", v);
    cr_assert_eq(mxt_proc_field(w, "status", "NoNewPrivs:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "1");
    cr_assert_eq(mxt_proc_field(w, "status", "CapEff:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "0000000000000000", "CapEff: %s", v);
    cr_assert_eq(mxt_proc_field(w, "status", "CapBnd:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "0000000000000000", "CapBnd: %s", v);

    cr_assert_eq(mxt_proc_field(w, "limits", "Max core file size", v, sizeof(v)), 0);
    cr_assert(strncmp(v, "0                    0", 22) == 0, "core: '%s'", v);
    cr_assert_eq(mxt_proc_field(w, "limits", "Max open files", v, sizeof(v)), 0);
    cr_assert(strncmp(v, "256                  256", 24) == 0, "open files: '%s'", v);
    /* RLIMIT_DATA: the worker's data at start plus the 512 MiB budget, soft = hard. */
    cr_assert_eq(mxt_proc_field(w, "limits", "Max data size", v, sizeof(v)), 0);
    unsigned long long soft = 0, hard = 0;
    cr_assert_eq(sscanf(v, "%llu %llu", &soft, &hard), 2, "data: '%s'", v);
    cr_assert_eq(soft, hard);
    cr_assert(soft >= (512ull << 20), "data limit %llu", soft);
    char data[64];
    cr_assert_eq(mxt_proc_field(w, "status", "VmData:", data, sizeof(data)), 0);
    unsigned long long vm_kb = strtoull(data, NULL, 10);
    cr_assert(soft <= vm_kb * 1024 + (512ull << 20) + (64ull << 20),
              "data limit %llu for %llu kB in use", soft, vm_kb);
    mxop_close(c);
}

Test(sandbox, the_spare_is_sandboxed_too)
{
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    mxt_sleep_ms(200);
    /* After a crash the spare serves: it must be as confined as the first worker was. */
    cr_assert_eq(mxop_forward(c, mxt_op(c, "segv"), NULL, &x, 1, &y, 1), MXOP_EWORKER_CRASHED);
    pid_t w = mxt_worker_pid(c);
    char v[64];
    cr_assert_eq(mxt_proc_field(w, "status", "Seccomp:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "2");
    cr_assert_eq(mxt_proc_field(w, "status", "CapEff:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "0000000000000000");
    mxop_close(c);
    double r[N_PROBES];
    char msg[1024];
    cr_assert_eq(run_probe(r, msg, sizeof(msg)), 0, "%s", msg);
}

Test(sandbox_basic, kernel_interfaces_refused_programs_and_sockets_allowed)
{
    double r[N_PROBES];
    char msg[1024];
    run_probe(r, msg, sizeof(msg));
    static const char *const refused[] = {
        "ptrace_traceme",   "ptrace_attach_daemon",
        "process_vm_readv", "mount",
        "umount2",          "pivot_root",
        "chroot",           "init_module",
        "finit_module",     "delete_module",
        "kexec_load",       "bpf",
        "perf_event_open",  "keyctl",
        "unshare",          "setns",
        "personality",      "reboot",
        "swapon",           "connect_daemon",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        cr_assert(r[probe_index(refused[i])] < 0, "basic did not refuse %s (%s)", refused[i], msg);
    /* What only strict takes away. */
    static const char *const allowed[] = {"execve", "fork", "socket_inet", "socket_netlink"};
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        cr_assert(r[probe_index(allowed[i])] > 0, "basic refused %s", allowed[i]);
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    char v[64];
    cr_assert_eq(mxt_proc_field(mxt_worker_pid(c), "status", "Seccomp:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "2");
    mxop_close(c);
}

Test(sandbox_none, no_filter_no_limits)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    char v[256];
    cr_assert_eq(mxt_proc_field(w, "status", "Seccomp:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "0");
    /* What every level keeps: no_new_privs. */
    cr_assert_eq(mxt_proc_field(w, "status", "NoNewPrivs:", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "1");
    cr_assert_eq(mxt_proc_field(w, "limits", "Max data size", v, sizeof(v)), 0);
    cr_assert(strncmp(v, "unlimited", 9) == 0, "data: '%s'", v);
    mxop_close(c);
}

/* Whether a directory and all above it can be passed by others (the uid test needs that). */
static int world_traversable(const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    while (p[0] != '\0') {
        struct stat st;
        if (stat(p, &st) != 0 || !(st.st_mode & S_IXOTH))
            return 0;
        char *slash = strrchr(p, '/');
        if (slash == NULL || slash == p)
            break;
        *slash = '\0';
    }
    return 1;
}

Test(sandbox_uid, separate_user_and_network_namespace)
{
    if (geteuid() != 0)
        cr_skip_test("--worker-uid needs the tests to run as root");
    char worker[600];
    snprintf(worker, sizeof(worker), "%s/bin", mxt_build_dir());
    if (!world_traversable(worker))
        cr_skip_test("%s is not reachable by uid 65534", worker);
    const char *args[] = {"--worker-uid", "65534", NULL};
    mxt_daemon_start(&daemon_, args);
    /* The plugins must be readable by that user; the harness made the directory owner-only. */
    cr_assert_eq(chmod(daemon_.dir, 0755), 0);
    cr_assert_eq(chmod(daemon_.plugins, 0755), 0);

    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    char v[256];
    cr_assert_eq(mxt_proc_field(w, "status", "Uid:", v, sizeof(v)), 0);
    cr_assert(strncmp(v, "65534", 5) == 0, "Uid: %s", v);
    char mine[128], theirs[128];
    ssize_t n1 = readlink("/proc/self/ns/net", mine, sizeof(mine) - 1);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)w);
    ssize_t n2 = readlink(path, theirs, sizeof(theirs) - 1);
    cr_assert(n1 > 0 && n2 > 0);
    mine[n1] = theirs[n2] = '\0';
    cr_assert_str_neq(mine, theirs, "the worker shares our network namespace");
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    mxop_close(c);
    /* The probe's temporary entries go in a directory that user may write. */
    cr_assert_eq(chmod(daemon_.dir, 0777), 0);
    double r[N_PROBES];
    char msg[1024];
    cr_assert_eq(run_probe(r, msg, sizeof(msg)), 0, "%s", msg);
}
