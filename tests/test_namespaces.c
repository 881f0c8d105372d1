/*
 * tests/test_namespaces.c - the strict worker's namespaces and minimal root
 * (server/worker/namespaces.c), seen from inside by the fixture
 * tests/plugins/hostile_ns.c and from outside by the test.
 *
 * Under strict (the tests run as root, where the daemon promises the
 * namespaces): a file outside the minimal root is absent; /proc lists only
 * the worker itself; /tmp is writable and private to the worker; the
 * control socket cannot be reached; the worker is pid 1 of a pid namespace
 * of its own, reaps the orphans given to it and takes them with it when it
 * is killed; the plugin directory cannot be
 * written; the network namespace has only lo, down.  After each: the
 * daemon alive, another session correct, no process left over, the
 * daemon's descriptors back to their baseline.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

/* A first session, so that the baselines count what the daemon keeps after one. */
static void warm_up(void)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0);
    mxop_close(c);
}

static void setup_strict(void)
{
    mxt_daemon_start(&daemon_, NULL);
    warm_up();
}

static void setup_gpu(void)
{
    const char *args[] = {"--sandbox-profile", "gpu", NULL};
    mxt_daemon_start(&daemon_, args);
    warm_up();
}

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    mxt_daemon_start(&daemon_, args);
    warm_up();
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(namespaces, .init = setup_strict, .fini = teardown, .timeout = 60);
TestSuite(namespaces_gpu, .init = setup_gpu, .fini = teardown, .timeout = 60);
TestSuite(namespaces_basic, .init = setup_basic, .fini = teardown, .timeout = 60);

#define NS_OUT 4

/* Runs one hostile_ns op with `attrs`; out[] gets what it found. */
static void probe(mxop_client_t *c, const char *op, const char *const *attrs, double *out)
{
    int64_t s[] = {NS_OUT};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, op), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s: %s", op, mxop_err_name(rc), mxop_last_error(c));
    for (int i = 0; i < NS_OUT; i++)
        out[i] = mxt_get(&y, (size_t)i);
}

static mxop_client_t *connect_ns(void)
{
    const char *libs[] = {"hostile_ns.so", NULL};
    return mxt_connect_with(&daemon_, libs);
}

static void expect_back_to(const mxt_baseline_t *b)
{
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    mxt_other_session_correct(&daemon_);
    /* No child left (workers of closed sessions gone) and descriptors as before. */
    mxt_baseline_expect(b);
}

static double open_in_worker(mxop_client_t *c, const char *path)
{
    const char *attrs[] = {"path", path, NULL};
    double r[NS_OUT];
    probe(c, "ns_open", attrs, r);
    return r[0];
}

/* Asserts that `mxop status` (the layers the daemon logged at start) says `what`. */
static void status_says(const char *what)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxop status --socket %s 2>&1", mxt_build_dir(),
             daemon_.sock);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    char out[8192];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    cr_assert(strstr(out, what) != NULL, "mxop status does not say '%s': %s", what, out);
}

/*
 * The innermost pid of host process `pid` (the last NSpid of its status),
 * 0 when it cannot be read: 1 for a worker that is pid 1 of its own pid
 * namespace, `pid` itself for one in the host's.
 */
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

/* Host pids of the processes whose comm is `name` (at most `max`), and how many there are. */
static int find_comm(const char *name, pid_t *pids, int max)
{
    DIR *d = opendir("/proc");
    cr_assert(d != NULL);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (e->d_name[0] == '\0' || *end != '\0')
            continue;
        char path[64], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof(comm), f) == NULL)
            comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
        if (strcmp(comm, name) == 0) {
            if (n < max)
                pids[n] = (pid_t)pid;
            n++;
        }
    }
    closedir(d);
    return n;
}

/* Waits up to `secs` seconds for no process named `name` to be left; true when none is. */
static bool none_left(const char *name, int secs)
{
    pid_t p[4];
    for (int i = 0; i < secs * 20; i++) {
        if (find_comm(name, p, 4) == 0)
            return true;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return find_comm(name, p, 4) == 0;
}

/*
 * What a library's processes would be, made from outside (under strict the
 * seccomp filter refuses a library fork): a process entered into the
 * worker's pid namespace forks a child that calls setsid() and stays
 * (comm "mxt-orphan"), and one that exits at once (comm "mxt-zombie"),
 * then exits itself, so both are orphans the kernel gives to the
 * namespace's pid 1, the worker.
 */
static void plant_orphans(pid_t worker)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)worker);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert(nsfd >= 0, "%s: %s", path, strerror(errno));
    pid_t helper = fork();
    cr_assert(helper >= 0);
    if (helper == 0) {
        /* Only the helper's children enter the namespace. */
        if (setns(nsfd, CLONE_NEWPID) != 0)
            _exit(10);
        pid_t child = fork();
        if (child < 0)
            _exit(11);
        if (child == 0) {
            if (fork() == 0) {
                setsid();
                prctl(PR_SET_NAME, "mxt-orphan");
                for (;;)
                    pause();
            }
            if (fork() == 0) {
                prctl(PR_SET_NAME, "mxt-zombie");
                struct timespec ts = {0, 200 * 1000 * 1000};
                nanosleep(&ts, NULL);
                _exit(0);
            }
            _exit(0);
        }
        int st;
        waitpid(child, &st, 0);
        _exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 12);
    }
    close(nsfd);
    int st;
    cr_assert_eq(waitpid(helper, &st, 0), helper);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the helper failed (status %d)", st);
}

/* ------------------------------------------------------------------------ */

Test(namespaces, files_outside_the_minimal_root_are_absent)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    /* A file the test made next to the socket and the plugin directory. */
    char secret[400];
    snprintf(secret, sizeof(secret), "%s/secret.txt", daemon_.dir);
    int fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert(fd >= 0, "%s: %s", secret, strerror(errno));
    cr_assert_eq(write(fd, "secret", 6), 6);
    close(fd);

    mxop_client_t *c = connect_ns();
    cr_assert_eq(open_in_worker(c, secret), -(double)ENOENT, "the harness's file");
    cr_assert_eq(open_in_worker(c, "/etc/shadow"), -(double)ENOENT, "/etc/shadow");
    cr_assert_eq(open_in_worker(c, "/root"), -(double)ENOENT, "/root");
    cr_assert_eq(open_in_worker(c, "/home"), -(double)ENOENT, "/home");
    cr_assert_eq(open_in_worker(c, daemon_.sock), -(double)ENOENT, "the control socket");
    /* What libraries need is there. */
    cr_assert_eq(open_in_worker(c, "/etc/ld.so.cache"), 1);
    cr_assert_eq(open_in_worker(c, "/dev/urandom"), 1);
    /* Nor is the plugin directory: libraries arrive as descriptors (server/daemon/session/libfd.c).
     */
    char lib[400];
    snprintf(lib, sizeof(lib), "%s/relu.so", daemon_.plugins);
    cr_assert_eq(open_in_worker(c, lib), -(double)ENOENT, "the plugin directory");
    mxop_close(c);
    expect_back_to(&base);
}

Test(namespaces, control_socket_cannot_be_reached)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    const char *attrs[] = {"path", daemon_.sock, NULL};
    double r[NS_OUT];
    probe(c, "ns_connect", attrs, r);
    cr_assert_eq(r[0], -(double)ENOENT, "connect to the control socket: %g", r[0]);
    /* Nor can anything be made in the socket's directory: it is not in the worker's root. */
    char evil[400];
    snprintf(evil, sizeof(evil), "%s/evil.sock", daemon_.dir);
    const char *cattrs[] = {"path", evil, NULL};
    probe(c, "ns_create", cattrs, r);
    cr_assert(r[0] == -(double)ENOENT || r[0] == -(double)EROFS || r[0] == -(double)EACCES,
              "create: %g", r[0]);
    mxop_close(c);
    cr_assert_neq(access(evil, F_OK), 0, "%s appeared", evil);
    expect_back_to(&base);
}

Test(namespaces, proc_lists_only_the_worker)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    double r[NS_OUT];
    probe(c, "ns_proc", NULL, r);
    cr_assert_eq(r[1], 1, "the worker does not see itself in /proc");
    cr_assert_eq(r[0], 1, "the worker sees %g processes in /proc", r[0]);
    /* pid 1 of a pid namespace of its own, and its /proc is that namespace's. */
    cr_assert_eq(r[2], 1, "the worker's getpid() is %g, not 1", r[2]);
    cr_assert_eq(r[3], 1, "/proc/self names pid %g, not 1", r[3]);
    pid_t w = mxt_worker_pid(c);
    cr_assert_eq(ns_pid_of(w), 1, "the daemon's pid for the worker is not its host pid");
    status_says("namespaces pid, mount, ipc, net, uts");
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)daemon_.pid);
    cr_assert_eq(open_in_worker(c, path), -(double)ENOENT, "the daemon's /proc entry");
    mxop_close(c);
    expect_back_to(&base);
}

Test(namespaces, orphans_are_reaped_and_die_with_the_worker)
{
    if (geteuid() != 0)
        cr_skip_test("entering the worker's pid namespace needs root");
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    pid_t w = mxt_worker_pid(c);
    plant_orphans(w);
    /*
     * The orphan that stays is the worker's child now; the one that exited is
     * reaped by it.  The orphan names itself after its fork: wait for that.
     */
    pid_t orphan[4];
    int found = 0;
    for (int i = 0; i < 100 && (found = find_comm("mxt-orphan", orphan, 4)) == 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(found, 1, "%d processes named mxt-orphan after 5 s", found);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)orphan[0]);
    FILE *f = fopen(path, "re");
    cr_assert(f != NULL);
    char buf[512];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    int ppid = 0;
    char state = 0;
    cr_assert_eq(sscanf(strrchr(buf, ')') + 1, " %c %d", &state, &ppid), 2);
    cr_assert_eq(ppid, (int)w, "the orphan's parent is %d, not the worker %d", ppid, (int)w);
    cr_assert(none_left("mxt-zombie", 10), "the worker did not reap the exited orphan");
    /*
     * The worker still serves, and its /proc (hidepid) still hides a process
     * of its namespace that is outside its Landlock domain, as this one,
     * entered from outside, is.
     */
    double r[NS_OUT];
    probe(c, "ns_proc", NULL, r);
    cr_assert_eq(r[0], 1, "the worker sees %g processes", r[0]);
    /* Killed (not closed: the daemon's own sweep plays no part), it takes the orphan with it. */
    cr_assert_eq(kill(w, SIGKILL), 0);
    cr_assert(none_left("mxt-orphan", 10), "an orphan outlived its worker");
    mxop_close(c);
    expect_back_to(&base);
}

Test(namespaces, tmp_is_writable_and_private)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    char name[64];
    snprintf(name, sizeof(name), "mxop-ns-note-%d", (int)getpid());
    const char *attrs[] = {"name", name, NULL};
    double r[NS_OUT];

    mxop_client_t *a = connect_ns();
    probe(a, "ns_tmp", attrs, r);
    cr_assert_eq(r[0], 1, "writing /tmp/%s: %g", name, r[0]);
    cr_assert_eq(r[1], 1, "TMPDIR is not /tmp");
    probe(a, "ns_seen", attrs, r);
    cr_assert_eq(r[0], 1, "the writer does not see its own file");

    mxop_client_t *b = connect_ns();
    probe(b, "ns_seen", attrs, r);
    cr_assert_eq(r[0], -(double)ENOENT, "another session's worker sees /tmp/%s", name);
    char host[128];
    snprintf(host, sizeof(host), "/tmp/%s", name);
    cr_assert_neq(access(host, F_OK), 0, "the file reached the host's /tmp");
    mxop_close(b);
    mxop_close(a);
    expect_back_to(&base);
}

Test(namespaces, plugin_directory_cannot_be_written)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    char path[400];
    double r[NS_OUT];
    snprintf(path, sizeof(path), "%s/evil.so", daemon_.plugins);
    const char *a1[] = {"path", path, NULL};
    probe(c, "ns_create", a1, r);
    /* Absent from the worker's root (libraries arrive as descriptors), or read-only. */
    cr_assert(r[0] == -(double)ENOENT || r[0] == -(double)EROFS || r[0] == -(double)EACCES,
              "new file: %g", r[0]);
    cr_assert_neq(access(path, F_OK), 0, "%s appeared", path);
    snprintf(path, sizeof(path), "%s/relu.so", daemon_.plugins);
    struct stat before, after;
    cr_assert_eq(stat(path, &before), 0);
    const char *a2[] = {"path", path, NULL};
    probe(c, "ns_create", a2, r);
    cr_assert(r[0] == -(double)ENOENT || r[0] == -(double)EROFS || r[0] == -(double)EACCES,
              "relu.so: %g", r[0]);
    cr_assert_eq(stat(path, &after), 0);
    cr_assert(before.st_size == after.st_size && before.st_mtime == after.st_mtime,
              "relu.so changed");
    mxop_close(c);
    expect_back_to(&base);
}

Test(namespaces, network_has_only_lo_down)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    double r[NS_OUT];
    probe(c, "ns_net", NULL, r);
    cr_assert_eq(r[0], 1, "%g network interfaces", r[0]);
    cr_assert_eq(r[1], 1, "no lo");
    cr_assert_eq(r[2], 0, "lo is up (or its flags cannot be read: %g)", r[2]);
    mxop_close(c);
    expect_back_to(&base);
}

Test(namespaces, dev_holds_only_the_four_nodes)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    double r[NS_OUT];
    probe(c, "ns_dev", NULL, r);
    /* null, zero, random, urandom; the cpu profile (no /dev/nvidiactl here) binds no GPU. */
    if (access("/dev/nvidiactl", F_OK) != 0)
        cr_assert_eq(r[0], 4, "/dev has %g entries", r[0]);
    else
        cr_assert_eq(r[0], 4 + r[1], "/dev has %g entries, %g of them nvidia", r[0], r[1]);
    mxop_close(c);
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* The gpu profile (chosen with --sandbox-profile gpu; auto picks it where /dev/nvidiactl is). */

static int host_nvidia_nodes(void)
{
    FILE *p = popen("ls -1 /dev 2>/dev/null | grep -c '^nvidia'", "r");
    cr_assert(p != NULL);
    int n = 0;
    if (fscanf(p, "%d", &n) != 1)
        n = 0;
    pclose(p);
    return n;
}

Test(namespaces_gpu, binds_the_driver_nodes_that_exist_and_keeps_the_host_pid_namespace)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    mxop_client_t *c = connect_ns();
    double r[NS_OUT];
    probe(c, "ns_dev", NULL, r);
    int host = host_nvidia_nodes();
    cr_assert_eq(r[1], host, "the worker sees %g /dev/nvidia* entries, the host has %d", r[1],
                 host);
    cr_assert_eq(r[0], 4 + host, "/dev has %g entries", r[0]);
    /* The host's pid namespace (legacy CUDA IPC): the worker's own pid is the host's. */
    pid_t w = mxt_worker_pid(c);
    char mine[128], theirs[128], path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)w);
    ssize_t n1 = readlink("/proc/self/ns/pid", mine, sizeof(mine) - 1);
    ssize_t n2 = readlink(path, theirs, sizeof(theirs) - 1);
    cr_assert(n1 > 0 && n2 > 0);
    mine[n1] = theirs[n2] = '\0';
    cr_assert_str_eq(mine, theirs, "the gpu profile left the host's pid namespace");
    /* The rest of the minimal root holds as in the cpu profile. */
    cr_assert_eq(open_in_worker(c, "/etc/shadow"), -(double)ENOENT);
    cr_assert_eq(open_in_worker(c, daemon_.sock), -(double)ENOENT);
    mxop_close(c);

    /* Said by the daemon. */
    status_says("profile gpu");
    status_says("namespaces mount, ipc, net, uts (the host's pid namespace)");
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/*
 * basic: no minimal root (documented): the host's files, /tmp included, and the
 * host's pid namespace; its own mount namespace only for a private /dev/shm
 * (test_neighbours neighbours_basic/dev_shm_is_private_capped_and_gone_with_the_worker).
 */

Test(namespaces_basic, basic_keeps_the_host_filesystem)
{
    mxt_baseline_t base = mxt_baseline_take(&daemon_);
    /*
     * A world-readable host file a strict worker's root does not hold (the
     * test's own directory is 0700 root, closed to the worker's uid), and
     * one in the host's /tmp.
     */
    const char *host_file = "/etc/os-release";
    cr_assert_eq(access(host_file, R_OK), 0, "%s: %s", host_file, strerror(errno));
    char tmp_file[64];
    snprintf(tmp_file, sizeof(tmp_file), "/tmp/mxt-basic-%d", (int)getpid());
    int fd = open(tmp_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert(fd >= 0, "%s: %s", tmp_file, strerror(errno));
    close(fd);
    mxop_client_t *c = connect_ns();
    cr_assert_eq(open_in_worker(c, host_file), 1, "basic promises no filesystem view");
    double in_tmp = open_in_worker(c, tmp_file);
    unlink(tmp_file);
    cr_assert_eq(in_tmp, 1, "basic keeps the host's /tmp: %g", in_tmp);
    pid_t w = mxt_worker_pid(c);
    /* The host's pid namespace too (its /proc is the host's; docs/security.md). */
    cr_assert_eq(ns_pid_of(w), (long)w, "basic put its worker in a pid namespace");
    mxop_close(c);
    expect_back_to(&base);
}
