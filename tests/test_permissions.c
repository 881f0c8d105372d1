/*
 * tests/test_permissions.c - who reaches the daemon's socket and what a
 * refused peer costs its log: --socket-mode and --socket-group, --allow-gid
 * (primary and supplementary groups), refusals logged at most once a
 * second with a count, and --log-file reopened at SIGUSR1 (log rotation),
 * as docs/operations.md ("Permissions", "Logs") describes them.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "mxop/client.h"
#include "mxop/errors.h"
#include "tests/harness.h"

static mxt_daemon_t daemon_;
static char logpath[400];

static void stop(void)
{
    if (daemon_.pid > 0)
        mxt_daemon_stop(&daemon_);
}

static void need_root(void)
{
    if (geteuid() != 0)
        cr_skip_test("changing to other uids and gids needs the tests to run as root");
}

/* Starts a daemon whose socket others may reach, logging to a file in a directory of its own. */
static void start_open(const char *const *more)
{
    static char dirbuf[] = "/tmp/mxop-perm-log-XXXXXX";
    static char dir[sizeof(dirbuf)];
    memcpy(dir, dirbuf, sizeof(dirbuf));
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(logpath, sizeof(logpath), "%s/serverd.log", dir);
    const char *args[16] = {"--log-file", logpath, "--log-level", "info"};
    int n = 4;
    for (int i = 0; more != NULL && more[i] != NULL && n < 15; i++)
        args[n++] = more[i];
    args[n] = NULL;
    mxt_daemon_start(&daemon_, args);
    /* Others may pass through the test's private directory to the socket. */
    chmod(daemon_.dir, 0711);
}

static void remove_log(void)
{
    char dir[400];
    snprintf(dir, sizeof(dir), "%s", logpath);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return;
    unlink(logpath);
    char old[420];
    snprintf(old, sizeof(old), "%s.1", logpath);
    unlink(old);
    *slash = '\0';
    rmdir(dir);
}

static void stop_and_clean(void)
{
    stop();
    remove_log();
}

static size_t read_log(char *out, size_t outlen)
{
    out[0] = '\0';
    FILE *f = fopen(logpath, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
    return n;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/*
 * In a child as uid 65533 with gid `gid` and the supplementary groups
 * `groups`: mxop_connect's result, 0 or MXOP_EDENIED (anything else fails the test).
 */
static int connect_as(gid_t gid, const gid_t *groups, int ngroups)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (setgroups((size_t)ngroups, groups) != 0 || setgid(gid) != 0 || setuid(65533) != 0)
            _exit(200 + errno);
        mxop_client_t *c = NULL;
        int rc = mxop_connect(daemon_.sock, NULL, &c);
        mxop_close(c);
        _exit(rc == 0 ? 0 : rc == MXOP_EDENIED ? 1 : 2);
    }
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status), "the client child died: 0x%x", status);
    int code = WEXITSTATUS(status);
    cr_assert(code < 200, "the child could not become uid 65533: %s", strerror(code - 200));
    cr_assert(code != 2, "the client failed with another error than MXOP_EDENIED");
    return code == 0 ? 0 : MXOP_EDENIED;
}

/* --socket-mode 0660 --socket-group G: the socket has that mode and group. */
Test(permissions, socket_mode_and_group_apply_to_the_socket, .timeout = 60, .fini = stop)
{
    need_root();
    const char *args[] = {"--socket-mode", "0660", "--socket-group", "4242", NULL};
    mxt_daemon_start(&daemon_, args);
    struct stat st;
    cr_assert(stat(daemon_.sock, &st) == 0);
    cr_expect_eq(st.st_mode & 07777, 0660, "socket mode %o", (unsigned)(st.st_mode & 07777));
    cr_expect_eq(st.st_gid, 4242, "socket group %u", (unsigned)st.st_gid);
}

/* A mode that would lock the owner out, or is not octal, is refused at start with a sentence. */
Test(permissions, a_bad_socket_mode_is_refused_at_start, .timeout = 30)
{
    char dir[] = "/tmp/mxop-perm-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char err[1024];
    const char *args[] = {"--socket-mode", "0755", NULL};
    int rc = mxt_daemon_exit_status(dir, dir, args, err, sizeof(err));
    cr_expect_eq(rc, 2, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "--socket-mode must be an octal mode") != NULL &&
                  strstr(err, "0755") != NULL,
              "%s", err);
    rmdir(dir);
}

/* --allow-gid admits a member by primary or supplementary group, and no one else. */
Test(permissions, allow_gid_admits_the_groups_members_only, .timeout = 60, .fini = stop_and_clean)
{
    need_root();
    const char *args[] = {"--socket-mode", "0666", "--allow-gid", "4242", NULL};
    start_open(args);
    gid_t none[1] = {0};
    gid_t supp[1] = {4242};
    int rc = connect_as(4242, none, 0);
    cr_expect_eq(rc, 0, "primary gid 4242: %d %s", rc, mxop_err_name(rc));
    rc = connect_as(4243, supp, 1);
    cr_expect_eq(rc, 0, "supplementary group 4242: %s", mxop_err_name(rc));
    rc = connect_as(4243, none, 0);
    cr_expect_eq(rc, MXOP_EDENIED, "gid 4243 alone: %s", mxop_err_name(rc));
    static char text[1 << 16];
    read_log(text, sizeof(text));
    cr_log_info("%s", text);
}

/*
 * A refused peer reconnecting in a loop: the log gets about one line a
 * second, and a count of the rest (the old daemon logged each refusal).
 */
Test(permissions, refusals_are_logged_at_most_once_a_second, .timeout = 90, .fini = stop_and_clean)
{
    need_root();
    const char *args[] = {"--socket-mode", "0666", NULL};
    start_open(args);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65533) != 0)
            _exit(2);
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", daemon_.sock);
        int refused = 0;
        for (int i = 0; i < 2000; i++) {
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0)
                _exit(3);
            if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
                char buf[256];
                if (read(fd, buf, sizeof(buf)) > 0)
                    refused++;
            }
            close(fd);
        }
        _exit(refused >= 1000 ? 0 : 4);
    }
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the refused peer's loop failed (0x%x)", status);
    /* The summary of the last second comes from the daemon's tick. */
    mxt_sleep_ms(2500);
    static char text[1 << 20];
    read_log(text, sizeof(text));
    int lines = count(text, "refused");
    cr_expect(lines >= 1, "no refusal logged at all:\n%s", text);
    cr_expect(lines < 100, "%d refusal lines for 2000 refused connections", lines);
    cr_expect(strstr(text, "more connections in the last second") != NULL ||
                  strstr(text, "more in the last second") != NULL,
              "no count of the refusals not logged:\n%.2000s", text);
}

/* --log-file: lines go to the file; after it is moved away, SIGUSR1 opens a new one. */
Test(permissions, log_file_is_reopened_at_sigusr1, .timeout = 60, .fini = stop_and_clean)
{
    start_open(NULL);
    static char text[1 << 16];
    /* The line comes just after the socket appears: wait for it. */
    int up = 0;
    for (int i = 0; i < 500 && !up; i++) {
        up = read_log(text, sizeof(text)) > 0 && strstr(text, "listening on") != NULL;
        if (!up)
            mxt_sleep_ms(20);
    }
    cr_assert(up, "no 'listening on' line in the log file: '%s'", text);
    char moved[420];
    snprintf(moved, sizeof(moved), "%s.1", logpath);
    cr_assert(rename(logpath, moved) == 0);
    cr_assert(kill(daemon_.pid, SIGUSR1) == 0);
    int ok = 0;
    for (int i = 0; i < 500 && !ok; i++) {
        mxt_sleep_ms(20);
        ok = read_log(text, sizeof(text)) > 0 && strstr(text, "reopened") != NULL;
    }
    cr_expect(ok, "no new log file with the reopen line: '%s'", text);
    cr_expect(mxt_daemon_alive(&daemon_), "SIGUSR1 killed the daemon");
}
