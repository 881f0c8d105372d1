/*
 * server/daemon/core/layers.c - what confines a worker here, said at start.
 *
 * The layers a worker gets depend on the kernel and on who runs the
 * daemon: seccomp (required: a worker that cannot load its filter does
 * not start), Landlock (its ABI decides the filesystem view, TCP and the
 * scoping of signals and abstract sockets), a cgroup of its own (root and a
 * memory controller), and another uid (workeruid.c: --worker-uid, or an
 * unprivileged one the daemon chooses when it runs as root).  The daemon asks the
 * kernel the same questions the worker will and logs the answer once, so
 * an operator sees what "strict" means on this machine.  strict promises
 * the filesystem view; on a kernel without Landlock the daemon refuses to
 * start rather than run strict workers that can write the plugin
 * directory, unless --sandbox-fallback on says that is acceptable.
 *
 * Namespaces (server/worker/namespaces.c): strict workers get their own
 * mount, ipc, network and uts namespaces and a minimal root filesystem,
 * and as root (cpu profile) a pid namespace the daemon clones them into
 * (spawn.c).  As root they always can, so strict promises them: a kernel that refuses
 * (a container's seccomp profile, say) stops the daemon unless
 * --sandbox-fallback on.  Not root, they need an unprivileged user
 * namespace, which a kernel may disable: then workers fall back to
 * Landlock's view alone, said in the log (the "where the kernel
 * allows").  The profile (--sandbox-profile auto|cpu|gpu; auto: gpu where
 * /dev/nvidiactl exists) is passed to each worker as --ns-profile.
 */
#include "server/daemon/core/layers.h"

#include <errno.h>
#include <linux/landlock.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/worker/worker.h"
#include "server/daemon/core/daemon.h"

static bool fallback;
/* --sandbox-profile: "auto", "cpu" or "gpu"; what workers get is ns_profile. */
static const char *profile_asked = "auto";
static const char *ns_profile = "none";
/* Workers get a pid namespace of their own (spawn.c); see mxop__layers_pid_ns. */
static bool pid_ns;
/* What was logged at start, for `mxop status`. */
static char described[1280] = "not checked yet";

const char *mxop__layers_describe(void)
{
    return described;
}

const char *mxop__layers_ns_profile(void)
{
    return ns_profile;
}

bool mxop__layers_pid_ns(void)
{
    return pid_ns;
}

int mxop__layers_option(const char *opt, const char *val, char *err, size_t errlen)
{
    if (strcmp(opt, "--sandbox-profile") == 0) {
        if (strcmp(val, "auto") != 0 && strcmp(val, "cpu") != 0 && strcmp(val, "gpu") != 0) {
            mxop__fmt(err, errlen, "--sandbox-profile must be auto, cpu or gpu, not '%s'", val);
            return MXOP_EINVAL;
        }
        profile_asked = strcmp(val, "auto") == 0 ? "auto" : strcmp(val, "cpu") == 0 ? "cpu" : "gpu";
        return 0;
    }
    if (strcmp(opt, "--sandbox-fallback") != 0)
        return 1;
    if (strcmp(val, "on") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "1") == 0)
        fallback = true;
    else if (strcmp(val, "off") == 0 || strcmp(val, "no") == 0 || strcmp(val, "0") == 0)
        fallback = false;
    else {
        mxop__fmt(err, errlen, "--sandbox-fallback must be on or off, not '%s'", val);
        return MXOP_EINVAL;
    }
    return 0;
}

/*
 * Whether a worker will be able to unshare the namespaces namespaces.c
 * asks for: a child tries the same unshare(2) and reports.  Returns 0, or
 * the errno the kernel gave.
 */
static int probe_namespaces(int flags)
{
    pid_t pid = fork();
    if (pid < 0)
        return errno;
    if (pid == 0)
        _exit(unshare(flags) == 0 ? 0 : (errno & 0xff));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return errno;
    if (!WIFEXITED(status))
        return EINVAL;
    return WEXITSTATUS(status);
}

/*
 * Decides the workers' namespace profile under strict and says it in
 * `out`.  Returns MXOP_EDENIED with a sentence in err where strict
 * promised the namespaces (root) and cannot have them without fallback.
 */
static int choose_namespaces(char *out, size_t outlen, char *err, size_t errlen)
{
    bool root = geteuid() == 0;
    const char *profile = profile_asked;
    if (strcmp(profile, "auto") == 0)
        profile = access("/dev/nvidiactl", F_OK) == 0 ? "gpu" : "cpu";
    bool gpu = strcmp(profile, "gpu") == 0;
    int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS;
    /* The pid namespace is the daemon's to make (spawn.c): root only, and not for the gpu profile.
     */
    flags |= root ? (gpu ? 0 : CLONE_NEWPID) : CLONE_NEWUSER;
    int e = probe_namespaces(flags);
    if (e == 0) {
        ns_profile = profile;
        pid_ns = root && !gpu;
        mxop__fmt(out, outlen,
                  "namespaces %s, minimal root filesystem, private /tmp (profile %s%s)",
                  !root ? "user, mount, ipc, net, uts"
                  : gpu ? "mount, ipc, net, uts (the host's pid namespace)"
                        : "pid, mount, ipc, net, uts",
                  profile, strcmp(profile, "gpu") == 0 ? ": /dev/nvidia* bound in" : "");
        return 0;
    }
    ns_profile = "none";
    if (root && !fallback) {
        mxop__fmt(err, errlen,
                  "--sandbox strict promises workers their own pid, mount, ipc, network and uts "
                  "namespaces, which this kernel refuses (%s); start with --sandbox-fallback on "
                  "to run strict workers on Landlock alone",
                  strerror(e));
        return MXOP_EDENIED;
    }
    mxop__fmt(out, outlen, "NO namespaces (%s: %s; falling back to Landlock)",
              root ? "unshare refused" : "no unprivileged user namespaces", strerror(e));
    MXOP__LOGW(0, NULL,
               "sandbox strict: workers get no namespaces of their own (%s), only Landlock's "
               "view of the filesystem",
               strerror(e));
    return 0;
}

int mxop__layers_check(const char *sandbox, const char *workers_as, char *err, size_t errlen)
{
    pid_ns = false;
    if (strcmp(sandbox, "none") == 0) {
        mxop__fmt(described, sizeof(described), "none: workers are not confined; workers run as %s",
                  workers_as);
        MXOP__LOGW(0, NULL,
                   "sandbox none: workers are not confined (libraries run with the "
                   "daemon's privileges)");
        return 0;
    }
    bool strict = strcmp(sandbox, "strict") == 0;
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 0)
        abi = 0;
    bool seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
    char landlock[160];
    if (abi == 0)
        mxop__fmt(landlock, sizeof(landlock), "no Landlock");
    else
        mxop__fmt(landlock, sizeof(landlock), "Landlock ABI %ld (%s%s%s)", abi,
                  strict ? "filesystem view, " : "", "ptrace confined",
                  abi >= 6 ? (strict ? ", signals and abstract sockets scoped, TCP refused"
                                     : ", signals scoped")
                           : (abi >= 4 && strict ? ", TCP refused" : ""));
    char ns[384] = "";
    if (strict) {
        int rc = choose_namespaces(ns, sizeof(ns), err, errlen);
        if (rc != 0)
            return rc;
    } else if (geteuid() == 0 && probe_namespaces(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) == 0) {
        /*
         * No pid namespace for basic: it keeps the host's files and so the host's /proc, where
         * the worker's own pid numbers (1 and its children's) would name other processes
         * (children.c, and any library reading /proc/<pid>).  Its own mount namespace holds a
         * private /dev/shm only (server/worker/namespaces.c says why not /tmp).
         */
        mxop__fmt(ns, sizeof(ns),
                  "ipc, uts and mount namespaces with a private 64 MiB /dev/shm, the host's pid "
                  "namespace and files (basic: what a worker writes to /tmp, /var/tmp or any "
                  "other directory its uid may write outlives it)");
    } else {
        mxop__fmt(ns, sizeof(ns),
                  "no namespaces (basic%s: the host's /dev/shm, /tmp and /var/tmp; what a worker "
                  "writes there outlives it and counts against no limit but RLIMIT_FSIZE per "
                  "file)",
                  geteuid() == 0 ? ", the kernel refused a mount namespace" : ", not root");
    }
    /*
     * Where the pid namespace is the host's: the kernel's uid checks where each worker has a
     * uid of its own (workeruid.c), else server/worker/neighbours.c's filter.
     */
    const char *pids = pid_ns   ? ""
                       : strict ? "; priority, scheduling, CPU, I/O and limit calls on other "
                                  "processes refused, signal and lookup calls too"
                                : "; priority, scheduling, CPU, I/O and limit calls on other "
                                  "processes refused";
    mxop__fmt(described, sizeof(described),
              "%s%s; %s; %s; %s; RLIMIT_FSIZE 1 GiB; oom_score_adj 1000; workers run as %s",
              seccomp ? "seccomp filter" : "NO seccomp", pids, landlock, ns,
              mxop__cgroup_describe(), workers_as);
    MXOP__LOGI(0, NULL, "sandbox %s layers: %s", sandbox, described);
    if (strict && abi == 0) {
        if (fallback) {
            MXOP__LOGW(0, NULL,
                       "sandbox strict without Landlock (--sandbox-fallback on): "
                       "workers can read and write whatever their uid can");
            return 0;
        }
        mxop__fmt(err, errlen,
                  "--sandbox strict promises a filesystem view through Landlock, which this "
                  "kernel does not offer (%s); start with --sandbox-fallback on to run strict "
                  "without it, or use --worker-uid",
                  strerror(ENOSYS));
        return MXOP_EDENIED;
    }
    return 0;
}
