/*
 * server/daemon/layers.c - what confines a worker here, said at start.
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
 */
#include "server/daemon/layers.h"

#include <errno.h>
#include <linux/landlock.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/cgroup.h"
#include "server/daemon/log.h"

static bool fallback;
/* What was logged at start, for `mxop status`. */
static char described[512] = "not checked yet";

const char *mxop__layers_describe(void)
{
    return described;
}

int mxop__layers_option(const char *opt, const char *val, char *err, size_t errlen)
{
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

int mxop__layers_check(const char *sandbox, const char *workers_as, char *err, size_t errlen)
{
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
    mxop__fmt(described, sizeof(described), "%s; %s; %s; oom_score_adj 1000; workers run as %s",
              seccomp ? "seccomp filter" : "NO seccomp", landlock, mxop__cgroup_describe(),
              workers_as);
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
