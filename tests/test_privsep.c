/*
 * tests/test_privsep.c - least privilege for a worker.
 *
 * The daemon runs as root here and is given no --worker-uid: its workers
 * must run under the unprivileged account it chooses, load libraries only
 * through the descriptor the daemon opened (a plugin directory of mode 0700
 * root is then no obstacle, and a library swapped at the path after the
 * check is not the one that runs), and reach nothing root-only.  The
 * allowlist's `trusted` column decides zero-copy against scratch mode.
 * Every test asserts the daemon alive, another session correct, no process
 * left over and the daemon's descriptors back to their baseline.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static char list_path[400];

static void setup_strict(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void setup_basic(void)
{
    const char *args[] = {"--sandbox", "basic", NULL};
    mxt_daemon_start(&daemon_, args);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
    if (list_path[0] != '\0')
        unlink(list_path);
    list_path[0] = '\0';
}

TestSuite(privsep, .init = setup_strict, .fini = teardown, .timeout = 90);
TestSuite(privsep_basic, .init = setup_basic, .fini = teardown, .timeout = 90);
TestSuite(privsep_list, .fini = teardown, .timeout = 90);

/* ------------------------------------------------------------------------ */
/* What must hold after every test. */

static mxt_baseline_t take_baseline(void)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_close(mxt_connect_with(&daemon_, libs));
    return mxt_baseline_take(&daemon_);
}

static void expect_back_to(const mxt_baseline_t *b)
{
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");
    mxt_other_session_correct(&daemon_);
    mxt_baseline_expect(b);
}

/* The uids the daemon chooses from, one per worker (server/daemon/worker/workeruid.h). */
#define UID_FIRST 1836580864u
#define UID_COUNT 4096u

static int uid_chosen(double uid)
{
    return uid >= UID_FIRST && uid < (double)UID_FIRST + UID_COUNT;
}

static void relu_correct(mxop_client_t *c)
{
    int64_t s[] = {64};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 11, &x);
    mxt_array(c, MXOP_F32, 1, s, 12, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < 64; i++) {
        double v = mxt_get(&x, i);
        cr_assert_eq(mxt_get(&y, i), v > 0 ? v : 0, "relu element %zu", i);
    }
}

/* ------------------------------------------------------------------------ */
/* Who the worker is */

static void worker_is_not_root(void)
{
    cr_assert_eq(geteuid(), 0, "these tests run the daemon as root");
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_priv.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "priv_ids"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < 4; i++)
        cr_assert_neq(mxt_get(&y, i), 0.0, "id %zu of the worker is 0 (root)", i);
    uid_t want = (uid_t)mxt_get(&y, 0);
    cr_assert(uid_chosen(want), "uid %u is not of the daemon's range", (unsigned)want);
    for (size_t i = 1; i < 4; i++)
        cr_assert_eq(mxt_get(&y, i), (double)want, "id %zu: %g, not %u", i, mxt_get(&y, i),
                     (unsigned)want);
    /* Seen from outside too: the kernel's account of the worker's ids. */
    char field[128];
    cr_assert_eq(mxt_proc_field(mxt_worker_pid(c), "status", "Uid:", field, sizeof(field)), 0);
    unsigned r, e, sv, fs;
    cr_assert_eq(sscanf(field, "%u %u %u %u", &r, &e, &sv, &fs), 4, "%s", field);
    cr_assert(r == want && e == want && sv == want && fs == want, "Uid: %s", field);
    mxop_close(c);
    expect_back_to(&base);
}

Test(privsep, worker_runs_as_an_unprivileged_uid)
{
    worker_is_not_root();
}

Test(privsep_basic, worker_runs_as_an_unprivileged_uid)
{
    worker_is_not_root();
}

/* `mxop status` says which uid the workers run as. */
Test(privsep, status_names_the_workers_uid)
{
    char cmd[900], out[4096];
    snprintf(cmd, sizeof(cmd), "'%s/bin/mxop' status --socket '%s' 2>&1", mxt_build_dir(),
             daemon_.sock);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s", out);
    char want[96];
    snprintf(want, sizeof(want), "workers run as a uid of their own each, from %u-%u", UID_FIRST,
             UID_FIRST + UID_COUNT - 1);
    cr_assert(strstr(out, want) != NULL, "'%s' not in: %s", want, out);
    cr_assert(strstr(out, "chosen by the daemon") != NULL, "%s", out);
}

/* ------------------------------------------------------------------------ */
/* A root-only file */

/*
 * `strict_root`: a strict worker's minimal root (namespaces.c) does not hold
 * the test's directory at all, so the file is absent (ENOENT) before the uid
 * is even asked; under basic only the uid stands between them (EACCES).
 */
static void root_only_file_refused(bool strict_root)
{
    mxt_baseline_t base = take_baseline();
    char secret[400];
    snprintf(secret, sizeof(secret), "%s/secret", daemon_.dir);
    int fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(fd >= 0, "%s", strerror(errno));
    cr_assert_eq(write(fd, "root only\n", 10), 10);
    close(fd);
    cr_assert_eq(chmod(secret, 0600), 0);

    const char *libs[] = {"hostile_priv.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    const char *attrs[] = {"path", secret, NULL};
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, "priv_read"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, MXOP_EDENIED, "reading a root-only file: %s (%s)", mxop_err_name(rc),
                 mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), strerror(EACCES)) != NULL ||
                  (strict_root && strstr(mxop_last_error(c), strerror(ENOENT)) != NULL),
              "%s", mxop_last_error(c));
    /* The session goes on: the same worker answers the next call. */
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.worker_restarts, 0);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "priv_ids"), NULL, &x, 1, &y, 1), 0, "%s",
                 mxop_last_error(c));
    mxop_close(c);
    unlink(secret);
    expect_back_to(&base);
}

Test(privsep, root_only_file_is_refused)
{
    root_only_file_refused(true);
}

Test(privsep_basic, root_only_file_is_refused)
{
    root_only_file_refused(false);
}

/* ------------------------------------------------------------------------ */
/* The plugin directory: mode 0700 root, loads fine, cannot be changed */

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

static void plugin_dir_root_only(void)
{
    mxt_baseline_t base = take_baseline();
    struct stat st;
    cr_assert_eq(stat(daemon_.plugins, &st), 0);
    cr_assert_eq(st.st_uid, 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "the harness's plugin directory is %03o",
                 (unsigned)(st.st_mode & 0777));
    /* Loads and runs although the worker's uid cannot even list the directory. */
    const char *libs[] = {"relu.so", "hostile_fs.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    relu_correct(c);

    /* Writes, renames, unlinks in the plugin directory: refused. */
    int before = dir_entries(daemon_.plugins);
    const char *attrs[] = {"plugin_dir", daemon_.plugins, "victim", "relu.so",
                           "socket",     daemon_.sock,    NULL};
    int64_t sn[] = {10};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, sn, 1, &x);
    mxt_array(c, MXOP_F64, 1, sn, 2, &y);
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs};
    int rc = mxop_forward(c, mxt_op(c, "hostile_fs"), &call, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    /* hostile_fs's attempts 1..6: create, write, truncate, rename, unlink, symlink there. */
    static const char *const what[] = {"read /etc/shadow", "create", "write",  "truncate",
                                       "rename",           "unlink", "symlink"};
    for (size_t i = 0; i < 7; i++)
        cr_assert_lt(mxt_get(&y, i), 0.0, "%s in the plugin directory was not refused", what[i]);
    cr_assert_eq(dir_entries(daemon_.plugins), before, "the plugin directory changed");
    relu_correct(c);
    mxop_close(c);
    expect_back_to(&base);
}

Test(privsep, library_in_a_root_only_plugin_dir_loads_and_the_dir_stays_unchanged)
{
    plugin_dir_root_only();
}

Test(privsep_basic, library_in_a_root_only_plugin_dir_loads_and_the_dir_stays_unchanged)
{
    plugin_dir_root_only();
}

/* Not a regular file under a library's name: the daemon's open refuses it, without blocking. */
Test(privsep, fifo_or_directory_named_like_a_library_refused)
{
    mxt_baseline_t base = take_baseline();
    char fifo[400], dir[400];
    snprintf(fifo, sizeof(fifo), "%s/fifo.so", daemon_.plugins);
    snprintf(dir, sizeof(dir), "%s/dir.so", daemon_.plugins);
    cr_assert_eq(mkfifo(fifo, 0644), 0, "%s", strerror(errno));
    cr_assert_eq(mkdir(dir, 0755), 0, "%s", strerror(errno));
    mxop_client_t *c = mxt_connect(&daemon_);
    const char *names[] = {"fifo.so", "dir.so"};
    for (int i = 0; i < 2; i++) {
        int rc = mxop_load_library(c, names[i]);
        cr_assert_eq(rc, MXOP_ELIB_INVALID, "%s: %s (%s)", names[i], mxop_err_name(rc),
                     mxop_last_error(c));
        cr_assert(strstr(mxop_last_error(c), "not a regular file") != NULL, "%s",
                  mxop_last_error(c));
    }
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    relu_correct(c);
    mxop_close(c);
    unlink(fifo);
    rmdir(dir);
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* shutdown() of the transport (strict) */

Test(privsep, shutdown_of_the_data_channel_refused)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_priv.so", "relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "priv_shutdown"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    cr_assert_eq(mxt_get(&y, 0), -(double)EPERM, "shutdown(4): %g, not EPERM", mxt_get(&y, 0));
    cr_assert_eq(mxt_get(&y, 1), -(double)EPERM, "shutdown(3): %g, not EPERM", mxt_get(&y, 1));
    /* The channels still work, without a new worker. */
    relu_correct(c);
    cr_assert_eq(mxop_load_library(c, "probe.so"), 0, "%s", mxop_last_error(c));
    mxop_stats_t st;
    cr_assert_eq(mxop_stats(c, &st), 0);
    cr_assert_eq(st.worker_restarts, 0, "the worker was replaced");
    mxop_close(c);
    expect_back_to(&base);
}

/* ------------------------------------------------------------------------ */
/* The allowlist: a swapped file, the `trusted` column */

static void digest_of(const char *path, char out[65])
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    cr_assert_eq(fscanf(p, "%64s", out), 1, "sha256sum %s gave nothing", path);
    pclose(p);
}

/* A plugin as the build made it: examples in plugins/, fixtures in tests/plugins/. */
static void build_path(const char *lib, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/plugins/%s", mxt_build_dir(), lib);
    if (access(out, R_OK) != 0)
        snprintf(out, outlen, "%s/tests/plugins/%s", mxt_build_dir(), lib);
}

static void build_digest(const char *lib, char out[65])
{
    char path[600];
    build_path(lib, path, sizeof(path));
    digest_of(path, out);
}

static void write_list(const char *text)
{
    FILE *f = fopen(list_path, "w");
    cr_assert(f != NULL);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(list_path, 0600), 0); /* root's: the worker never reads it */
}

/* Copies build/plugins/<from> over <plugins>/<to> by rename (a new inode at the path). */
static void put_plugin(const char *from, const char *to)
{
    char src[600], tmp[600], dst[600];
    build_path(from, src, sizeof(src));
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", daemon_.plugins, to);
    snprintf(dst, sizeof(dst), "%s/%s", daemon_.plugins, to);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert(in >= 0 && out >= 0, "%s", strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        cr_assert_eq(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
    cr_assert_eq(rename(tmp, dst), 0, "%s", strerror(errno));
}

static double version_of(mxop_client_t *c)
{
    int64_t s[] = {4};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F64, 1, s, 1, &x);
    for (size_t i = 0; i < 4; i++)
        mxt_set(&x, i, 0.0); /* no sleep */
    mxt_array(c, MXOP_F64, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "version"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    return mxt_get(&y, 0);
}

static void start_with_list(const char *text)
{
    snprintf(list_path, sizeof(list_path), "/tmp/mxop-privsep-list-%d", (int)getpid());
    write_list(text);
    const char *args[] = {"--allowlist", list_path, NULL};
    mxt_daemon_start(&daemon_, args);
}

Test(privsep_list, swapped_library_runs_the_opened_file_or_is_refused_naming_both_digests)
{
    char a[65], b[65], relu[65], text[600];
    build_digest("version_a.so", a);
    build_digest("version_b.so", b);
    build_digest("relu.so", relu);
    snprintf(text, sizeof(text), "relu.so %s\nversion.so %s\n", relu, a);
    start_with_list(text);
    put_plugin("version_a.so", "version.so");
    mxt_baseline_t base = take_baseline();

    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(version_of(c), 1.0);
    /* Swapped at the path once the daemon had opened (and the worker loaded) the listed file. */
    put_plugin("version_b.so", "version.so");
    cr_assert_eq(version_of(c), 1.0, "the session no longer runs the file that was checked");

    /* A new load opens the new file: its digest is not the listed one, and both are named. */
    mxop_client_t *c2 = mxt_connect(&daemon_);
    int rc = mxop_load_library(c2, "version.so");
    cr_assert_eq(rc, MXOP_EDENIED, "%s (%s)", mxop_err_name(rc), mxop_last_error(c2));
    cr_assert(strstr(mxop_last_error(c2), a) != NULL, "expected digest not named: %s",
              mxop_last_error(c2));
    cr_assert(strstr(mxop_last_error(c2), b) != NULL, "actual digest not named: %s",
              mxop_last_error(c2));
    mxop_close(c2);
    cr_assert_eq(version_of(c), 1.0);
    mxop_close(c);
    expect_back_to(&base);
}

/* True once the daemon holds a descriptor of <plugins>/version.so (it opened it for a load). */
static int daemon_holds_version(void *arg)
{
    (void)arg;
    char want[600], dir[64];
    snprintf(want, sizeof(want), "%s/version.so", daemon_.plugins);
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)daemon_.pid);
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char link[600], target[700];
        snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, want) == 0;
        }
    }
    closedir(d);
    return found;
}

typedef struct loader {
    mxop_client_t *c;
    int rc;
    char err[512];
} loader_t;

static void *load_version(void *arg)
{
    loader_t *l = arg;
    l->rc = mxop_load_library(l->c, "version.so");
    snprintf(l->err, sizeof(l->err), "%s", l->rc ? mxop_last_error(l->c) : "");
    return NULL;
}

/*
 * The swap lands between the daemon's open and the worker's load: the
 * worker is stopped, the daemon opens version.so (version 1) and queues
 * the load, version 2 is renamed over it, the worker goes on.  What it
 * loads is what the daemon opened, whatever the path now holds.
 */
Test(privsep, library_swapped_after_the_daemon_opened_it_is_not_the_one_loaded)
{
    put_plugin("version_a.so", "version.so");
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    cr_assert_eq(kill(w, SIGSTOP), 0);
    loader_t l = {.c = c};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, load_version, &l), 0);
    int opened = mxt_wait_until(daemon_holds_version, NULL, 10000);
    put_plugin("version_b.so", "version.so");
    cr_assert_eq(kill(w, SIGCONT), 0);
    pthread_join(th, NULL);
    cr_assert(opened, "the daemon never held version.so open");
    cr_assert_eq(l.rc, 0, "%s: %s", mxop_err_name(l.rc), l.err);
    cr_assert_eq(mxt_worker_pid(c), w, "the worker was replaced (and reloaded the path)");
    cr_assert_eq(version_of(c), 1.0,
                 "the worker loaded the file now at the path, not the opened one");
    mxop_close(c);
    expect_back_to(&base);
}

/* A replacement worker gets the file now at the path: with an allowlist, a swapped one is refused.
 */
Test(privsep_list, replay_of_a_swapped_library_refused_naming_both_digests)
{
    char a[65], b[65], relu[65], text[600];
    build_digest("version_a.so", a);
    build_digest("version_b.so", b);
    build_digest("relu.so", relu);
    snprintf(text, sizeof(text), "relu.so %s\nversion.so %s\n", relu, a);
    start_with_list(text);
    put_plugin("version_a.so", "version.so");
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"version.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(version_of(c), 1.0);
    put_plugin("version_b.so", "version.so");
    cr_assert_eq(kill(mxt_worker_pid(c), SIGKILL), 0);
    /* The death, then the replay refused: the session says why, naming both digests. */
    int rc = 0;
    char err[1024] = "";
    for (int i = 0; i < 40 && strstr(err, b) == NULL; i++) {
        int64_t s1[] = {4};
        mxop_array_t x, y;
        mxt_array(c, MXOP_F64, 1, s1, 1, &x);
        mxt_array(c, MXOP_F64, 1, s1, 2, &y);
        rc = mxop_forward(c, mxt_op(c, "version"), NULL, &x, 1, &y, 1);
        snprintf(err, sizeof(err), "%s", rc != 0 ? mxop_last_error(c) : "");
        cr_assert_neq(rc, 0, "the session ran a call after its library was refused");
        mxt_sleep_ms(250);
    }
    cr_assert(strstr(err, a) != NULL && strstr(err, b) != NULL, "%s: %s", mxop_err_name(rc), err);
    mxop_close(c);
    expect_back_to(&base);
}

static uint32_t confined(mxop_client_t *c)
{
    mxop_stats_v2_t st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    cr_assert_eq(mxop_stats_v2(c, &st), 0);
    return st.confined;
}

/* The output, then the input, adjacent in one region: an overrun of one reaches the other. */
static void adjacent(mxop_client_t *c, mxop_array_t *y, mxop_array_t *x)
{
    int64_t s[] = {256};
    mxt_array(c, MXOP_F32, 1, s, 6, y);
    mxt_array(c, MXOP_F32, 1, s, 5, x);
    cr_assert_eq(x->region, y->region, "the arena put them in different regions");
    cr_assert(x->offset >= y->offset + y->nbytes && x->offset < y->offset + y->nbytes + 4096,
              "the input does not follow the output");
}

static void overrun_with_list(const char *alias_field, int reaches)
{
    char alias[65], relu[65], text[600];
    build_digest("hostile_alias.so", alias);
    build_digest("relu.so", relu);
    snprintf(text, sizeof(text), "relu.so %s trusted\nhostile_alias.so %s%s\n", relu, alias,
             alias_field);
    start_with_list(text);
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(confined(c), reaches ? 0u : 1u, "%s",
                 reaches ? "trusted: zero-copy expected" : "untrusted: scratch mode expected");
    mxop_array_t x, y;
    adjacent(c, &y, &x);
    float saved = (float)mxt_get(&x, 0);
    int rc = mxop_forward(c, mxt_op(c, "overrun"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    if (reaches)
        cr_assert_eq(mxt_get(&x, 0), 7.0, "a trusted op's overrun did not reach the next tensor");
    else
        cr_assert_eq(mxt_get(&x, 0), (double)saved, "an untrusted op's overrun changed the input");
    mxop_close(c);
    expect_back_to(&base);
}

Test(privsep_list, allowlist_trusted_column_gives_zero_copy)
{
    overrun_with_list(" trusted", 1);
}

Test(privsep_list, allowlist_without_trusted_gives_scratch_mode)
{
    overrun_with_list("", 0);
}

/* The column is read at every load, like the digests: an edit applies to the next session. */
Test(privsep_list, trusted_column_edit_applies_at_the_next_load)
{
    char alias[65], relu[65], text[600];
    build_digest("hostile_alias.so", alias);
    build_digest("relu.so", relu);
    snprintf(text, sizeof(text), "relu.so %s\nhostile_alias.so %s\n", relu, alias);
    start_with_list(text);
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"hostile_alias.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(confined(c), 1u, "not listed trusted: scratch mode expected");
    mxop_close(c);
    snprintf(text, sizeof(text), "relu.so %s\nhostile_alias.so %s trusted\n", relu, alias);
    write_list(text);
    c = mxt_connect_with(&daemon_, libs);
    cr_assert_eq(confined(c), 0u, "listed trusted after the edit: zero-copy expected");
    mxop_close(c);
    expect_back_to(&base);
}

Test(privsep_list, unknown_third_field_refused_with_its_line)
{
    char dir[] = "/tmp/mxop-privsep-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(list_path, sizeof(list_path), "%s/list", dir);
    write_list(
        "# ok\n"
        "relu.so 0000000000000000000000000000000000000000000000000000000000000000 trusted\n"
        "crash.so 0000000000000000000000000000000000000000000000000000000000000000 trustd\n");
    const char *extra[] = {"--allowlist", list_path, NULL};
    char err[2048];
    int st = mxt_daemon_exit_status(dir, dir, extra, err, sizeof(err));
    unlink(list_path);
    list_path[0] = '\0';
    rmdir(dir);
    cr_assert_eq(st, 2, "the daemon exited with %d: %s", st, err);
    cr_assert(strstr(err, "allowlist line 3") != NULL && strstr(err, "trustd") != NULL, "%s", err);
}

Test(privsep_list, worker_uid_0_refused_unless_sandbox_none)
{
    char dir[] = "/tmp/mxop-privsep-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    const char *extra[] = {"--worker-uid", "0", NULL};
    char err[2048];
    int st = mxt_daemon_exit_status(dir, dir, extra, err, sizeof(err));
    rmdir(dir);
    cr_assert_eq(st, 2, "the daemon exited with %d: %s", st, err);
    cr_assert(strstr(err, "--worker-uid 0") != NULL, "%s", err);
}

/* ------------------------------------------------------------------------ */
/* The control socket: a worker's cgroup is never a client's */

/*
 * A process in a worker's cgroup is refused even when its ancestry does not
 * lead to the daemon (here the test's own child, moved into the group, as a
 * process an op started would be there whoever adopted it).
 */
Test(privsep, process_in_a_worker_cgroup_cannot_connect)
{
    mxt_baseline_t base = take_baseline();
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    pid_t w = mxt_worker_pid(c);
    char procs[128];
    snprintf(procs, sizeof(procs), "/sys/fs/cgroup/memory/mxop-w%d/cgroup.procs", (int)w);
    if (access(procs, W_OK) != 0)
        snprintf(procs, sizeof(procs), "/sys/fs/cgroup/mxop-w%d/cgroup.procs", (int)w);
    if (access(procs, W_OK) != 0) {
        mxop_close(c);
        cr_skip_test("no per-worker cgroup here (not root, or no memory controller)");
    }
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        char b;
        close(go[1]);
        if (read(go[0], &b, 1) != 1)
            _exit(3);
        mxop_client_t *cc = NULL;
        mxop_connect_opts_t opts = {.struct_size = sizeof(opts), .timeout_ms = 20000};
        int rc = mxop_connect(daemon_.sock, &opts, &cc);
        if (rc == 0)
            _exit(1);
        _exit(rc == MXOP_EDENIED && strstr(mxop_connect_error(), "workers may not connect") != NULL
                  ? 0
                  : 2);
    }
    close(go[0]);
    FILE *f = fopen(procs, "we");
    cr_assert(f != NULL, "%s: %s", procs, strerror(errno));
    fprintf(f, "%d\n", (int)child);
    cr_assert_eq(fclose(f), 0, "moving the child into %s", procs);
    cr_assert_eq(write(go[1], "g", 1), 1);
    close(go[1]);
    int status = 0;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status), "the child died by a signal");
    cr_assert_eq(WEXITSTATUS(status), 0,
                 "a process in the worker's cgroup: 1 = it connected, 2 = refused otherwise");
    relu_correct(c);
    mxop_close(c);
    expect_back_to(&base);
}
