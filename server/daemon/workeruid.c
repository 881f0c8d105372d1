/*
 * server/daemon/workeruid.c - workers never run with the daemon's privileges.
 *
 * A daemon that runs as root starts its workers as root; each worker then
 * drops to the uid and gid settled here before any library code runs
 * (server/worker/sandbox.c).  With no --worker-uid the daemon picks the
 * system's unprivileged account: `nobody` (and the group `nogroup`, else
 * `nobody`), or 65534 where the system has no such name - the number those
 * accounts have on common distributions, and one no file an operator cares
 * about should belong to.  Why one shared account and not a uid per
 * worker: files the worker must open (its own regions reopened read-only,
 * the CUDA driver's nodes) and anything the operator wants to grant are
 * then a single, documented account; what separates the workers of one
 * daemon from each other is not the uid but the layers that come on top
 * (Landlock's ptrace and signal scoping, the seccomp filter, a cgroup per
 * worker, and each worker's own network namespace).  docs/security.md says
 * what that does and does not give.
 *
 * `--worker-uid 0` (or root by name) would hand libraries root again: it
 * is refused unless --sandbox none, which confines nothing anyway.
 */
#include "server/daemon/workeruid.h"

#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"

int mxop__workeruid_settle(mxop__config_t *cfg, char *err, size_t errlen)
{
    bool none = strcmp(cfg->sandbox, "none") == 0;
    if (cfg->has_worker_uid && cfg->worker_uid == 0 && !none) {
        mxop__fmt(err, errlen,
                  "--worker-uid 0 would run op libraries as root; it is refused unless "
                  "--sandbox none (give an unprivileged user, or leave --worker-uid out to let "
                  "the daemon choose one)");
        return MXOP_EINVAL;
    }
    if (cfg->has_worker_uid || geteuid() != 0 || none)
        return 0;
    const struct passwd *pw = getpwnam("nobody");
    uid_t uid = pw != NULL ? pw->pw_uid : (uid_t)MXOP__WORKER_UID_FALLBACK;
    gid_t gid = pw != NULL ? pw->pw_gid : (gid_t)MXOP__WORKER_UID_FALLBACK;
    const struct group *gr = getgrnam("nogroup");
    if (gr == NULL)
        gr = getgrnam("nobody");
    if (gr != NULL)
        gid = gr->gr_gid;
    if (uid == 0 || gid == 0) {
        /* A system whose `nobody` is root is misconfigured; never hand that to libraries. */
        uid = (uid_t)MXOP__WORKER_UID_FALLBACK;
        gid = (gid_t)MXOP__WORKER_UID_FALLBACK;
    }
    cfg->has_worker_uid = true;
    cfg->worker_uid_chosen = true;
    cfg->worker_uid = uid;
    cfg->worker_gid = gid;
    return 0;
}

void mxop__workeruid_describe(const mxop__config_t *cfg, char *out, size_t outlen)
{
    if (!cfg->has_worker_uid) {
        mxop__fmt(out, outlen, "the daemon's uid %u%s", (unsigned)geteuid(),
                  geteuid() == 0 ? " (root: --sandbox none)" : "");
        return;
    }
    const struct passwd *pw = getpwuid(cfg->worker_uid);
    mxop__fmt(out, outlen, "uid %u gid %u (%s%s) in their own network namespaces",
              (unsigned)cfg->worker_uid, (unsigned)cfg->worker_gid,
              pw != NULL ? pw->pw_name : "no account",
              cfg->worker_uid_chosen ? ", chosen by the daemon" : ", --worker-uid");
}
