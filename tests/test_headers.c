/*
 * tests/test_headers.c - each public header compiles on its own, in C and
 * in C++-free strict C11, including nothing but the standard headers it names;
 * no component includes another's private headers.
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef MXOP_TEST_SOURCE_DIR
#define MXOP_TEST_SOURCE_DIR "."
#endif

static void compiles_alone(const char *header)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "printf '#include <mxop/%s>\\nint main(void) { return 0; }\\n' | "
             "${CC:-cc} -std=c11 -Wall -Wextra -Wstrict-prototypes -Werror -pedantic "
             "-I'%s/include' -x c - -fsyntax-only",
             header, MXOP_TEST_SOURCE_DIR);
    int status = system(cmd);
    cr_assert_eq(status, 0, "mxop/%s does not compile on its own", header);
}

Test(headers, op_h_alone, .timeout = 30)
{
    compiles_alone("op.h");
}

Test(headers, client_h_alone, .timeout = 30)
{
    compiles_alone("client.h");
}

Test(headers, types_h_alone, .timeout = 30)
{
    compiles_alone("types.h");
}

Test(headers, errors_h_alone, .timeout = 30)
{
    compiles_alone("errors.h");
}

/*
 * The component rule of docs/architecture.md: no folder's code includes
 * another folder's private header.  Headers under these folders are their
 * own files' alone; common/, shm/, wire/ and include/ are for everyone, and
 * the worker shares its op runtime through server/worker/runtime.h only.
 * tests/ are outside the rule: they test each part from the inside.
 */
static const char *const private_dirs[] = {"client/", "server/daemon/", "server/worker/",
                                           "tools/",  "mxnet_proxy/",   "inproc/"};
static const char *const shared_private[] = {"server/worker/runtime.h"};
static const char *const source_dirs[] = {"bench",  "client",      "common",  "demo",   "include",
                                          "inproc", "mxnet_proxy", "plugins", "python", "server",
                                          "shm",    "tools",       "wire"};
static size_t source_len;
static char violations[4096];

/* The folder (one of private_dirs, or the top folder) that `path` belongs to. */
static size_t component_len(const char *path)
{
    for (size_t i = 0; i < sizeof(private_dirs) / sizeof(private_dirs[0]); i++)
        if (strncmp(path, private_dirs[i], strlen(private_dirs[i])) == 0)
            return strlen(private_dirs[i]);
    const char *slash = strchr(path, '/');
    return slash != NULL ? (size_t)(slash - path) + 1 : 0;
}

static int is_private(const char *inc)
{
    for (size_t i = 0; i < sizeof(shared_private) / sizeof(shared_private[0]); i++)
        if (strcmp(inc, shared_private[i]) == 0)
            return 0;
    for (size_t i = 0; i < sizeof(private_dirs) / sizeof(private_dirs[0]); i++)
        if (strncmp(inc, private_dirs[i], strlen(private_dirs[i])) == 0)
            return 1;
    return 0;
}

static int check_file(const char *fpath, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    if (type == FTW_D && (strcmp(fpath + ftw->base, "build") == 0 || fpath[ftw->base] == '.'))
        return FTW_SKIP_SUBTREE;
    const char *ext = strrchr(fpath + ftw->base, '.');
    if (type != FTW_F || ext == NULL ||
        (strcmp(ext, ".c") != 0 && strcmp(ext, ".h") != 0 && strcmp(ext, ".cc") != 0 &&
         strcmp(ext, ".cpp") != 0 && strcmp(ext, ".cu") != 0))
        return FTW_CONTINUE;
    const char *rel = fpath + source_len;
    FILE *f = fopen(fpath, "r");
    cr_assert_not_null(f, "cannot read %s", fpath);
    char line[1024], inc[512];
    int no = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        no++;
        if (sscanf(line, " # include \"%511[^\"]\"", inc) != 1 || !is_private(inc))
            continue;
        size_t own = component_len(rel);
        if (own != 0 && strncmp(inc, rel, own) == 0)
            continue;
        size_t used = strlen(violations);
        snprintf(violations + used, sizeof(violations) - used, "  %s:%d includes %s\n", rel, no,
                 inc);
    }
    fclose(f);
    return FTW_CONTINUE;
}

Test(headers, no_private_header_across_components, .timeout = 60)
{
    char root[1024];
    source_len = (size_t)snprintf(root, sizeof(root), "%s/", MXOP_TEST_SOURCE_DIR);
    violations[0] = '\0';
    for (size_t i = 0; i < sizeof(source_dirs) / sizeof(source_dirs[0]); i++) {
        char dir[1200];
        snprintf(dir, sizeof(dir), "%s%s", root, source_dirs[i]);
        struct stat st;
        if (stat(dir, &st) != 0)
            continue;
        cr_assert_eq(nftw(dir, check_file, 16, FTW_PHYS | FTW_ACTIONRETVAL), 0, "walking %s", dir);
    }
    cr_assert_eq(violations[0], '\0', "another component's private header included:\n%s",
                 violations);
}
