/*
 * server/worker/namespaces.c - the worker's own mount, ipc, network and uts
 * namespaces (and a user namespace when it does not start as root), and the
 * minimal root filesystem it then lives in.
 *
 * Landlock (landlock.c) refuses access to paths; a mount namespace makes
 * the rest of the system absent instead, so that a kernel without Landlock,
 * a Landlock ABI that does not cover an operation, or a mistake in the rule
 * list does not reopen the host's files.  The two layers are applied one on
 * top of the other: this file first (it needs mount(2), which the seccomp
 * filter later refuses), Landlock last.
 *
 * The new root is a tmpfs, read-only once built, holding:
 *
 *   - read only, bound from the host where they exist: /usr, /lib, /lib32,
 *     /lib64, /libx32 (a symbolic link, as on a merged-/usr system, is
 *     copied as a link), and of /etc only what the dynamic loader and libc
 *     read: ld.so.cache, ld.so.conf(.d), ld.so.preload, nsswitch.conf,
 *     passwd, group, localtime and alternatives (Debian's library
 *     symlinks, libblas among them, point into it); never shadow, hosts or
 *     anything else;
 *   - /sys/devices/system/cpu and /sys/devices/system/node read only (libc
 *     and thread pools size themselves from them);
 *   - /dev/null, /dev/zero, /dev/random and /dev/urandom (device nodes
 *     bound from the host; nothing else of /dev);
 *   - a fresh /proc mounted with hidepid=invisible where the worker is root
 *     in the host's user namespace: that of the worker's own pid namespace
 *     when the daemon started it in one (server/daemon/worker/spawn.c; the worker
 *     is pid 1 and mounts it), so it lists the worker's tree alone, and
 *     hidepid still hides what the worker may not ptrace there (a process
 *     entered from outside): another process's directory is listed
 *     only if the worker may ptrace it, which Landlock's scoping limits to
 *     the worker's own tree (a user namespace cannot mount a /proc for the
 *     host's pid namespace; there the host's /proc is bound read-only, and
 *     Landlock's ptrace scoping alone guards other processes' fd, mem and
 *     environ);
 *   - /tmp: a private tmpfs of TMP_MB MiB owned by the worker's uid, mode
 *     0700 (TMPDIR points at it); each worker has its own, gone with it;
 *   - no plugin directory and no allowlist: the daemon opens each library
 *     and sends the descriptor with the load (server/daemon/session/libfd.c), and
 *     checks the allowlist itself, so the worker opens neither by path;
 *   - the gpu profile adds the driver's nodes (/dev/nvidia*, the
 *     /dev/nvidia-caps directory), /proc/driver/nvidia comes with /proc,
 *     all of /sys read only, and the CUDA toolkit directory the worker was
 *     built against when it lies outside /usr.
 *
 * Nothing else: no /home, /root, /var, /run, no socket directory (the
 * daemon's control socket cannot be reached, so a process an op started
 * cannot become a client through it), no other /tmp.  The old root is
 * unmounted after pivot_root(2).
 *
 * The network namespace has a loopback device only, and that one down.
 */
#include "server/worker/namespaces.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/worker/fsview.h"

/* The private /tmp's size: scratch files, not data (ops get memory from regions). */
#define TMP_MB 64

/* basic's private /dev/shm (basic_namespaces), the same size as strict's /tmp. */
#define SHM_MB TMP_MB

/* Where the new root is built before pivot_root: a directory every system has. */
#define STAGE "/tmp"

/*
 * The group /proc's hidepid exempts (it sees every process): by default 0,
 * which a worker running as root is in; one no worker is in instead.
 */
#define PROC_GID "4294967294"

#ifndef MXOP_CUDA_HOME
#define MXOP_CUDA_HOME ""
#endif

/* Whether this worker lives in the minimal root, with a private /tmp. */
static int private_tmp;

int mxop__ns_private_tmp(void)
{
    return private_tmp;
}

int mxop__ns_profile_parse(const char *name, int *out)
{
    if (strcmp(name, "none") == 0)
        *out = MXOP__NS_NONE;
    else if (strcmp(name, "cpu") == 0)
        *out = MXOP__NS_CPU;
    else if (strcmp(name, "gpu") == 0)
        *out = MXOP__NS_GPU;
    else
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Helpers */

static int fail(char *err, size_t errlen, const char *what, const char *path)
{
    int e = errno;
    mxop__fmt(err, errlen, "minimal root: %s %s: %s", what, path, strerror(e));
    return MXOP_EDENIED;
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int e = errno;
    close(fd);
    errno = e;
    return w == (ssize_t)n ? 0 : -1;
}

/* mkdir -p of `path` (absolute), the directories made 0755. */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, strlen(path) + 1);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/*
 * The flags a remount must keep: in a user namespace the kernel refuses a
 * remount that drops a flag the original mount had (nosuid, noexec,
 * nodev, the atime ones).
 */
static unsigned long kept_flags(const char *path)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(path, &sv) != 0)
        return 0;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *p)
{
    char *out = p;
    for (; *p != '\0'; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *out++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *out++ = *p;
        }
    }
    *out = '\0';
}

/*
 * A recursive bind copies the mounts below the source with their own flags
 * (a separate /usr/local may be writable): make each of them read-only too.
 */
static int submounts_read_only(const char *at, int dev, char *err, size_t errlen)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return fail(err, errlen, "cannot read", "/proc/self/mountinfo");
    size_t n = strlen(at);
    char line[4096];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        /* id parent major:minor root mount-point options ... */
        char *save = NULL;
        char *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok != NULL && i < 4; i++)
            tok = strtok_r(NULL, " ", &save);
        if (tok == NULL)
            continue;
        unescape(tok);
        if (strncmp(tok, at, n) != 0 || tok[n] != '/')
            continue;
        unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept_flags(tok);
        if (!dev)
            flags |= MS_NODEV;
        if (mount(NULL, tok, NULL, flags, NULL) != 0)
            rc = fail(err, errlen, "cannot make read-only", tok);
    }
    fclose(f);
    return rc;
}

/*
 * Binds host path `src` (or /proc/self/fd/N) read-only at STAGE`dst`: a
 * directory onto a directory, anything else onto an empty file.  `dev`
 * keeps device nodes usable.  A source that does not exist is skipped
 * unless `required`.
 */
static int bind_ro(const char *src, const char *dst, int dev, int required, char *err,
                   size_t errlen)
{
    struct stat st;
    if (stat(src, &st) != 0) {
        if (!required && (errno == ENOENT || errno == ENOTDIR))
            return 0;
        return fail(err, errlen, "cannot see", src);
    }
    char at[PATH_MAX];
    if (strlen(dst) + sizeof(STAGE) > sizeof(at)) {
        errno = ENAMETOOLONG;
        return fail(err, errlen, "path too long:", dst);
    }
    mxop__fmt(at, sizeof(at), STAGE "%s", dst);
    if (S_ISDIR(st.st_mode)) {
        if (make_dirs(at) != 0)
            return fail(err, errlen, "cannot make the mount point", at);
    } else {
        char parent[PATH_MAX];
        mxop__fmt(parent, sizeof(parent), "%s", at);
        char *slash = strrchr(parent, '/');
        if (slash != NULL && slash != parent)
            *slash = '\0';
        if (make_dirs(parent) != 0)
            return fail(err, errlen, "cannot make the directory", parent);
        int fd = open(at, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
        if (fd < 0)
            return fail(err, errlen, "cannot make the mount point", at);
        close(fd);
    }
    if (mount(src, at, NULL, MS_BIND | MS_REC, NULL) != 0)
        return fail(err, errlen, "cannot bind", src);
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept_flags(at);
    if (!dev)
        flags |= MS_NODEV;
    if (mount(NULL, at, NULL, flags, NULL) != 0)
        return fail(err, errlen, "cannot make read-only", at);
    return submounts_read_only(at, dev, err, errlen);
}

/* Copies a symbolic link of the host (e.g. /lib -> usr/lib) into the new root. */
static int copy_link(const char *path, char *err, size_t errlen)
{
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return fail(err, errlen, "cannot read the link", path);
    target[n] = '\0';
    char at[PATH_MAX];
    mxop__fmt(at, sizeof(at), STAGE "%s", path);
    if (symlink(target, at) != 0 && errno != EEXIST)
        return fail(err, errlen, "cannot copy the link", path);
    return 0;
}

/* A system path: a link is copied as a link (its target is bound on its own), else bound. */
static int system_path(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (S_ISLNK(st.st_mode) && strncmp(path, "/etc/", 5) != 0 && strchr(path + 1, '/') == NULL)
        return copy_link(path, err, errlen);
    return bind_ro(path, path, 0, 0, err, errlen);
}

struct gpu_err {
    char *err;
    size_t errlen;
};

/* A driver node of the gpu profile, bound writable: the CUDA libraries open it read-write. */
static int bind_gpu_node(const char *path, void *arg)
{
    struct gpu_err *e = arg;
    int rc = bind_ro(path, path, 1, 0, e->err, e->errlen);
    if (rc == 0) {
        char at[PATH_MAX];
        mxop__fmt(at, sizeof(at), STAGE "%s", path);
        if (mount(NULL, at, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | kept_flags(at), NULL) != 0)
            rc = fail(e->err, e->errlen, "cannot make writable", at);
    }
    return rc;
}

/* The gpu profile: the driver's nodes and what the CUDA libraries read. */
static int bind_gpu(char *err, size_t errlen)
{
    struct gpu_err e = {err, errlen};
    int rc = mxop__fs_each_gpu_node(bind_gpu_node, &e);
    if (rc == 0 && MXOP_CUDA_HOME[0] == '/' && strncmp(MXOP_CUDA_HOME, "/usr/", 5) != 0)
        rc = bind_ro(MXOP_CUDA_HOME, MXOP_CUDA_HOME, 0, 0, err, errlen);
    return rc;
}

/* ------------------------------------------------------------------------ */

static int enter_user_ns(long uid, long gid, char *err, size_t errlen)
{
    char map[64];
    if (write_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT)
        return fail(err, errlen, "cannot write", "/proc/self/setgroups");
    mxop__fmt(map, sizeof(map), "%ld %ld 1", uid, uid);
    if (write_file("/proc/self/uid_map", map) != 0)
        return fail(err, errlen, "cannot write", "/proc/self/uid_map");
    mxop__fmt(map, sizeof(map), "%ld %ld 1", gid, gid);
    if (write_file("/proc/self/gid_map", map) != 0)
        return fail(err, errlen, "cannot write", "/proc/self/gid_map");
    return 0;
}

static int build_root(int profile, int in_userns, long uid, long gid, char *err, size_t errlen)
{
    int rc = 0;
    char opts[96];
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        rc = fail(err, errlen, "cannot make private", "/");
        goto out;
    }
    if (mount("mxop-root", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") != 0) {
        rc = fail(err, errlen, "cannot mount a tmpfs on", STAGE);
        goto out;
    }
    /*
     * The gpu profile's whole /sys first: binding it over the cpu profile's parts of /sys
     * would hide those mounts, and hidden mounts cannot be remounted read-only.
     */
    if (profile == MXOP__NS_GPU)
        rc = bind_ro("/sys", "/sys", 0, 0, err, errlen);
    for (size_t i = 0; rc == 0 && i < mxop__fs_view_len; i++) {
        const mxop__fs_path_t *p = &mxop__fs_view[i];
        if (!(p->how & MXOP__FS_BIND))
            continue;
        rc = (p->how & MXOP__FS_DEVICE) ? bind_ro(p->path, p->path, 1, 0, err, errlen)
                                        : system_path(p->path, err, errlen);
    }
    if (rc == 0 && profile == MXOP__NS_GPU)
        rc = bind_gpu(err, errlen);
    /* The private /tmp: the only place the worker may write files. */
    if (rc == 0) {
        if (make_dirs(STAGE "/tmp") != 0)
            rc = fail(err, errlen, "cannot make", STAGE "/tmp");
        mxop__fmt(opts, sizeof(opts), "size=%dm,mode=0700,uid=%ld,gid=%ld", TMP_MB, uid, gid);
        if (rc == 0 &&
            mount("mxop-tmp", STAGE "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0)
            rc = fail(err, errlen, "cannot mount the private tmpfs on", "/tmp");
    }
    /* /proc: a fresh one that lists only what the worker may trace, where the kernel lets us. */
    if (rc == 0) {
        if (make_dirs(STAGE "/proc") != 0)
            rc = fail(err, errlen, "cannot make", STAGE "/proc");
        else if (in_userns)
            rc = bind_ro("/proc", "/proc", 0, 1, err, errlen);
        else if (mount("proc", STAGE "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       "hidepid=invisible,gid=" PROC_GID) != 0 &&
                 mount("proc", STAGE "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       "hidepid=2,gid=" PROC_GID) != 0)
            rc = fail(err, errlen, "cannot mount", "/proc");
    }
    if (rc != 0)
        goto out;

    /* Into it; the old root detached, the new one read-only. */
    if (chdir(STAGE) != 0 || syscall(SYS_pivot_root, ".", ".") != 0) {
        rc = fail(err, errlen, "cannot pivot_root into", STAGE);
        goto out;
    }
    if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
        rc = fail(err, errlen, "cannot detach", "the old root");
        goto out;
    }
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) !=
        0) {
        rc = fail(err, errlen, "cannot make read-only", "/");
        goto out;
    }
    setenv("TMPDIR", "/tmp", 1);
    private_tmp = 1;
out:
    return rc;
}

/*
 * basic keeps the host's files on purpose: a library at basic opens what
 * its uid may open, wherever it is, /tmp and /var/tmp included (paths an
 * op is given, caches, sockets of local services).  What it writes into
 * /dev/shm, though, is memory charged to no one once the worker is gone,
 * so a session could fill it one worker at a time.  As root, a basic
 * worker gets a mount namespace of its own, a slave of the host's (the
 * host's later mounts still appear), with a private tmpfs of SHM_MB MiB on
 * /dev/shm, owned by the worker's uid and gone with it; the pages count
 * against the worker's cgroup like any of its memory.  The daemon's probe
 * (server/daemon/core/layers.c) says in its start-up line whether workers get
 * it; not root, or where the kernel refuses the namespace, they do not.
 */
static void basic_namespaces(long run_uid, long run_gid)
{
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
        (void)unshare(CLONE_NEWIPC | CLONE_NEWUTS);
        return;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0)
        return;
    struct stat st;
    if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    char opts[96];
    mxop__fmt(opts, sizeof(opts), "size=%dm,mode=0700,uid=%ld,gid=%ld", SHM_MB,
              run_uid >= 0 ? run_uid : (long)geteuid(), run_gid >= 0 ? run_gid : (long)getegid());
    (void)mount("mxop-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts);
}

int mxop__ns_apply(int profile, int basic, long run_uid, long run_gid, char *err, size_t errlen)
{
    int root = geteuid() == 0;
    if (profile == MXOP__NS_NONE) {
        /* basic as root: the cheap namespaces and a private /dev/shm, best effort. */
        if (basic && root)
            basic_namespaces(run_uid, run_gid);
        return 0;
    }
    /* Read before a user namespace is entered: until its maps are written, ids read 65534. */
    long euid = (long)geteuid(), egid = (long)getegid();
    long uid = run_uid >= 0 ? run_uid : euid;
    long gid = run_gid >= 0 ? run_gid : egid;
    int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS;
    if (!root)
        flags |= CLONE_NEWUSER;
    if (unshare(flags) != 0) {
        mxop__fmt(err, errlen, "cannot unshare the %s, ipc, network and uts namespaces: %s",
                  root ? "mount" : "user, mount", strerror(errno));
        return MXOP_EDENIED;
    }
    if (!root) {
        int rc = enter_user_ns(euid, egid, err, errlen);
        if (rc != 0)
            return rc;
    }
    int rc = build_root(profile, !root, uid, gid, err, errlen);
    if (rc != 0)
        return rc;
    /* A change of credentials (the user namespace) clears the parent-death signal: again. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        mxop__fmt(err, errlen, "prctl(PR_SET_PDEATHSIG) after the namespaces: %s", strerror(errno));
        return MXOP_EINTERNAL;
    }
    if (getppid() == 1)
        _exit(0);
    return 0;
}
