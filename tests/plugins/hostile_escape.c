/*
 * tests/plugins/hostile_escape.c - a library that makes namespaces of its
 * own, leaves files in /dev/shm for after its death, grows a file without
 * bound, and sends on the worker's channels (tests/test_neighbours.c).
 *
 * Each op: 1 input (ignored), 1 output f64 of at least ESC_OUT elements;
 * out[i] is the call's result (0 or more) or -errno.  Returns 0 either way.
 *
 *   esc_clone   0 clone(CLONE_NEWUSER | SIGCHLD)
 *               1 clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | SIGCHLD)
 *               2 clone3 with CLONE_NEWUSER
 *               3 clone(SIGCHLD): a plain fork
 *               4 unshare(CLONE_NEWUSER)
 *               (a child that is made exits at once; the op reaps it)
 *   esc_shm     attrs name, mb: writes mb MiB into /dev/shm/NAME, 1 MiB at
 *               a time, and keeps the file.  out[0] = 0 or the -errno that
 *               stopped it, out[1] = MiB written, out[2] = the size in MiB
 *               of the file system under /dev/shm.
 *   esc_fsize   out[0] = ftruncate of a memfd to 2 GiB, out[1] = pwrite of
 *               one byte at 2 GiB into it.
 *   esc_send    zero-length sends on fd 3 and fd 4 (nothing reaches the
 *               other end even when they are not refused):
 *               0 send(4)  1 sendto(3)  2 sendmmsg(4)  3 sendmsg(4, 0)
 *               4 sendmsg(3, MSG_DONTWAIT)  5 sendfile(4)  6 splice(to 4)
 *               7 send(3)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_escape", "1.0");

#define ESC_OUT 16

static const mxop_host_t *host;

static double res(long rc)
{
    return rc < 0 ? -(double)errno : (double)rc;
}

static int start(mxop_ctx_t *ctx, int n_out, mxop_tensor_t *out, double **r)
{
    if (n_out < 1 || out[0].size < ESC_OUT)
        return host->set_error(ctx, MXOP_EATTR, "hostile_escape: the output needs %d elements",
                               ESC_OUT);
    *r = out[0].data;
    for (int i = 0; i < ESC_OUT; i++)
        (*r)[i] = 0;
    return 0;
}

/* clone(2) with fork's semantics: the child exits at once, the parent reaps it. */
static double try_clone(unsigned long flags)
{
    long pid = syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        return -(double)errno;
    while (waitpid((pid_t)pid, NULL, __WALL) < 0 && errno == EINTR)
        ;
    return 0;
}

static double try_clone3(uint64_t flags)
{
    struct clone_args a;
    memset(&a, 0, sizeof(a));
    a.flags = flags;
    a.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &a, sizeof(a));
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        return -(double)errno;
    while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

static int esc_clone(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                     mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    double *r;
    int rc = start(ctx, n_out, out, &r);
    if (rc != 0)
        return rc;
    r[0] = try_clone(CLONE_NEWUSER | SIGCHLD);
    r[1] = try_clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | SIGCHLD);
    r[2] = try_clone3(CLONE_NEWUSER);
    r[3] = try_clone(SIGCHLD);
    r[4] = res(unshare(CLONE_NEWUSER));
    return 0;
}

static int esc_shm(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    double *r;
    int rc = start(ctx, n_out, out, &r);
    if (rc != 0)
        return rc;
    const char *name = host->attr_get(ctx, "name");
    const char *mb = host->attr_get(ctx, "mb");
    if (name == NULL || mb == NULL || strchr(name, '/') != NULL)
        return host->set_error(ctx, MXOP_EATTR, "esc_shm: needs the attributes name and mb");
    struct statvfs vfs;
    r[2] = statvfs("/dev/shm", &vfs) == 0
               ? (double)vfs.f_blocks * (double)vfs.f_frsize / (1024.0 * 1024.0)
               : -(double)errno;
    char path[300];
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        r[0] = -(double)errno;
        return 0;
    }
    static char chunk[1 << 20];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < atoi(mb); i++) {
        size_t done = 0;
        while (done < sizeof(chunk)) {
            ssize_t w = write(fd, chunk + done, sizeof(chunk) - done);
            if (w < 0) {
                r[0] = -(double)errno;
                close(fd);
                return 0;
            }
            done += (size_t)w;
        }
        r[1] += 1;
    }
    close(fd);
    return 0;
}

static int esc_fsize(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                     mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    double *r;
    int rc = start(ctx, n_out, out, &r);
    if (rc != 0)
        return rc;
    int fd = memfd_create("hostile-escape", MFD_CLOEXEC);
    if (fd < 0) {
        r[0] = r[1] = -(double)errno;
        return 0;
    }
    r[0] = res(ftruncate(fd, (off_t)2 << 30));
    r[1] = res(pwrite(fd, "x", 1, (off_t)2 << 30));
    close(fd);
    return 0;
}

static int esc_send(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                    mxop_tensor_t *out)
{
    (void)n_in;
    (void)in;
    double *r;
    int rc = start(ctx, n_out, out, &r);
    if (rc != 0)
        return rc;
    char b = 0;
    struct iovec iov = {.iov_base = &b, .iov_len = 0};
    struct mmsghdr mm;
    memset(&mm, 0, sizeof(mm));
    mm.msg_hdr.msg_iov = &iov;
    mm.msg_hdr.msg_iovlen = 1;
    r[0] = res(send(4, &b, 0, MSG_NOSIGNAL));
    r[1] = res(sendto(3, &b, 0, MSG_NOSIGNAL, NULL, 0));
    r[2] = res(sendmmsg(4, &mm, 1, MSG_NOSIGNAL));
    r[3] = res(sendmsg(4, &mm.msg_hdr, 0));
    r[4] = res(sendmsg(3, &mm.msg_hdr, MSG_DONTWAIT | MSG_NOSIGNAL));
    int mfd = memfd_create("hostile-escape", MFD_CLOEXEC);
    r[5] = mfd >= 0 ? res(sendfile(4, mfd, NULL, 0)) : -(double)errno;
    if (mfd >= 0)
        close(mfd);
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
        r[6] = res(splice(p[0], NULL, 4, NULL, 0, SPLICE_F_NONBLOCK));
        close(p[0]);
        close(p[1]);
    } else {
        r[6] = -(double)errno;
    }
    r[7] = res(send(3, &b, 0, MSG_NOSIGNAL));
    return 0;
}

static int esc_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                           mxop_shape_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    out[0].ndim = 1;
    out[0].dims[0] = ESC_OUT;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {{"esc_clone", esc_clone},
               {"esc_shm", esc_shm},
               {"esc_fsize", esc_fsize},
               {"esc_send", esc_send}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = "escapes its worker's limits",
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].fn,
            .infer_shape = esc_infer_shape,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    return 0;
}
