/*
 * tests/test_daemon_launch.c - the private-daemon launcher
 * (common/daemon_launch.c): a daemon that answers, and every way a start
 * can fail or an owner can end, each leaving nothing running or on disk.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* A directory of the test's own that the launcher makes its directories in. */
static char base[64];

static void setup(void)
{
    snprintf(base, sizeof(base), "/tmp/mxdl-XXXXXX");
    cr_assert(mkdtemp(base) != NULL);
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d != NULL, "%s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(launch, .init = setup, .fini = teardown, .timeout = 60);

/* A stand-in for mxop-serverd: a shell script of `body`, in the test's directory. */
static const char *fake_serverd(const char *body)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/fake-serverd", base);
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
    return path;
}

static int process_gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

static void real_opts(mxop__launch_opts_t *o, char *serverd, size_t len, const char **plugins)
{
    snprintf(serverd, len, "%s/bin/mxop-serverd", mxt_build_dir());
    static const char *const args[] = {"--log-level", "warn", NULL};
    *o = (mxop__launch_opts_t){.serverd = serverd,
                               .tmp_dir = base,
                               .prefix = "t",
                               .plugins = plugins,
                               .args = args,
                               .stderr_name = "daemon.log"};
}

Test(launch, started_daemon_answers_and_close_leaves_nothing)
{
    char serverd[512], relu[512], err[512];
    snprintf(relu, sizeof(relu), "%s/plugins/relu.so", mxt_build_dir());
    const char *plugins[] = {relu, NULL};
    mxop__launch_opts_t o;
    real_opts(&o, serverd, sizeof(serverd), plugins);
    mxop__launch_t d;
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(entries(d.plugins), 1, "only the one library was copied");
    mxop_client_t *c = mxt_connect(&d);
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    mxop_close(c);
    pid_t pid = d.pid;
    int status;
    cr_assert_eq(mxop__launch_close(&d, 10000, &status), 0, "it stopped by itself");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
    cr_assert(process_gone(pid));
    cr_assert_eq(entries(base), 0, "the private directory is gone");
}

Test(launch, exit_at_start_says_the_daemons_last_line)
{
    const char *serverd = fake_serverd("echo first >&2; echo 'bad option --frob' >&2; exit 3");
    mxop__launch_opts_t o = {
        .serverd = serverd, .tmp_dir = base, .prefix = "t", .stderr_name = "daemon.log"};
    mxop__launch_t d;
    char err[512];
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_EINTERNAL);
    cr_assert(strstr(err, "exit status 3") != NULL, "%s", err);
    cr_assert(strstr(err, "bad option --frob") != NULL, "%s", err);
    cr_assert_eq(entries(base), 1, "only the stand-in is left");
}

Test(launch, a_daemon_that_never_answers_is_killed)
{
    const char *serverd = fake_serverd("touch \"$2.tmp.4242\"; exec sleep 60");
    mxop__launch_opts_t o = {.serverd = serverd, .tmp_dir = base, .prefix = "t", .ready_ms = 300};
    mxop__launch_t d;
    char err[512];
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_ETIMEOUT);
    cr_assert(strstr(err, "did not answer") != NULL, "%s", err);
    cr_assert_eq(d.pid, 0);
    cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1, "no child left to reap");
    cr_assert_eq(entries(base), 1, "the directory went, with the name the stand-in made");
}

Test(launch, bad_options_are_refused_naming_what)
{
    mxop__launch_t d;
    char err[512], serverd[512], missing[128];
    char longdir[200];
    memset(longdir, 'x', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    mxop__launch_opts_t o;
    real_opts(&o, serverd, sizeof(serverd), NULL);
    o.tmp_dir = longdir;
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_EINVAL);
    cr_assert(strstr(err, "too long") != NULL, "%s", err);

    snprintf(missing, sizeof(missing), "%s/none.so", base);
    const char *plugins[] = {missing, NULL};
    real_opts(&o, serverd, sizeof(serverd), plugins);
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_EIO);
    cr_assert(strstr(err, missing) != NULL, "%s", err);

    real_opts(&o, serverd, sizeof(serverd), NULL);
    o.serverd = missing;
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_EIO);
    cr_assert(strstr(err, missing) != NULL, "%s", err);
    cr_assert_eq(entries(base), 0, "nothing left by the refused starts");
}

Test(launch, env_defaults_do_not_override_the_callers)
{
    const char *serverd =
        fake_serverd("echo \"A=$MXDL_A B=$MXDL_B\" > \"$(dirname \"$2\")/../env\"; "
                     "exit 0");
    setenv("MXDL_A", "mine", 1);
    unsetenv("MXDL_B");
    static const char *const env[] = {"MXDL_A=default", "MXDL_B=default", NULL};
    mxop__launch_opts_t o = {.serverd = serverd, .tmp_dir = base, .prefix = "t", .env = env};
    mxop__launch_t d;
    char err[512], path[128], line[128] = "";
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_EINTERNAL);
    snprintf(path, sizeof(path), "%s/env", base);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL);
    cr_assert(fgets(line, sizeof(line), f) != NULL);
    fclose(f);
    cr_assert_str_eq(line, "A=mine B=default\n");
}

/*
 * An owner killed by a fatal signal (mxop__launch_cleanup_on_signals): its
 * daemon is stopped and its directory removed before it dies by the signal.
 */
Test(launch, fatal_signal_ends_the_daemon_and_removes_its_directory)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t owner = fork();
    cr_assert(owner >= 0);
    if (owner == 0) {
        close(fds[0]);
        char serverd[512], err[512];
        mxop__launch_opts_t o;
        real_opts(&o, serverd, sizeof(serverd), NULL);
        mxop__launch_cleanup_on_signals();
        static mxop__launch_t d;
        if (mxop__launch_start(&d, &o, err, sizeof(err)) != 0)
            _exit(2);
        if (write(fds[1], &d.pid, sizeof(d.pid)) != sizeof(d.pid))
            _exit(3);
        pause();
        _exit(4);
    }
    close(fds[1]);
    pid_t daemon = 0;
    cr_assert_eq(read(fds[0], &daemon, sizeof(daemon)), (ssize_t)sizeof(daemon));
    close(fds[0]);
    cr_assert_eq(entries(base), 1);
    kill(owner, SIGTERM);
    int st;
    cr_assert_eq(waitpid(owner, &st, 0), owner);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "the owner died by its signal (0x%x)",
              st);
    cr_assert(process_gone(daemon), "the daemon was stopped and reaped by its owner");
    cr_assert_eq(entries(base), 0, "the private directory is gone");
}

/* An owner that exits without stopping its daemon: the atexit clean-up does. */
Test(launch, exit_without_stop_ends_the_daemon)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t owner = fork();
    cr_assert(owner >= 0);
    if (owner == 0) {
        close(fds[0]);
        char serverd[512], err[512];
        mxop__launch_opts_t o;
        real_opts(&o, serverd, sizeof(serverd), NULL);
        static mxop__launch_t d;
        if (mxop__launch_start(&d, &o, err, sizeof(err)) != 0)
            _exit(2);
        if (write(fds[1], &d.pid, sizeof(d.pid)) != sizeof(d.pid))
            _exit(3);
        exit(0);
    }
    close(fds[1]);
    pid_t daemon = 0;
    cr_assert_eq(read(fds[0], &daemon, sizeof(daemon)), (ssize_t)sizeof(daemon));
    close(fds[0]);
    int st;
    cr_assert_eq(waitpid(owner, &st, 0), owner);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "0x%x", st);
    cr_assert(process_gone(daemon));
    cr_assert_eq(entries(base), 0, "the private directory is gone");
}

/* The daemon holds none of its owner's descriptors (stdin is /dev/null), and a bare name is
 * looked for on $PATH. */
Test(launch, daemon_gets_no_descriptor_of_its_owner_and_a_bare_name_is_found_on_path)
{
    int keep = open("/dev/null", O_RDONLY); /* no O_CLOEXEC: inherited unless closed */
    cr_assert(keep >= 3);
    char body[256];
    snprintf(body, sizeof(body),
             "out=\"$(dirname \"$2\")/../fds\"; "
             "if [ -e /proc/$$/fd/%d ]; then echo open; else echo closed; fi > \"$out\"; "
             "readlink /proc/$$/fd/0 >> \"$out\"; exit 0",
             keep);
    fake_serverd(body);
    char path[512];
    snprintf(path, sizeof(path), "%s:%s", base, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    mxop__launch_opts_t o = {.serverd = "fake-serverd", .tmp_dir = base, .prefix = "t"};
    mxop__launch_t d;
    char err[512], line[128] = "", fds[128];
    cr_assert_eq(mxop__launch_start(&d, &o, err, sizeof(err)), MXOP_EINTERNAL, "%s", err);
    close(keep);
    snprintf(fds, sizeof(fds), "%s/fds", base);
    FILE *f = fopen(fds, "r");
    cr_assert(f != NULL, "the stand-in was not run from $PATH: %s", err);
    cr_assert(fgets(line, sizeof(line), f) != NULL);
    cr_assert_str_eq(line, "closed\n");
    cr_assert(fgets(line, sizeof(line), f) != NULL);
    cr_assert_str_eq(line, "/dev/null\n");
    fclose(f);
}
