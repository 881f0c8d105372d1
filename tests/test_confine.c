/*
 * tests/test_confine.c - hostile op libraries, confined.
 *
 * Each fixture of tests/plugins/hostile_*.c attacks from inside a worker:
 * the filesystem (a root-only file, the plugin directory, the control
 * socket's directory), the read-only inputs (mprotect), the fault handler
 * (its own SIGSEGV handler), the worker's single process (fork in init).
 * Every test asserts that the attack failed or was contained with the
 * named error, the caller's inputs bit-identical, the daemon alive,
 * another session's results correct, no process left over and the
 * daemon's descriptors back to their baseline.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;

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

static void setup_small_memory(void)
{
    const char *args[] = {"--worker-memory-mb", "256", NULL};
    mxt_daemon_start(&daemon_, args);
    warm_up();
}

TestSuite(confine, .init = setup_strict, .fini = teardown, .timeout = 60);
TestSuite(confine_memory, .init = setup_small_memory, .fini = teardown, .timeout = 90);
TestSuite(confine_basic, .init = setup_basic, .fini = teardown, .timeout = 60);

/* No cgroup for workers (as on a node where the daemon may make none): RLIMIT_AS instead. */
static void setup_no_cgroup(void)
{
    const char *args[] = {"--worker-memory-mb",
                          "256",
                          "--worker-cgroup",
                          "off",
                          "--session-max-region-mb",
                          "64",
                          NULL};
    mxt_daemon_start(&daemon_, args);
    warm_up();
}

TestSuite(confine_no_cgroup, .init = setup_no_cgroup, .fini = teardown, .timeout = 90);

/* ------------------------------------------------------------------------ */
/* What must hold after every attack. */

static mxt_baseline_t take_baseline(void)
{
    return mxt_baseline_take(&daemon_);
}

/*
 * Processes run from this daemon's worker binary for this daemon (their
 * command line names its plugin directory), other than the daemon and its
 * own children: what a library left behind.
 */
static int strays(void)
{
    DIR *d = opendir("/proc");
    cr_assert(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        int mine = 0;
        for (char *p = buf; p < buf + len; p += strlen(p) + 1)
            if (strcmp(p, daemon_.plugins) == 0)
                mine = 1;
        if (!mine || atoi(e->d_name) == (int)daemon_.pid)
            continue;
        char ppid[32];
        if (mxt_proc_field((pid_t)atoi(e->d_name), "status", "PPid:", ppid, sizeof(ppid)) == 0 &&
            atoi(ppid) != (int)daemon_.pid)
            n++;
    }
    closedir(d);
    return n;
}

static int strays_gone(void *arg)
{
    (void)arg;
    return strays() == 0;
}

static void expect_back_to(const mxt_baseline_t *b)
{
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    cr_assert(mxt_wait_until(strays_gone, NULL, 5000), "%d processes left behind", strays());
    mxt_baseline_expect(b);
}

/* Another session, untouched by the attack (harness.c). */
static void other_session_correct(void)
{
    mxt_other_session_correct(&daemon_);
}

static void next_call_succeeds(mxop_client_t *c)
{
    /*
     * No retry: a load that meets the worker dying (its channel broken, its
     * exit not yet reaped) is held for the replacement, not failed with a
     * crash that was not its own (mxop__pending_send_client, tables.c).
     */
    int rc = mxop_load_library(c, "relu.so");
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 3, &x);
    mxt_array(c, MXOP_F32, 1, s, 4, &y);
    rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "the next call: %s: %s", mxop_err_name(rc), mxop_last_error(c));
}

/* ------------------------------------------------------------------------ */
/* The filesystem */

static const char *const fs_attempts[] = {
    "read_shadow",   "create_in_plugin_dir", "write_victim",          "truncate_victim",
    "rename_victim", "unlink_victim",        "symlink_in_plugin_dir", "unlink_socket",
    "rename_socket", "create_in_socket_dir",
};
#define N_FS ((int)(sizeof(fs_attempts) / sizeof(fs_attempts[0])))

static size_t read_all(const char *path, unsigned char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
    size_t n = 0;
    ssize_t r;
    while (n < cap && (r = read(fd, buf + n, cap - n)) > 0)
        n += (size_t)r;
    close(fd);
    return n;
}

static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    cr_assert(d != NULL);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

Test(confine, filesystem_secrets_plugin_dir_and_socket_dir_are_out_of_reach)
{
    mxt_baseline_t base = take_baseline();
    char victim[400];
    snprintf(victim, sizeof(victim), "%s/relu.so", daemon_.plugins);
    static unsigned char before[1 << 20], after[1 << 20];
    size_t n_before = read_all(victim, before, sizeof(before));
    int plugin_entries = dir_entries(daemon_.plugins);
    int dir_entries_before = dir_entries(daemon_.dir);

    const char *libs[] = {"hostile_fs.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    const char *attrs[] = {"plugin_dir", daemon_.plugins, "victim", "relu.so",
                           "socket",     daemon_.sock,    NULL};
    int64_t sn[] = {N_FS};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, sn, 1, &x);
    mxt_array(c, MXOP_F64, 1, sn, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, "hostile_fs"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    char allowed[512] = "";
    size_t at = 0;
    for (int i = 0; i < N_FS; i++)
        if (mxt_get(&y, (size_t)i) >= 0 && at + 1 < sizeof(allowed))
            at += (size_t)snprintf(allowed + at, sizeof(allowed) - at, " %s", fs_attempts[i]);
    cr_assert_str_empty(allowed, "not refused:%s", allowed);
    mxop_close(c);

    /* Seen from outside: nothing changed. */
    size_t n_after = read_all(victim, after, sizeof(after));
    cr_assert(n_before == n_after && memcmp(before, after, n_before) == 0,
              "%s changed (%zu bytes before, %zu after)", victim, n_before, n_after);
    cr_assert_eq(dir_entries(daemon_.plugins), plugin_entries, "the plugin directory changed");
    cr_assert_eq(dir_entries(daemon_.dir), dir_entries_before, "the socket's directory changed");
    struct stat st;
    cr_assert_eq(stat(daemon_.sock, &st), 0, "the control socket is gone");
    cr_assert(S_ISSOCK(st.st_mode));
    other_session_correct(); /* a new client connects through that socket */
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* The read-only inputs */

static void input_change_is_contained(const char *lib, const char *op)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {lib, NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {1024};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    static unsigned char saved[1024 * 4];
    memcpy(saved, x.data, x.nbytes);
    int rc = mxop_forward(c, mxt_op(c, op), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EINPUT_WRITTEN, "%s returned %s (%s)", op, mxop_err_name(rc),
                 mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "read-only input 0") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(memcmp(saved, x.data, x.nbytes), 0, "the caller's input changed");
    next_call_succeeds(c);
    cr_assert_eq(memcmp(saved, x.data, x.nbytes), 0, "the caller's input changed");
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(confine, mprotect_of_an_input_refused)
{
    input_change_is_contained("hostile_mem.so", "mprotect_write");
}

Test(confine_basic, mprotect_of_an_input_refused)
{
    input_change_is_contained("hostile_mem.so", "mprotect_write");
}

/* ------------------------------------------------------------------------ */
/* The fault handler */

Test(confine, own_fault_handler_refused)
{
    input_change_is_contained("hostile_sig.so", "sigswap_write");
}

Test(confine_basic, own_fault_handler_refused)
{
    input_change_is_contained("hostile_sig.so", "sigswap_write");
}

/* ------------------------------------------------------------------------ */
/* One process per worker */

Test(confine_basic, fork_in_init_refused_and_the_child_killed)
{
    mxt_baseline_t base = take_baseline();
    mxop_client_t *c = mxt_connect(&daemon_);
    int rc = mxop_load_library(c, "hostile_forkinit.so");
    cr_assert_eq(rc, MXOP_ELIB_INIT, "load returned %s (%s)", mxop_err_name(rc),
                 mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "started") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(strays(), 0, "a process of the library lives on");
    next_call_succeeds(c);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(confine, fork_in_init_refused_by_the_filter)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_forkinit.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(strays(), 0, "a process of the library lives on");
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "forkinit_identity"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* The worker's transport */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int restarted_once(void *arg)
{
    mxop_client_t *c = arg;
    mxop_stats_t st;
    return mxop_stats(c, &st) == 0 && st.worker_restarts >= 1;
}

/*
 * An op that broke the transport: its call is answered at once, with its
 * result (the break is seen by the worker right after) or a named error,
 * never at the deadline; the worker is replaced within seconds and the
 * session goes on.  `must_break`: the op can reach a descriptor of the
 * transport (basic: all of them; strict: the mailbox's bells, the sockets
 * being guarded by the filter).
 */
static void broken_transport(const char *how, int must_break)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_transport.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    static unsigned char saved[64 * 4];
    memcpy(saved, x.data, x.nbytes);
    const char *attrs[] = {"how", how, NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 30000};
    double t0 = now_ms();
    int rc = mxop_forward(c, mxt_op(c, "break_transport"), &call, &x, 1, &y, 1);
    double took = now_ms() - t0;
    cr_assert(took < 5000, "the call was answered after %.0f ms (deadline 30 s)", took);
    if (rc == 0) {
        cr_assert_eq(memcmp(x.data, y.data, x.nbytes), 0, "a wrong result");
    } else {
        cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "got %s (%s)", mxop_err_name(rc),
                     mxop_last_error(c));
        /* The worker names the descriptor, or the daemon saw its own channel go first. */
        cr_assert(strstr(mxop_last_error(c), "transport was broken") != NULL ||
                      strstr(mxop_last_error(c), "supervisor channel") != NULL,
                  "%s", mxop_last_error(c));
    }
    /*
     * Within 1.5 s: sooner than the idle-CPU watchdog could (2 s of CPU), so
     * it is the transport check that replaced a worker spinning on a bell.
     */
    if (must_break)
        cr_assert(mxt_wait_until(restarted_once, c, 1500),
                  "the worker with a broken transport was not replaced within 1.5 s");
    cr_assert_eq(memcmp(saved, x.data, x.nbytes), 0, "the caller's input changed");
    next_call_succeeds(c);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

static int shm_path(void)
{
    const char *p = getenv("MXOP_DATA_PATH");
    return p == NULL || strcmp(p, "socket") != 0;
}

Test(confine, descriptors_replaced_with_dev_null_answered_at_once)
{
    broken_transport("dup2", shm_path());
}

Test(confine, descriptors_closed_answered_at_once)
{
    broken_transport("close", shm_path());
}

Test(confine_basic, descriptors_replaced_with_dev_null_answered_at_once)
{
    broken_transport("dup2", 1);
}

Test(confine_basic, descriptors_closed_answered_at_once)
{
    broken_transport("close", 1);
}

/* ------------------------------------------------------------------------ */
/* Memory in shared mappings */

/* The per-worker cgroup exists only where the daemon can make one (root, a memory controller). */
static int have_worker_cgroup(pid_t worker)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/mxop-w%d", (int)worker);
    if (access(path, F_OK) == 0)
        return 1;
    snprintf(path, sizeof(path), "/sys/fs/cgroup/mxop-w%d", (int)worker);
    return access(path, F_OK) == 0;
}

Test(confine_memory, shared_memory_beyond_the_limit_kills_only_the_worker)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_shm.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    if (!have_worker_cgroup(w)) {
        mxop_close(c);
        cr_skip_test("no per-worker cgroup here (not root, or no memory controller)");
    }
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    static unsigned char saved[16];
    memcpy(saved, x.data, x.nbytes);
    const char *attrs[] = {"mb", "768", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 60000};
    int rc = mxop_forward(c, mxt_op(c, "shm_hog"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EWORKER_OOM, "768 MiB of shared memory under 256 MiB: %s (%s)",
                 mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "cgroup") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(memcmp(saved, x.data, x.nbytes), 0, "the caller's input changed");
    next_call_succeeds(c);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
    char path[128];
    snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/mxop-w%d", (int)w);
    cr_assert_neq(access(path, F_OK), 0, "the worker's cgroup %s was not removed", path);
}

Test(confine_memory, shared_memory_within_the_limit_is_fine)
{
    const char *libs[] = {"hostile_shm.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"mb", "64", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, "shm_hog"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(((float *)y.data)[0], 64.0f);
    mxop_close(c);
}

/*
 * Without a cgroup the same attack meets RLIMIT_AS: the mapping is refused
 * inside the library (its own MXOP_ENOMEM), nothing is touched, the worker
 * serves on.
 */
Test(confine_no_cgroup, shared_memory_beyond_the_limit_is_refused_by_rlimit_as)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_shm.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    cr_assert(!have_worker_cgroup(w), "--worker-cgroup off still made a cgroup");
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    static unsigned char saved[16];
    memcpy(saved, x.data, x.nbytes);
    const char *attrs[] = {"mb", "768", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 60000};
    int rc = mxop_forward(c, mxt_op(c, "shm_hog"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_ENOMEM, "768 MiB of shared memory under RLIMIT_AS: %s (%s)",
                 mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "768") != NULL, "%s", mxop_last_error(c));
    cr_assert_eq(memcmp(saved, x.data, x.nbytes), 0, "the caller's input changed");
    cr_assert_eq(mxt_worker_pid(c), w, "the worker was replaced");
    next_call_succeeds(c);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

/* The budget still covers what an op legitimately uses: its memory and the session's regions. */
Test(confine_no_cgroup, memory_and_regions_within_the_budget_work)
{
    const char *libs[] = {"hostile_shm.so", "relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"mb", "64", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, "shm_hog"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(((float *)y.data)[0], 64.0f);
    /* Two 12 MiB tensors: 24 MiB of the session's 64 MiB region quota. */
    int64_t big[] = {3 << 20};
    mxop_array_t bx, by;
    mxt_array(c, MXOP_F32, 1, big, 1, &bx);
    mxt_array(c, MXOP_F32, 1, big, 2, &by);
    ((float *)bx.data)[0] = -5.0f;
    ((float *)bx.data)[(3 << 20) - 1] = 3.0f;
    rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &bx, 1, &by, 1);
    cr_assert_eq(rc, 0, "relu on 12 MiB: %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(((float *)by.data)[0], 0.0f);
    cr_assert_eq(((float *)by.data)[(3 << 20) - 1], 3.0f);
    mxop_close(c);
}

/* ------------------------------------------------------------------------ */
/* The worker's output */

TestSuite(confine_output, .timeout = 90);

Test(confine_output, flood_of_forged_lines_is_escaped_prefixed_and_rate_limited)
{
    /* The daemon's log goes into a file: its stderr is ours while it starts. */
    char log[] = "/tmp/mxop-confine-log-XXXXXX";
    int lfd = mkstemp(log);
    cr_assert(lfd >= 0);
    int saved = dup(2);
    dup2(lfd, 2);
    const char *args[] = {"--log-level", "info", NULL}; /* a worker's lines are info */
    mxt_daemon_start(&daemon_, args);
    dup2(saved, 2);
    close(saved);
    close(lfd);
    warm_up();

    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_flood.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const char *attrs[] = {"mb", "8", NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .timeout_ms = 60000};
    int rc = mxop_forward(c, mxt_op(c, "flood"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
    pid_t dpid = daemon_.pid;
    mxt_daemon_stop(&daemon_);

    FILE *f = fopen(log, "r");
    cr_assert(f != NULL);
    static char line[1 << 16];
    char real[32], worker_out[64];
    snprintf(real, sizeof(real), "mxop-serverd[%d] ", (int)dpid);
    snprintf(worker_out, sizeof(worker_out), "worker %d std", (int)w);
    long bytes = 0;
    int forged_seen = 0, dropped_seen = 0, lines = 0, layers_seen = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        bytes += (long)strlen(line);
        lines++;
        cr_assert(strchr(line, '\x1b') == NULL && strchr(line, '\r') == NULL,
                  "a raw control character reached the log: %.120s", line);
        if (strstr(line, "forged") != NULL) {
            forged_seen++;
            cr_assert(strncmp(line, real, strlen(real)) == 0 && strstr(line, worker_out) != NULL,
                      "a forged line passes for the daemon's: %.160s", line);
            cr_assert(strstr(line, " [hostile_flood.so]: ") != NULL,
                      "the worker's line does not name the session's library: %.160s", line);
        }
        if (strstr(line, "lines dropped") != NULL)
            dropped_seen++;
        /* The daemon says at start what confines its workers here. */
        if (strstr(line, "sandbox strict layers: seccomp filter; Landlock ABI") != NULL)
            layers_seen++;
    }
    fclose(f);
    unlink(log);
    cr_assert(forged_seen > 0, "none of the worker's lines was logged");
    cr_assert(dropped_seen > 0, "no count of dropped lines");
    cr_assert_eq(layers_seen, 1, "the sandbox's layers were not logged once at start");
    /* 16 MiB written; the log keeps a bounded part of it. */
    cr_assert(bytes < (4l << 20), "the log grew by %ld bytes (%d lines)", bytes, lines);
}

/* ------------------------------------------------------------------------ */
/* CPU burnt after returning */

static int restarted(void *arg)
{
    mxop_client_t *c = arg;
    mxop_stats_t st;
    return mxop_stats(c, &st) == 0 && st.worker_restarts >= 1;
}

Test(confine, cpu_burnt_after_returning_gets_the_worker_replaced)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_spin.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "spin_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    /* 2 s of CPU, read every 250 ms: replaced within a few seconds even on a loaded machine. */
    cr_assert(mxt_wait_until(restarted, c, 20000), "the spinning worker was not replaced");
    cr_assert_neq(mxt_worker_pid(c), w);
    /* The next call is told why (and does not run); the one after runs. */
    rc = mxop_forward(c, mxt_op(c, "spin_after"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EWORKER_CRASHED, "%s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "with no call in flight") != NULL &&
                  strstr(mxop_last_error(c), "replaced before this call") != NULL,
              "%s", mxop_last_error(c));
    next_call_succeeds(c);
    other_session_correct();
    mxop_close(c);
    expect_back_to(&base);
}

Test(confine, busy_client_between_calls_is_not_idle)
{
    /* Back-to-back calls for 4 s: the worker's own spin between calls is not "idle CPU". */
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    const mxop_op_t *relu = mxt_op(c, "relu");
    double t0 = now_ms();
    while (now_ms() - t0 < 4000)
        cr_assert_eq(mxop_forward(c, relu, NULL, &x, 1, &y, 1), 0, "%s", mxop_last_error(c));
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.worker_restarts, 0, "a busy worker was replaced");
    mxop_close(c);
}
