/*
 * tests/plugins/hostile_fs.c - a library that goes for the filesystem:
 * secrets, the plugin directory (to replace another library) and the
 * control socket's directory.
 *
 *   hostile_fs   1 input (ignored), 1 output: f64 [HOSTILE_FS_COUNT], the
 *                shape of the input.
 *                out[i] = -errno when attempt i was refused (EACCES or
 *                EPERM by Landlock; ENOENT where the worker's minimal root
 *                does not have the path, EROFS where it is bound
 *                read-only), 1 when it was not.  Returns 0 either way: the
 *                test reads out[] and then looks at the files themselves.
 *
 * Attributes: plugin_dir (the daemon's plugin directory), victim (a library
 * file name in it), socket (the daemon's control socket).  The attempts,
 * in the order of out[] (tests/test_confine.c keeps the same list):
 *
 *   read_shadow, create_in_plugin_dir, write_victim, truncate_victim,
 *   rename_victim, unlink_victim, symlink_in_plugin_dir, unlink_socket,
 *   rename_socket, create_in_socket_dir
 *
 * An attempt that succeeds is not undone: the test must see the damage.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_fs", "1.0");

#define HOSTILE_FS_COUNT 10

static const mxop_host_t *host;

static double verdict(long rc, int err)
{
    if (rc < 0 && (err == EPERM || err == EACCES || err == ENOENT || err == EROFS))
        return -(double)err;
    return 1;
}

static double try_open(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC, 0644);
    int e = errno;
    if (fd >= 0) {
        if (flags & (O_WRONLY | O_RDWR))
            (void)write(fd, "evil", 4);
        close(fd);
        return 1;
    }
    return verdict(-1, e);
}

static void dir_of(const char *path, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash != NULL && slash != out)
        *slash = '\0';
}

static int hostile_fs_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                              mxop_tensor_t *out)
{
    const char *pdir = host->attr_get(ctx, "plugin_dir");
    const char *victim = host->attr_get(ctx, "victim");
    const char *sock = host->attr_get(ctx, "socket");
    if (pdir == NULL || victim == NULL || sock == NULL || out[0].size < HOSTILE_FS_COUNT)
        return host->set_error(ctx, MXOP_EATTR, "hostile_fs: needs plugin_dir, victim and socket");
    double *r = out[0].data;
    char v[PATH_MAX], p[PATH_MAX + 16], sdir[PATH_MAX];
    snprintf(v, sizeof(v), "%s/%s", pdir, victim);
    dir_of(sock, sdir, sizeof(sdir));
    int i = 0;

    r[i++] = try_open("/etc/shadow", O_RDONLY);
    snprintf(p, sizeof(p), "%s/evil.so", pdir);
    r[i++] = try_open(p, O_WRONLY | O_CREAT | O_TRUNC);
    r[i++] = try_open(v, O_WRONLY);
    long x = truncate(v, 0);
    r[i++] = verdict(x, errno);
    snprintf(p, sizeof(p), "%s.moved", v);
    x = rename(v, p);
    r[i++] = verdict(x, errno);
    x = unlink(v);
    r[i++] = verdict(x, errno);
    snprintf(p, sizeof(p), "%s/evil-link.so", pdir);
    x = symlink("/tmp/evil.so", p);
    r[i++] = verdict(x, errno);
    x = unlink(sock);
    r[i++] = verdict(x, errno);
    snprintf(p, sizeof(p), "%s.moved", sock);
    x = rename(sock, p);
    r[i++] = verdict(x, errno);
    snprintf(p, sizeof(p), "%s/evil-file", sdir);
    r[i++] = try_open(p, O_WRONLY | O_CREAT | O_TRUNC);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "hostile_fs",
        .description = "goes for secrets, the plugin directory and the socket's directory",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = hostile_fs_forward,
    };
    return host->register_op(ctx, &def);
}
