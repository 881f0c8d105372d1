/*
 * tests/test_opkit_build.c - the op author's build line: the
 * README and the guide give the same one, pkg-config finds the headers from
 * the build tree before make install, and that line builds a library whose
 * exported info carries this header's ABI version.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mxop/op.h"

#define BUILD_LINE "cc -shared -fPIC -O3"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

Test(opkit_build, readme_and_guide_agree_on_the_build_line, .timeout = 30)
{
    const char *files[] = {"README.md", "docs/op-author-guide.md", "include/mxop/op.h"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", MXOP_TEST_SOURCE_DIR, files[i]);
        char *text = slurp(path);
        cr_assert(strstr(text, BUILD_LINE) != NULL, "%s lacks '%s'", files[i], BUILD_LINE);
        cr_assert(strstr(text, "cc -shared -fPIC -O2") == NULL, "%s still says -O2", files[i]);
        free(text);
    }
}

Test(opkit_build, pkg_config_from_the_build_tree_builds_a_plugin, .timeout = 120)
{
    char dir[] = "/tmp/mxop-opkit-build-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[4096], out[1024];
    snprintf(cmd, sizeof(cmd), "PKG_CONFIG_PATH='%s' pkg-config --cflags mxop-plugin",
             mxt_build_dir());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "pkg-config failed: %s", out);
    /* The build tree's .pc names its paths from its own place (${pcfiledir}),
     * so the flag is compared as the directory it names. */
    char want[1024], got[PATH_MAX], flag[1024];
    snprintf(want, sizeof(want), "%s/include", MXOP_TEST_SOURCE_DIR);
    cr_assert_eq(sscanf(out, "-I%1023s", flag), 1, "pkg-config gave '%s', no -I first", out);
    cr_assert_not_null(realpath(flag, got), "pkg-config's %s names no directory", flag);
    char want_real[PATH_MAX];
    cr_assert_not_null(realpath(want, want_real));
    cr_assert_str_eq(got, want_real, "pkg-config gave '%s', not %s", out, want);

    /* The guide's line, word for word, on an example plugin. */
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && export PKG_CONFIG_PATH='%s' && " BUILD_LINE
             " $(pkg-config --cflags mxop-plugin) plugins/relu.c -o '%s/relu.so'",
             MXOP_TEST_SOURCE_DIR, mxt_build_dir(), dir);
    cr_assert_eq(system(cmd), 0, "the build line failed: %s", cmd);
    char so[1024];
    snprintf(so, sizeof(so), "%s/relu.so", dir);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "%s", dlerror());
    const mxop_plugin_info_t *info = dlsym(h, "mxop_plugin_info");
    cr_assert_not_null(info);
    cr_assert_eq(info->abi_version, MXOP_ABI_VERSION);
    cr_assert_not_null(dlsym(h, "mxop_plugin_init"));
    dlclose(h);
    unlink(so);
    rmdir(dir);
}
