/*
 * tests/plugins/hostile_priv.c - a library that asks who it runs as and
 * reaches for what only root may read (tests/test_privsep.c).
 *
 *   priv_ids    1 input (ignored), 1 output: f64 [4] or more.
 *               out[0..3] = getuid(), geteuid(), getgid(), getegid().
 *   priv_read   1 input (ignored), 1 output: f64 [1] or more.  Attribute
 *               path: a file to read.  Opens it read-only: when that is
 *               refused the op fails with MXOP_EDENIED and a sentence
 *               naming the path and the errno (out[0] = -errno); when it
 *               is not, out[0] is the number of bytes read (the secret
 *               reached the library).
 *   priv_shutdown  1 input (ignored), 1 output: f64 [2] or more.
 *               shutdown(4, SHUT_RDWR) and shutdown(3, SHUT_RDWR):
 *               out[i] = -errno when refused, 1 when not.  Returns 0 either
 *               way; a library that broke its channel is the test's to see.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_priv", "1.0");

static const mxop_host_t *host;

static int priv_ids_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    (void)n_out;
    if (out[0].size < 4)
        return host->set_error(ctx, MXOP_ESHAPE, "priv_ids: the output needs 4 elements");
    double *r = out[0].data;
    r[0] = (double)getuid();
    r[1] = (double)geteuid();
    r[2] = (double)getgid();
    r[3] = (double)getegid();
    return 0;
}

static int priv_read_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    (void)n_out;
    const char *path = host->attr_get(ctx, "path");
    if (path == NULL || out[0].size < 1)
        return host->set_error(ctx, MXOP_EATTR, "priv_read: needs the attribute path");
    double *r = out[0].data;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        r[0] = -(double)e;
        return host->set_error(ctx, MXOP_EDENIED, "priv_read: open %s: %s", path, strerror(e));
    }
    char buf[256];
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    r[0] = (double)(n > 0 ? n : 0);
    return 0;
}

static int priv_shutdown_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                 mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    (void)n_out;
    if (out[0].size < 2)
        return host->set_error(ctx, MXOP_ESHAPE, "priv_shutdown: the output needs 2 elements");
    double *r = out[0].data;
    r[0] = shutdown(4, SHUT_RDWR) == 0 ? 1 : -(double)errno;
    r[1] = shutdown(3, SHUT_RDWR) == 0 ? 1 : -(double)errno;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "priv_ids",
        .description = "reports the worker's uid, euid, gid and egid",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = priv_ids_forward,
    };
    int rc = host->register_op(ctx, &def);
    if (rc != 0)
        return rc;
    def.name = "priv_read";
    def.description = "reads a file it was told of (a root-only one, in the test)";
    def.forward = priv_read_forward;
    rc = host->register_op(ctx, &def);
    if (rc != 0)
        return rc;
    def.name = "priv_shutdown";
    def.description = "shuts the worker's data and supervisor channels down";
    def.forward = priv_shutdown_forward;
    return host->register_op(ctx, &def);
}
