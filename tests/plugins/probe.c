/*
 * tests/plugins/probe.c - the sandbox tested from inside: one op that tries
 * every operation a strict worker must be refused, and says which were not.
 *
 *   sandbox_probe   1 input (ignored), 1 output: f64 [MXOP_PROBE_COUNT].
 *                   out[i] = -errno when attempt i was refused (EPERM or
 *                   EACCES; ENOENT or EROFS where the worker's minimal
 *                   root lacks the path or binds it read-only; for
 *                   "connect_daemon", the daemon hanging up: -ECONNRESET;
 *                   for "kill_daemon" and "ptrace_attach_daemon", ESRCH,
 *                   no such pid in the worker's pid namespace, counts as
 *                   -ENOENT),
 *                   1 when it was not refused (it succeeded, or failed for
 *                   another reason after the permission checks).  Returns
 *                   0 when everything was refused, else MXOP_EOP_FAILED
 *                   naming what was not.
 *
 * Attributes: daemon_pid (the daemon's pid), socket (its control socket),
 * dir (a directory the probe may create entries in).
 *
 * Every attempt is harmless when it is allowed: mounts go on a fresh
 * directory and are undone, execve runs /bin/true in a child when a child
 * can be had, a traced daemon is seized without being stopped, setuid comes
 * last.  The order of the names is the order of out[] (tests/test_sandbox.c
 * keeps the same list).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("probe", "1.0");

static const mxop_host_t *host;

static const char *const names[] = {
    "ptrace_traceme",
    "ptrace_attach_daemon",
    "process_vm_readv",
    "open_daemon_mem",
    "kill_daemon",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "bpf",
    "perf_event_open",
    "execve",
    "fork",
    "socket_inet",
    "socket_inet6",
    "socket_packet",
    "socket_netlink",
    "connect_daemon",
    "bind_unix_path",
    "mknod_char",
    "keyctl",
    "unshare",
    "setns",
    "personality",
    "io_uring_setup",
    "reboot",
    "swapon",
    "setuid",
};
#define N_PROBES ((int)(sizeof(names) / sizeof(names[0])))

/* -errno if the call was refused by a permission check or the minimal root, else 1. */
static double verdict(long rc, int err)
{
    if (rc < 0 && (err == EPERM || err == EACCES || err == ENOENT || err == EROFS))
        return -(double)err;
    return 1;
}

static double try_fd(int fd)
{
    int e = errno;
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return verdict(-1, e);
}

static double probe_exec(void)
{
    char *argv[] = {"/bin/true", NULL};
    char *envp[] = {NULL};
    pid_t pid = fork();
    if (pid == 0) {
        execve("/bin/true", argv, envp);
        _exit(errno == EPERM || errno == EACCES ? 100 : 101);
    }
    if (pid > 0) {
        int st = 0;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) && WEXITSTATUS(st) == 100 ? -(double)EPERM : 1;
    }
    /* No child to spare: try in place (it only replaces us if it is allowed). */
    long rc = execve("/bin/true", argv, envp);
    return verdict(rc, errno);
}

static double probe_fork(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid > 0) {
        waitpid(pid, NULL, 0);
        return 1;
    }
    return verdict(-1, errno);
}

/* The daemon hangs up on a worker at once; a served connection would wait for Hello. */
static double probe_connect(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return 1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return verdict(-1, errno);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        return verdict(-1, e);
    }
    double v = 1;
    for (int waited = 0; waited < 2000; waited += 100) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[256];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            v = -(double)ECONNRESET;
            break;
        }
    }
    close(fd);
    return v;
}

static int probe_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                             mxop_shape_t *out)
{
    out[0].ndim = 1;
    out[0].dims[0] = N_PROBES;
    return 0;
}

static int probe_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    out[0] = MXOP_F64;
    return 0;
}

static int probe_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    int64_t dpid;
    int rc = host->attr_int(ctx, "daemon_pid", 0, &dpid);
    if (rc != 0)
        return rc;
    if (dpid <= 1)
        return host->set_error(ctx, MXOP_EATTR, "sandbox_probe: attribute daemon_pid is needed");
    const char *sock = host->attr_get(ctx, "socket");
    const char *dir = host->attr_get(ctx, "dir");
    if (dir == NULL)
        dir = "/tmp";
    double *r = out[0].data;
    int i = 0;
    char path[512];
    long x;

    x = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
    r[i++] = verdict(x, errno);
    /*
     * SEIZE, unlike ATTACH, does not stop the daemon if it is allowed.  A
     * sanitizer build's filter lets ptrace through (LeakSanitizer traces its
     * own threads); in a pid namespace of its own the daemon then has no pid
     * at all: ESRCH, refused as for kill_daemon.
     */
    x = ptrace(PTRACE_SEIZE, (pid_t)dpid, NULL, NULL);
    r[i++] = verdict(x, x < 0 && errno == ESRCH ? ENOENT : errno);
    {
        long word = 0;
        struct iovec local = {&word, sizeof(word)};
        struct iovec remote = {&word, sizeof(word)};
        x = process_vm_readv((pid_t)dpid, &local, 1, &remote, 1, 0);
        r[i++] = verdict(x, errno);
    }
    snprintf(path, sizeof(path), "/proc/%lld/mem", (long long)dpid);
    r[i++] = try_fd(open(path, O_RDONLY | O_CLOEXEC));
    x = kill((pid_t)dpid, 0);
    /* In a pid namespace of its own (strict as root) the daemon has no pid at all: ESRCH. */
    r[i++] = verdict(x, x < 0 && errno == ESRCH ? ENOENT : errno);
    {
        char mnt[512];
        snprintf(mnt, sizeof(mnt), "%s/probe-mnt-XXXXXX", dir);
        if (mkdtemp(mnt) != NULL) {
            x = mount("mxop-probe", mnt, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k");
            r[i++] = verdict(x, errno);
            if (x == 0)
                umount2(mnt, MNT_DETACH);
            rmdir(mnt);
        } else {
            /* No directory may be made (strict's Landlock view): the filter still answers first. */
            x = mount("mxop-probe", "/mxop-probe-nonexistent", "tmpfs", MS_NOSUID, "size=64k");
            r[i++] = verdict(x, errno);
        }
    }
    x = umount2("/mxop-probe-nonexistent", 0);
    r[i++] = verdict(x, errno);
    x = syscall(SYS_pivot_root, "/mxop-probe-none-a", "/mxop-probe-none-b");
    r[i++] = verdict(x, errno);
    x = chroot("/");
    r[i++] = verdict(x, errno);
    x = syscall(SYS_init_module, NULL, 0, "");
    r[i++] = verdict(x, errno);
    x = syscall(SYS_finit_module, -1, "", 0);
    r[i++] = verdict(x, errno);
    x = syscall(SYS_delete_module, "mxop_probe_none", O_NONBLOCK);
    r[i++] = verdict(x, errno);
    x = syscall(SYS_kexec_load, 0, 0, NULL, 0);
    r[i++] = verdict(x, errno);
    x = syscall(SYS_bpf, 0, NULL, 0);
    r[i++] = verdict(x, errno);
    x = syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0);
    r[i++] = verdict(x, errno);
    r[i++] = probe_exec();
    r[i++] = probe_fork();
    r[i++] = try_fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    r[i++] = try_fd(socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    r[i++] = try_fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
    r[i++] = try_fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0));
    r[i++] = probe_connect(sock);
    {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/probe-%d.sock", dir, (int)getpid());
        x = fd >= 0 ? bind(fd, (struct sockaddr *)&sa, sizeof(sa)) : -1;
        r[i++] = verdict(x, errno);
        if (x == 0)
            unlink(sa.sun_path);
        if (fd >= 0)
            close(fd);
    }
    snprintf(path, sizeof(path), "%s/probe-%d.null", dir, (int)getpid());
    x = mknod(path, S_IFCHR | 0600, makedev(1, 3));
    r[i++] = verdict(x, errno);
    if (x == 0)
        unlink(path);
    x = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
    r[i++] = verdict(x, errno);
    x = unshare(CLONE_NEWUSER);
    r[i++] = verdict(x, errno);
    x = setns(-1, 0);
    r[i++] = verdict(x, errno);
    {
        int old = personality(0xffffffff);
        x = personality(PER_LINUX | ADDR_NO_RANDOMIZE);
        r[i++] = verdict(x, errno);
        if (x != -1)
            personality((unsigned long)old);
    }
    {
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        r[i++] = try_fd((int)syscall(SYS_io_uring_setup, 1, &p));
    }
    /* No magic numbers: if it gets past the permission check, it fails with EINVAL. */
    x = syscall(SYS_reboot, 0, 0, 0, NULL);
    r[i++] = verdict(x, errno);
    x = syscall(SYS_swapon, "/mxop-probe-nonexistent", 0);
    r[i++] = verdict(x, errno);
    /* Last: if allowed, the worker is another user from here on. */
    x = setuid(getuid() == 0 ? 65534 : 0);
    r[i++] = verdict(x, errno);

    char allowed[1024];
    size_t at = 0;
    allowed[0] = '\0';
    for (int k = 0; k < N_PROBES && at + 1 < sizeof(allowed); k++)
        if (r[k] > 0)
            at += (size_t)snprintf(allowed + at, sizeof(allowed) - at, "%s%s", at ? ", " : "",
                                   names[k]);
    if (allowed[0] != '\0')
        return host->set_error(ctx, MXOP_EOP_FAILED, "sandbox_probe: not refused: %s", allowed);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "sandbox_probe",
        .description = "tries every operation a strict sandbox refuses (tests/plugins/probe.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .infer_shape = probe_infer_shape,
        .infer_type = probe_infer_type,
        .forward = probe_forward,
    };
    return host->register_op(ctx, &def);
}
