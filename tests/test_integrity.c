/*
 * tests/test_integrity.c - only the libraries the operator listed load
 * (--allowlist), the digest being that of the very file loaded, and the
 * plugin directory's permissions (--strict-plugin-dir).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static mxt_daemon_t daemon_;
static char list_path[400];

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
    if (list_path[0] != '\0')
        unlink(list_path);
}

TestSuite(integrity, .fini = teardown, .timeout = 60);

/* The SHA-256 of a file, as sha256sum(1) computes it: the reference. */
static void digest_of(const char *path, char out[65])
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    cr_assert_eq(fscanf(p, "%64s", out), 1, "sha256sum %s gave nothing", path);
    pclose(p);
    cr_assert_eq(strlen(out), 64);
}

static void write_list(const char *text)
{
    FILE *f = fopen(list_path, "w");
    cr_assert(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* A daemon with an allowlist holding relu.so's true digest and a wrong one for crash.so. */
static void start_with_list(void)
{
    snprintf(list_path, sizeof(list_path), "/tmp/mxop-allowlist-%d", (int)getpid());
    /* The plugin copies the daemon will load are the build's files, byte for byte. */
    char relu[600], digest[65], text[512];
    snprintf(relu, sizeof(relu), "%s/plugins/relu.so", mxt_build_dir());
    digest_of(relu, digest);
    snprintf(text, sizeof(text),
             "# test allowlist\n"
             "relu.so %s\n"
             "crash.so 0000000000000000000000000000000000000000000000000000000000000000\n",
             digest);
    write_list(text);
    const char *args[] = {"--allowlist", list_path, NULL};
    mxt_daemon_start(&daemon_, args);
}

static void relu_works(mxop_client_t *c)
{
    int64_t s[] = {8};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 2, &y);
    int rc = mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1);
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    for (size_t i = 0; i < 8; i++) {
        double v = mxt_get(&x, i);
        cr_assert_eq(mxt_get(&y, i), v > 0 ? v : 0);
    }
}

Test(integrity, listed_library_with_its_digest_loads)
{
    start_with_list();
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    relu_works(c);
    mxop_close(c);
}

Test(integrity, digest_mismatch_refused_naming_both_digests)
{
    start_with_list();
    char crash[400], actual[65];
    snprintf(crash, sizeof(crash), "%s/crash.so", daemon_.plugins);
    digest_of(crash, actual);
    mxop_client_t *c = mxt_connect(&daemon_);
    int rc = mxop_load_library(c, "crash.so");
    cr_assert_eq(rc, MXOP_EDENIED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    const char *m = mxop_last_error(c);
    cr_assert(strstr(m, actual) != NULL, "the actual digest is not named: %s", m);
    cr_assert(strstr(m, "0000000000000000000000000000000000000000000000000000000000000000") != NULL,
              "the expected digest is not named: %s", m);
    /* The session goes on. */
    cr_assert_eq(mxop_load_library(c, "relu.so"), 0, "%s", mxop_last_error(c));
    relu_works(c);
    mxop_close(c);
    cr_assert(mxt_daemon_alive(&daemon_));
}

Test(integrity, unlisted_library_refused)
{
    start_with_list();
    mxop_client_t *c = mxt_connect(&daemon_);
    int rc = mxop_load_library(c, "probe.so");
    cr_assert_eq(rc, MXOP_EDENIED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "not in the allowlist") != NULL, "%s", mxop_last_error(c));
    mxop_close(c);
}

Test(integrity, replaced_library_refused)
{
    start_with_list();
    /* Someone replaces relu.so in the plugin directory with another library. */
    char relu[400], crash[400];
    snprintf(relu, sizeof(relu), "%s/relu.so", daemon_.plugins);
    snprintf(crash, sizeof(crash), "%s/crash.so", daemon_.plugins);
    cr_assert_eq(unlink(relu), 0);
    cr_assert_eq(link(crash, relu), 0, "%s", strerror(errno));
    mxop_client_t *c = mxt_connect(&daemon_);
    int rc = mxop_load_library(c, "relu.so");
    cr_assert_eq(rc, MXOP_EDENIED, "got %s (%s)", mxop_err_name(rc), mxop_last_error(c));
    cr_assert(strstr(mxop_last_error(c), "SHA-256") != NULL, "%s", mxop_last_error(c));
    mxop_close(c);
}

Test(integrity, edited_allowlist_applies_at_the_next_load)
{
    start_with_list();
    mxop_client_t *c = mxt_connect(&daemon_);
    cr_assert_eq(mxop_load_library(c, "probe.so"), MXOP_EDENIED);
    mxop_close(c);
    char probe[400], relu[600], d1[65], d2[65], text[512];
    snprintf(probe, sizeof(probe), "%s/probe.so", daemon_.plugins);
    snprintf(relu, sizeof(relu), "%s/relu.so", daemon_.plugins);
    digest_of(probe, d1);
    digest_of(relu, d2);
    snprintf(text, sizeof(text), "relu.so %s\nprobe.so %s\n", d2, d1);
    write_list(text);
    c = mxt_connect(&daemon_);
    int rc = mxop_load_library(c, "probe.so");
    cr_assert_eq(rc, 0, "%s: %s", mxop_err_name(rc), mxop_last_error(c));
    mxop_close(c);
}

Test(integrity, bad_allowlist_line_stops_the_daemon)
{
    char dir[] = "/tmp/mxop-integrity-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(list_path, sizeof(list_path), "%s/list", dir);
    write_list("relu.so not-a-digest\n");
    const char *extra[] = {"--allowlist", list_path, NULL};
    char err[2048];
    int st = mxt_daemon_exit_status(dir, dir, extra, err, sizeof(err));
    unlink(list_path);
    list_path[0] = '\0';
    rmdir(dir);
    cr_assert_eq(st, 2, "the daemon exited with %d: %s", st, err);
    cr_assert(strstr(err, "allowlist line 1") != NULL, "%s", err);
}

Test(integrity, group_writable_plugin_dir_refused_with_strict_plugin_dir)
{
    char dir[] = "/tmp/mxop-integrity-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    cr_assert_eq(chmod(dir, 0775), 0);
    const char *strict[] = {"--strict-plugin-dir", "on", "--log-level", "error", NULL};
    char err[2048];
    int st = mxt_daemon_exit_status(dir, dir, strict, err, sizeof(err));
    rmdir(dir);
    cr_assert_eq(st, 2, "the daemon exited with %d: %s", st, err);
    cr_assert(strstr(err, "writable by others than its owner") != NULL, "%s", err);
}
