/*
 * server/worker/sandbox.c - resource limits, capabilities, Landlock and the
 * seccomp filter of a worker (see sandbox.h for the levels).
 *
 * The order matters: the user and the network namespace change first
 * (they need root), then the limits (raising them back would need
 * CAP_SYS_RESOURCE, which goes next), then the capabilities, then
 * Landlock and last the seccomp filter, which refuses the very calls that
 * the earlier steps make (setresuid, unshare, capset, prctl is kept).
 */
#include "server/worker/sandbox.h"

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/worker/namespaces.h"
#include "server/worker/neighbours.h"

/* The worker's channels (main.c): supervisor and data.  Fd 5 is closed before we run. */
#define SUP_FD 3
#define DATA_FD 4

/*
 * LeakSanitizer stops the world at exit with a tracer task (clone with
 * CLONE_VM, not CLONE_THREAD) that ptrace-attaches to every thread.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_LEAK__)
#define SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define SANITIZER_BUILD 1
#endif
#endif
#ifndef SANITIZER_BUILD
#define SANITIZER_BUILD 0
#endif

/* RLIMIT_FSIZE at basic and strict, in MiB (set_limits). */
#define FSIZE_MB 1024

static int level = MXOP__SANDBOX_STRICT;
static uint64_t memory_mb;
static uint64_t address_space_mb; /* --address-space-mb: 0, or the RLIMIT_AS budget */
static uint64_t max_fds = 1024;
static long run_uid = -1;
static long run_gid = -1;
static uint64_t data_limit;
static const char *plugin_dir;         /* borrowed from argv */
static const char *allowlist;          /* borrowed from argv; "" or NULL: none */
static int ns_profile = MXOP__NS_NONE; /* --ns-profile (namespaces.h) */
static int own_uid;                    /* --own-uid 1: no other worker runs as --uid */

const char *mxop__sandbox_plugin_dir(void)
{
    return plugin_dir;
}

const char *mxop__sandbox_allowlist(void)
{
    return allowlist;
}

uint64_t mxop__sandbox_memory_limit(void)
{
    return data_limit;
}

uint64_t mxop__sandbox_memory_mb(void)
{
    return memory_mb;
}

/* ------------------------------------------------------------------------ */
/* Options */

static int parse_num(const char *s, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

int mxop__sandbox_arg(int argc, char **argv, int *i, char *err, size_t errlen)
{
    static const char *const opts[] = {"--sandbox", "--memory-mb", "--max-fds", "--uid", "--gid",
                                       "--plugin-dir", "--allowlist",
                                       /* Namespaces (namespaces.c). */
                                       "--ns-profile",
                                       /* RLIMIT_AS where the worker has no cgroup. */
                                       "--address-space-mb",
                                       /* --uid is this worker's alone (neighbours.c). */
                                       "--own-uid"};
    const char *opt = argv[*i];
    int which = -1;
    for (int k = 0; k < (int)(sizeof(opts) / sizeof(opts[0])); k++)
        if (strcmp(opt, opts[k]) == 0)
            which = k;
    if (which < 0)
        return 1;
    if (*i + 1 >= argc) {
        mxop__fmt(err, errlen, "option %s needs a value", opt);
        return MXOP_EINVAL;
    }
    const char *val = argv[++*i];
    uint64_t v;
    switch (which) {
    case 0:
        if (strcmp(val, "none") == 0)
            level = MXOP__SANDBOX_NONE;
        else if (strcmp(val, "basic") == 0)
            level = MXOP__SANDBOX_BASIC;
        else if (strcmp(val, "strict") == 0)
            level = MXOP__SANDBOX_STRICT;
        else
            goto bad;
        return 0;
    case 1:
        /* The bound keeps the limit in bytes far inside a uint64_t. */
        if (parse_num(val, 1ull << 30, &v) != 0)
            goto bad;
        memory_mb = v;
        return 0;
    case 2:
        if (parse_num(val, 1ull << 30, &v) != 0 || v < 16)
            goto bad;
        max_fds = v;
        return 0;
    case 3:
        if (parse_num(val, 0xfffffffeull, &v) != 0)
            goto bad;
        run_uid = (long)v;
        return 0;
    case 5:
        if (val[0] != '/')
            goto bad;
        plugin_dir = val;
        return 0;
    case 6:
        if (val[0] != '/' && val[0] != '\0')
            goto bad;
        allowlist = val;
        return 0;
    case 7:
        if (mxop__ns_profile_parse(val, &ns_profile) != 0)
            goto bad;
        return 0;
    case 8:
        if (parse_num(val, 1ull << 30, &v) != 0)
            goto bad;
        address_space_mb = v;
        return 0;
    case 9:
        if (parse_num(val, 1, &v) != 0)
            goto bad;
        own_uid = (int)v;
        return 0;
    default:
        if (parse_num(val, 0xfffffffeull, &v) != 0)
            goto bad;
        run_gid = (long)v;
        return 0;
    }
bad:
    mxop__fmt(err, errlen, "bad value '%s' for %s", val, opt);
    return MXOP_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* User, network namespace */

static int change_user(int have_netns, char *err, size_t errlen)
{
    if (run_uid < 0 && run_gid < 0)
        return 0;
    if (run_uid < 0 || run_gid < 0) {
        mxop__fmt(err, errlen, "--uid and --gid go together");
        return MXOP_EINVAL;
    }
    if (geteuid() != 0) {
        mxop__fmt(err, errlen, "--uid %ld needs the worker to start as root (it runs as uid %u)",
                  run_uid, (unsigned)geteuid());
        return MXOP_EDENIED;
    }
    /* A namespace of its own: only a loopback device, and that one down (namespaces.c may have
     * given it already). */
    if (!have_netns && unshare(CLONE_NEWNET) != 0) {
        mxop__fmt(err, errlen, "cannot give the worker its own network namespace: %s",
                  strerror(errno));
        return MXOP_EDENIED;
    }
    if (setgroups(0, NULL) != 0 || setresgid((gid_t)run_gid, (gid_t)run_gid, (gid_t)run_gid) != 0 ||
        setresuid((uid_t)run_uid, (uid_t)run_uid, (uid_t)run_uid) != 0) {
        mxop__fmt(err, errlen, "cannot switch to uid %ld gid %ld: %s", run_uid, run_gid,
                  strerror(errno));
        return MXOP_EDENIED;
    }
    /* A change of credentials clears the parent-death signal: set it again. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        mxop__fmt(err, errlen, "prctl(PR_SET_PDEATHSIG) after the user change: %s",
                  strerror(errno));
        return MXOP_EINTERNAL;
    }
    if (getppid() == 1)
        _exit(0); /* the daemon died meanwhile: no one to serve */
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Limits */

/* A "Vm...:" line of /proc/self/status in bytes, or 0 if unknown. */
static uint64_t status_bytes(const char *field)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strstr(buf, field);
    if (p == NULL)
        return 0;
    return strtoull(p + strlen(field), NULL, 10) * 1024u;
}

static int set_limit(int res, uint64_t v, const char *name, char *err, size_t errlen)
{
    struct rlimit rl = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
    if (setrlimit(res, &rl) != 0) {
        mxop__fmt(err, errlen, "setrlimit(%s, %llu): %s", name, (unsigned long long)v,
                  strerror(errno));
        return MXOP_EINTERNAL;
    }
    return 0;
}

/*
 * Where the daemon could give the worker no cgroup of its own (not root, no
 * memory controller, --worker-cgroup off), RLIMIT_DATA leaves shared
 * anonymous memory and memfds unlimited.  RLIMIT_AS counts every mapping:
 * the budget is what is mapped now, plus --worker-memory-mb, plus twice the
 * session's region quota (the daemon computes it: cgroup.c).  Its caveats,
 * in docs/security.md: address space is not memory (thread stacks and
 * malloc's arenas reserve more than they touch), so glibc is held to two
 * arenas here; and a library may spend on itself what the regions did not
 * use of their quota.
 */
static int set_address_space_limit(char *err, size_t errlen)
{
    if (address_space_mb == 0)
        return 0;
    uint64_t now = status_bytes("\nVmSize:");
    if (now == 0) {
        mxop__fmt(err, errlen, "cannot read VmSize for RLIMIT_AS");
        return MXOP_EINTERNAL;
    }
    mallopt(M_ARENA_MAX, 2);
    struct rlimit cur;
    uint64_t limit = now + (address_space_mb << 20);
    if (getrlimit(RLIMIT_AS, &cur) == 0 && cur.rlim_max != RLIM_INFINITY &&
        (uint64_t)cur.rlim_max < limit)
        limit = cur.rlim_max;
    return set_limit(RLIMIT_AS, limit, "RLIMIT_AS", err, errlen);
}

static int set_limits(char *err, size_t errlen)
{
    int rc = set_limit(RLIMIT_CORE, 0, "RLIMIT_CORE", err, errlen);
    if (rc != 0)
        return rc;
    /*
     * No file a worker writes grows past FSIZE_MB, wherever it is (the
     * private tmpfs mounts are capped as a whole: namespaces.c).  It must
     * stay above the largest library: integrity.c copies each one into a
     * memfd, which the limit counts too.  Past it write(2) fails with EFBIG
     * instead of the kernel's SIGXFSZ ending the worker.
     */
    signal(SIGXFSZ, SIG_IGN);
    rc = set_limit(RLIMIT_FSIZE, (uint64_t)FSIZE_MB << 20, "RLIMIT_FSIZE", err, errlen);
    if (rc != 0)
        return rc;

    struct rlimit cur;
    uint64_t nofile = max_fds;
    if (getrlimit(RLIMIT_NOFILE, &cur) == 0 && cur.rlim_max != RLIM_INFINITY &&
        (uint64_t)cur.rlim_max < nofile)
        nofile = cur.rlim_max;
    rc = set_limit(RLIMIT_NOFILE, nofile, "RLIMIT_NOFILE", err, errlen);
    if (rc != 0)
        return rc;

    if (memory_mb == 0)
        return 0;
    /*
     * RLIMIT_DATA counts private writable mappings (heap, anonymous mmap,
     * thread stacks) but not the shared mappings of the session's regions,
     * which may be far larger than any sane limit; RLIMIT_AS would count
     * those, and the address space a sanitizer reserves.  The budget is
     * what ops may add to what the worker already uses at this point.
     */
    uint64_t budget = memory_mb << 20;
    uint64_t now = status_bytes("\nVmData:");
    data_limit = now + budget;
    if (getrlimit(RLIMIT_DATA, &cur) == 0 && cur.rlim_max != RLIM_INFINITY &&
        (uint64_t)cur.rlim_max < data_limit)
        data_limit = cur.rlim_max;
    rc = set_limit(RLIMIT_DATA, data_limit, "RLIMIT_DATA", err, errlen);
    if (rc != 0)
        return rc;
    return set_address_space_limit(err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Capabilities */

/* The bounding set (it needs CAP_SETPCAP, which capset and a change of uid remove). */
static int drop_bounding_set(char *err, size_t errlen)
{
    for (int cap = 0; cap < 64; cap++) {
        int r = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (r < 0)
            break; /* past the last capability this kernel knows */
        if (r == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EPERM) {
            mxop__fmt(err, errlen, "cannot drop capability %d: %s", cap, strerror(errno));
            return MXOP_EINTERNAL;
        }
    }
    return 0;
}

static int drop_capabilities(char *err, size_t errlen)
{
    int rc = drop_bounding_set(err, errlen);
    if (rc != 0)
        return rc;
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) != 0) {
        mxop__fmt(err, errlen, "cannot clear the capability sets: %s", strerror(errno));
        return MXOP_EINTERNAL;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* seccomp */

/* Adds one rule; a syscall this architecture does not have is skipped. */
static int rule(scmp_filter_ctx f, uint32_t action, const char *name, unsigned n,
                const struct scmp_arg_cmp *cmp, char *err, size_t errlen)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;
    int rc = seccomp_rule_add_array(f, action, nr, n, cmp);
    if (rc != 0) {
        mxop__fmt(err, errlen, "cannot add the seccomp rule for %s: %s", name, strerror(-rc));
        return MXOP_EINTERNAL;
    }
    return 0;
}

static int deny_all(scmp_filter_ctx f, const char *const *names, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        int rc = rule(f, SCMP_ACT_ERRNO(EPERM), names[i], 0, NULL, err, errlen);
        if (rc != 0)
            return rc;
    }
    return 0;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Kernel administration and other processes: refused from basic on. */
static const char *const basic_denied[] = {
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "reboot",
    "swapon",
    "swapoff",
    "keyctl",
    "add_key",
    "request_key",
    "unshare",
    "setns",
    "acct",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "lookup_dcookie",
    "vhangup",
    "syslog",
    "userfaultfd",
    "uselib",
};

/* strict: no new programs, no uid or capability changes, no io_uring (it bypasses seccomp). */
static const char *const strict_denied[] = {
    "execve",
    "execveat",
    "fork",
    "vfork",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setfsuid",
    "setfsgid",
    "setgroups",
    "capset",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    /*
     * Memory integrity (server/daemon/session/memconfine.c): a region's file that
     * takes no seals is made read-only by its mode; a worker of the same
     * uid owns it and must not be able to give the write bits (or an ACL)
     * back.
     */
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "setxattrat",
};

/*
 * The worker's own channels: an op that closes, replaces or write(2)s into
 * fd 3 or 4 (a stale descriptor number, a library that "cleans up" fds)
 * would silently desynchronise the session; refused, the op sees EPERM and
 * the session goes on.  The worker itself only sendmsg()s on them and
 * never closes them.
 */
static int protect_channels(scmp_filter_ctx f, char *err, size_t errlen)
{
    static const char *const fd0[] = {"close",    "write",   "writev",
                                      "pwrite64", "pwritev", "pwritev2"};
    static const char *const fd1[] = {"dup2", "dup3"};
    const int fds[] = {SUP_FD, DATA_FD};
    int rc;
    for (size_t k = 0; k < COUNT(fds); k++) {
        struct scmp_arg_cmp a0 = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fds[k]);
        struct scmp_arg_cmp a1 = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fds[k]);
        for (size_t i = 0; i < COUNT(fd0); i++)
            if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), fd0[i], 1, &a0, err, errlen)) != 0)
                return rc;
        for (size_t i = 0; i < COUNT(fd1); i++)
            if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), fd1[i], 1, &a1, err, errlen)) != 0)
                return rc;
    }
    /*
     * fcntl commands that change the channels (flags such as O_NONBLOCK or
     * O_ASYNC, close-on-exec, the owner and signal of SIGIO, leases), and
     * shutdown() of either channel.  The worker sets close-on-exec before
     * the filter and never changes them afterwards, and never shuts a
     * channel down itself: when the data channel loses its framing it exits,
     * which ends the channel as surely (datachan.c).
     */
    static const int fcntl_cmds[] = {F_SETFD,     F_SETFL,    F_SETOWN, F_SETSIG,
                                     F_SETOWN_EX, F_SETLEASE, F_NOTIFY, F_SETPIPE_SZ};
    for (size_t k = 0; k < COUNT(fds); k++)
        for (size_t i = 0; i < COUNT(fcntl_cmds); i++) {
            struct scmp_arg_cmp fc[2] = {
                SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fds[k]),
                SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fcntl_cmds[i])};
            if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "fcntl", 2, fc, err, errlen)) != 0)
                return rc;
        }
    for (size_t k = 0; k < COUNT(fds); k++) {
        struct scmp_arg_cmp sd = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fds[k]);
        if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "shutdown", 1, &sd, err, errlen)) != 0)
            return rc;
    }
    /*
     * Sends: the worker's own are sendmsg(fd, msg, MSG_NOSIGNAL), nothing
     * else (wire/fdpass.c, for both data paths); send(2) is sendto, so an op
     * that sends on a stale descriptor number with send, sendto, sendmmsg,
     * sendfile, splice or a sendmsg with other flags is refused.  A library
     * that copies the worker's exact sendmsg still gets through: what it
     * sends reaches only its own session's client or daemon, which take
     * every frame from a worker as hostile input.
     */
    for (size_t k = 0; k < COUNT(fds); k++) {
        struct scmp_arg_cmp a0 = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fds[k]);
        struct scmp_arg_cmp a2 = SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fds[k]);
        struct scmp_arg_cmp msg[2] = {a0, SCMP_A2(SCMP_CMP_NE, (scmp_datum_t)MSG_NOSIGNAL)};
        if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "sendto", 1, &a0, err, errlen)) != 0 ||
            (rc = rule(f, SCMP_ACT_ERRNO(EPERM), "sendmmsg", 1, &a0, err, errlen)) != 0 ||
            (rc = rule(f, SCMP_ACT_ERRNO(EPERM), "sendmsg", 2, msg, err, errlen)) != 0 ||
            (rc = rule(f, SCMP_ACT_ERRNO(EPERM), "sendfile", 1, &a0, err, errlen)) != 0 ||
            (rc = rule(f, SCMP_ACT_ERRNO(EPERM), "splice", 1, &a2, err, errlen)) != 0)
            return rc;
    }
    /* close_range(first, last, flags) covering 3 or 4. */
    struct scmp_arg_cmp cr[2] = {SCMP_A0(SCMP_CMP_LE, DATA_FD), SCMP_A1(SCMP_CMP_GE, SUP_FD)};
    return rule(f, SCMP_ACT_ERRNO(EPERM), "close_range", 2, cr, err, errlen);
}

/*
 * No namespace of a library's own, at basic as at strict: unshare and
 * setns are refused (basic_denied), and so is clone with any CLONE_NEW*
 * flag, which would give a new user namespace every capability inside it
 * (and with it mounts and the rest of the kernel surface namespaces open).
 * clone3 passes its flags in memory, which a filter cannot read: it
 * answers ENOSYS, so that glibc (fork, posix_spawn, pthread_create) falls
 * back to clone, whose flags the rules below see.  The worker's own
 * namespaces were made before the filter (namespaces.c; the daemon's
 * clone3 of a strict worker is the daemon's, spawn.c).
 */
static int no_new_namespaces(scmp_filter_ctx f, char *err, size_t errlen)
{
    static const scmp_datum_t flags[] = {CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                         CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET};
    int rc;
    for (size_t i = 0; i < COUNT(flags); i++) {
        struct scmp_arg_cmp a0 = SCMP_A0(SCMP_CMP_MASKED_EQ, flags[i], flags[i]);
        if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "clone", 1, &a0, err, errlen)) != 0)
            return rc;
    }
    return rule(f, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err, errlen);
}

static int apply_seccomp(char *err, size_t errlen)
{
    int rc = MXOP_EINTERNAL;
    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
    if (f == NULL) {
        mxop__fmt(err, errlen, "seccomp_init failed");
        return MXOP_EINTERNAL;
    }
    /* Every thread, including those libraries started before main (OpenBLAS). */
    if (seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1) != 0) {
        mxop__fmt(err, errlen, "seccomp cannot synchronise the filter across threads");
        goto out;
    }
    if ((rc = deny_all(f, basic_denied, COUNT(basic_denied), err, errlen)) != 0)
        goto out;

    /* ptrace: all of it, except what LeakSanitizer needs in a sanitizer build. */
    if (SANITIZER_BUILD) {
        struct scmp_arg_cmp me = SCMP_A0(SCMP_CMP_EQ, PTRACE_TRACEME);
        rc = rule(f, SCMP_ACT_ERRNO(EPERM), "ptrace", 1, &me, err, errlen);
    } else {
        rc = rule(f, SCMP_ACT_ERRNO(EPERM), "ptrace", 0, NULL, err, errlen);
    }
    if (rc != 0)
        goto out;
    /*
     * The fault handler (fault.c) is the worker's, for its whole life: a
     * library's own SIGSEGV or SIGBUS handler could step over a store into a
     * read-only input and let the op return success.  Queries (no new
     * action) stay allowed.
     */
    static const int fault_signals[] = {SIGSEGV, SIGBUS};
    for (size_t k = 0; k < COUNT(fault_signals); k++) {
        struct scmp_arg_cmp sa[2] = {SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)fault_signals[k]),
                                     SCMP_A1(SCMP_CMP_NE, 0)};
        if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "rt_sigaction", 2, sa, err, errlen)) != 0)
            goto out;
    }
    if ((rc = no_new_namespaces(f, err, errlen)) != 0)
        goto out;
    /* personality: queries (0xffffffff) only. */
    struct scmp_arg_cmp query = SCMP_A0(SCMP_CMP_NE, 0xffffffffu);
    if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "personality", 1, &query, err, errlen)) != 0)
        goto out;

    if (level >= MXOP__SANDBOX_STRICT) {
        /*
         * Only where no program can be started: a filter outlives execve,
         * and a new program's first open() gets fd 3 back and must be able
         * to close it.
         */
        if ((rc = protect_channels(f, err, errlen)) != 0)
            goto out;
        if ((rc = deny_all(f, strict_denied, COUNT(strict_denied), err, errlen)) != 0)
            goto out;
        /* Threads yes, processes no (clone3: no_new_namespaces() above). */
        scmp_datum_t mask = SANITIZER_BUILD ? (CLONE_THREAD | CLONE_VM) : CLONE_THREAD;
        struct scmp_arg_cmp proc = SCMP_A0(SCMP_CMP_MASKED_EQ, mask, 0);
        if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "clone", 1, &proc, err, errlen)) != 0)
            goto out;
        /* Sockets: AF_UNIX only. */
        struct scmp_arg_cmp notunix = SCMP_A0(SCMP_CMP_NE, AF_UNIX);
        if ((rc = rule(f, SCMP_ACT_ERRNO(EPERM), "socket", 1, &notunix, err, errlen)) != 0 ||
            (rc = rule(f, SCMP_ACT_ERRNO(EPERM), "socketpair", 1, &notunix, err, errlen)) != 0)
            goto out;
    }

    rc = seccomp_load(f);
    if (rc != 0) {
        mxop__fmt(err, errlen, "cannot load the seccomp filter: %s", strerror(-rc));
        rc = MXOP_EINTERNAL;
        goto out;
    }
    rc = 0;
out:
    seccomp_release(f);
    return rc;
}

/* ------------------------------------------------------------------------ */

/*
 * The kernel's OOM killer picks the process with the highest badness; a
 * worker says it is the first to go (1000, the most), so that memory
 * exhausted through shared mappings a limit did not count costs a worker
 * and never the daemon.  Raising one's own score needs no privilege.
 */
static int prefer_for_oom(char *err, size_t errlen)
{
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "1000", 4) != 4) {
        mxop__fmt(err, errlen, "cannot set /proc/self/oom_score_adj to 1000: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return MXOP_EINTERNAL;
    }
    close(fd);
    return 0;
}

int mxop__sandbox_apply(char *err, size_t errlen)
{
    int rc = prefer_for_oom(err, errlen);
    if (rc != 0)
        return rc;
    /* Namespaces and the minimal root (namespaces.c) while still privileged: strict only. */
    int profile = level >= MXOP__SANDBOX_STRICT ? ns_profile : MXOP__NS_NONE;
    rc = mxop__ns_apply(profile, level == MXOP__SANDBOX_BASIC, run_uid, run_gid, err, errlen);
    if (rc != 0)
        return rc;
    /* Least privilege: the bounding set goes while CAP_SETPCAP is still there (uid 0). */
    if (level >= MXOP__SANDBOX_STRICT && (rc = drop_bounding_set(err, errlen)) != 0)
        return rc;
    rc = change_user(profile != MXOP__NS_NONE, err, errlen);
    if (rc != 0)
        return rc;
    if (level == MXOP__SANDBOX_NONE)
        return 0;
    if ((rc = set_limits(err, errlen)) != 0)
        return rc;
    if (level >= MXOP__SANDBOX_STRICT && (rc = drop_capabilities(err, errlen)) != 0)
        return rc;
    if ((rc = mxop__landlock_apply(level >= MXOP__SANDBOX_STRICT, plugin_dir, allowlist, err,
                                   errlen)) != 0)
        return rc;
    if ((rc = mxop__neighbours_apply(level >= MXOP__SANDBOX_STRICT, own_uid && run_uid >= 0, err,
                                     errlen)) != 0)
        return rc;
    return apply_seccomp(err, errlen);
}
