/*
 * server/worker/landlock.c - the worker's Landlock domain: which files it
 * may touch, and (ABI 4, 6) which sockets and signals reach out of it.
 *
 * basic keeps the domain it always had: ptrace confined to the worker's own
 * tree (Landlock does that for any domain), no device nodes created, and
 * (ABI 6) no signals to processes outside the domain.
 *
 * strict adds a filesystem view, the same whether the worker runs as root
 * or not (Landlock checks come on top of the uid's permissions, and root's
 * capabilities do not bypass them):
 *
 *   - read only: the system's library directories (/usr, /lib*, /opt),
 *     the few files of /etc the dynamic loader and libc read (ld.so.cache,
 *     nsswitch.conf, passwd, group, localtime; never shadow), /proc and
 *     /sys (libraries size their thread pools from them; other processes'
 *     /proc/<pid>/mem and fd stay out of reach through ptrace scoping),
 *     /dev/random and /dev/urandom; not the plugin directory nor the
 *     allowlist: the daemon opens each library and sends its descriptor,
 *     which the worker copies into a sealed memfd and loads from there
 *     (integrity.c); the daemon reads the allowlist and sends the digest;
 *   - read and write: /dev/null, /dev/zero; and in the GPU profile (where
 *     /dev/nvidiactl exists) the driver's /dev/nvidia* nodes, ioctls
 *     included;
 *   - nothing else: no file is created, written, truncated, renamed,
 *     linked or removed anywhere, the plugin directory and the control
 *     socket's directory included, and no file is executed.
 *
 * An op that needs scratch files has memfd_create(), which needs no path,
 * and, where the worker has its minimal root (namespaces.c), its private
 * /tmp, which this domain lets it write.
 * A path that does not exist on this system is skipped; a kernel without
 * Landlock leaves strict without its filesystem view, which the daemon is
 * told of (mxop__landlock_abi() is 0) and documented in docs/security.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/worker/fsview.h"
#include "server/worker/namespaces.h"
#include "server/worker/sandbox.h"

/* Constants newer than some system headers. */
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#define LL_REFER (1ULL << 13)
#define LL_TRUNCATE (1ULL << 14)
#define LL_IOCTL_DEV (1ULL << 15)

/* The ruleset attribute as of ABI 6; older kernels are given its prefix. */
struct ll_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct ll_path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

#define RULE_PATH_BENEATH 1

/* Rights that make sense on a file that is not a directory. */
#define FILE_RIGHTS                                                                                \
    (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |   \
     LL_TRUNCATE | LL_IOCTL_DEV)

#define READ_ONLY (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define READ_WRITE (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE)

static long abi_seen = -1;

long mxop__landlock_abi(void)
{
    if (abi_seen < 0) {
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        abi_seen = abi < 0 ? 0 : abi;
    }
    return abi_seen;
}

/* Every filesystem right this ABI knows. */
static uint64_t all_fs_rights(long abi)
{
    uint64_t r = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
    if (abi >= 2)
        r |= LL_REFER;
    if (abi >= 3)
        r |= LL_TRUNCATE;
    if (abi >= 5)
        r |= LL_IOCTL_DEV;
    return r;
}

/*
 * Allows `rights` beneath `path` (or on it, for a file).  A path that is not
 * there is no error: systems differ in what they have.
 */
static int allow(int ruleset, const char *path, uint64_t rights, uint64_t handled, char *err,
                 size_t errlen)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    int is_dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    struct ll_path_beneath pb = {.allowed_access = rights & handled, .parent_fd = fd};
    if (!is_dir)
        pb.allowed_access &= FILE_RIGHTS;
    long rc = syscall(SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &pb, 0);
    int e = errno;
    close(fd);
    if (rc != 0) {
        mxop__fmt(err, errlen, "landlock_add_rule(%s): %s", path, strerror(e));
        return MXOP_EINTERNAL;
    }
    return 0;
}

struct gpu_rule {
    int ruleset;
    uint64_t handled;
    char *err;
    size_t errlen;
};

static int allow_gpu_node(const char *path, void *arg)
{
    struct gpu_rule *g = arg;
    return allow(g->ruleset, path, READ_WRITE | LL_IOCTL_DEV | LANDLOCK_ACCESS_FS_READ_DIR,
                 g->handled, g->err, g->errlen);
}

/* The GPU profile: the CUDA driver's nodes, opened read-write with ioctls. */
static int allow_gpu_nodes(int ruleset, uint64_t handled, char *err, size_t errlen)
{
    if (access("/dev/nvidiactl", F_OK) != 0)
        return 0;
    struct gpu_rule g = {ruleset, handled, err, errlen};
    return mxop__fs_each_gpu_node(allow_gpu_node, &g);
}

int mxop__landlock_apply(int strict, const char *plugin_dir, const char *allowlist, char *err,
                         size_t errlen)
{
    long abi = mxop__landlock_abi();
    if (abi < 1)
        return 0;
    struct ll_attr attr;
    memset(&attr, 0, sizeof(attr));
    size_t size = sizeof(attr.handled_access_fs);
    /* basic: a domain at all (for ptrace), device nodes, signals; programs and TCP stay. */
    attr.handled_access_fs = LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK;
    if (strict)
        attr.handled_access_fs = all_fs_rights(abi);
    if (abi >= 4) {
        if (strict)
            attr.handled_access_net =
                LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
        size = offsetof(struct ll_attr, scoped);
    }
    if (abi >= 6) {
        attr.scoped = LANDLOCK_SCOPE_SIGNAL;
        if (strict)
            attr.scoped |= LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
        size = sizeof(attr);
    }
    int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (fd < 0) {
        mxop__fmt(err, errlen, "landlock_create_ruleset (ABI %ld): %s", abi, strerror(errno));
        return MXOP_EINTERNAL;
    }
    int rc = 0;
    if (strict) {
        uint64_t h = attr.handled_access_fs;
        for (size_t i = 0; rc == 0 && i < mxop__fs_view_len; i++) {
            const mxop__fs_path_t *p = &mxop__fs_view[i];
            if (p->how & MXOP__FS_LANDLOCK)
                rc = allow(fd, p->path, (p->how & MXOP__FS_WRITE) ? READ_WRITE : READ_ONLY, h, err,
                           errlen);
        }
        /*
         * Neither the plugin directory nor the allowlist is readable: the
         * worker loads only descriptors the daemon sent (integrity.c).
         */
        (void)plugin_dir;
        (void)allowlist;
        if (rc == 0)
            rc = allow_gpu_nodes(fd, h, err, errlen);
        /* In the minimal root /dev holds only the nodes bound there: it may be listed. */
        if (rc == 0 && mxop__ns_private_tmp())
            rc = allow(fd, "/dev", LANDLOCK_ACCESS_FS_READ_DIR, h, err, errlen);
        /* The worker's private /tmp (namespaces.c): files and directories, no device, socket
         * or fifo, nothing executed. */
        if (rc == 0 && mxop__ns_private_tmp())
            rc = allow(fd, "/tmp",
                       READ_WRITE | LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                           LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |
                           LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SYM | LL_REFER |
                           LL_TRUNCATE,
                       h, err, errlen);
    }
    if (rc == 0 && syscall(SYS_landlock_restrict_self, fd, 0) != 0) {
        mxop__fmt(err, errlen, "landlock_restrict_self: %s", strerror(errno));
        rc = MXOP_EINTERNAL;
    }
    close(fd);
    return rc;
}
