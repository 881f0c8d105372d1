/*
 * server/daemon/worker/workeruid.c - workers never run with the daemon's
 * privileges, and never with another worker's uid.
 *
 * A daemon that runs as root starts its workers as root; each worker then
 * drops to the uid and gid settled here before any library code runs
 * (server/worker/sandbox.c).  With no --worker-uid the daemon gives every
 * worker (live or spare) a uid of its own, with the gid of the same number
 * and no groups, from a range it owns: 0x6d780000 .. +4095 by default,
 * --worker-uids FIRST:COUNT otherwise.  Why one uid per worker: the kernel
 * lets a process renice, reschedule, re-pin, change the I/O class of,
 * prlimit and signal any process of its own uid, and where workers share
 * the host's pid namespace (basic, the gpu profile) a shared uid let one
 * session's library do all of that to another session's worker.  With a
 * uid each, the kernel's own uid checks refuse it, for every thread, with
 * no rule to keep up to date.  The uid is taken when the worker is started
 * and given back when it is reaped (after its cgroup and the processes
 * that escaped it were killed); the next worker takes the least recently
 * used free one, so a uid comes back as late as the range allows.  No
 * account is needed: nothing is looked up by name, the worker's files are
 * descriptors, its private /tmp and /dev/shm are made with its uid.  The
 * range must hold no account the system knows (its two ends are checked
 * at start), and two root daemons on one machine need two ranges.
 *
 * --worker-uid UID gives every worker that one account (a group the CUDA
 * driver's nodes need, say); a daemon not running as root runs its
 * workers as its own uid.  Workers then share a uid, and the seccomp
 * filter of server/worker/neighbours.c keeps their calls on themselves.
 *
 * `--worker-uid 0` (or root by name) would hand libraries root again: it
 * is refused unless --sandbox none, which confines nothing anyway.
 */
#include "server/daemon/worker/workeruid.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/worker/worker.h"

/* Which uids of the range live workers hold (one byte each), and where the next search starts. */
static unsigned char *held;
static uint32_t next_slot;

int mxop__workeruid_range_option(mxop__config_t *cfg, const char *val, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    unsigned long long first = strtoull(val, &end, 10);
    unsigned long long count = 0;
    if (val[0] >= '0' && val[0] <= '9' && errno == 0 && *end == ':' && end[1] >= '0' &&
        end[1] <= '9') {
        const char *c = end + 1;
        count = strtoull(c, &end, 10);
    }
    if (errno != 0 || end == NULL || *end != '\0' || first == 0 || count == 0 || count > 65536 ||
        first + count - 1 > 0xfffffffeull) {
        mxop__fmt(err, errlen,
                  "--worker-uids must be FIRST:COUNT, COUNT uids from FIRST (1 to 65536 of them, "
                  "not 0, below 4294967295), not '%s'",
                  val);
        return MXOP_EINVAL;
    }
    cfg->worker_uids_given = true;
    cfg->worker_uid_first = (uid_t)first;
    cfg->worker_uid_count = (uint32_t)count;
    return 0;
}

/* The range's two ends must not be accounts: a worker would act as that user. */
static int check_range(const mxop__config_t *cfg, char *err, size_t errlen)
{
    uid_t ends[2] = {cfg->worker_uid_first, cfg->worker_uid_first + cfg->worker_uid_count - 1};
    for (int i = 0; i < 2; i++) {
        const struct passwd *pw = getpwuid(ends[i]);
        if (pw != NULL || ends[i] == geteuid()) {
            mxop__fmt(err, errlen,
                      "the workers' uid range %u-%u holds uid %u (%s); choose another with "
                      "--worker-uids FIRST:COUNT",
                      (unsigned)ends[0], (unsigned)ends[1], (unsigned)ends[i],
                      pw != NULL ? pw->pw_name : "the daemon's own");
            return MXOP_EINVAL;
        }
    }
    return 0;
}

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
    if (cfg->worker_uids_given && cfg->has_worker_uid) {
        mxop__fmt(err, errlen,
                  "--worker-uids (a uid per worker) and --worker-uid (one for all) exclude each "
                  "other");
        return MXOP_EINVAL;
    }
    if (cfg->worker_uids_given && geteuid() != 0) {
        mxop__fmt(err, errlen, "--worker-uids needs the daemon to run as root");
        return MXOP_EINVAL;
    }
    if (cfg->has_worker_uid || geteuid() != 0 || none)
        return 0;
    if (!cfg->worker_uids_given) {
        cfg->worker_uid_first = (uid_t)MXOP__WORKER_UID_FIRST;
        cfg->worker_uid_count = MXOP__WORKER_UID_COUNT;
    }
    int rc = check_range(cfg, err, errlen);
    if (rc != 0)
        return rc;
    free(held);
    held = calloc(cfg->worker_uid_count, 1);
    if (held == NULL) {
        mxop__fmt(err, errlen, "out of memory for the workers' uid range");
        return MXOP_ENOMEM;
    }
    next_slot = 0;
    cfg->worker_uid_range = true;
    return 0;
}

int mxop__workeruid_acquire(const mxop__config_t *cfg, uid_t *uid, gid_t *gid, bool *own, char *err,
                            size_t errlen)
{
    *own = false;
    if (cfg->worker_uid_range) {
        for (uint32_t k = 0; k < cfg->worker_uid_count; k++) {
            uint32_t slot = (next_slot + k) % cfg->worker_uid_count;
            if (held[slot])
                continue;
            held[slot] = 1;
            next_slot = (slot + 1) % cfg->worker_uid_count;
            *uid = cfg->worker_uid_first + slot;
            *gid = (gid_t)*uid;
            *own = true;
            return 0;
        }
        mxop__fmt(err, errlen,
                  "every uid of the workers' range %u-%u is held by a live worker (--worker-uids "
                  "gives a larger one)",
                  (unsigned)cfg->worker_uid_first,
                  (unsigned)(cfg->worker_uid_first + cfg->worker_uid_count - 1));
        return MXOP_ELIMIT;
    }
    if (!cfg->has_worker_uid)
        return 1;
    *uid = cfg->worker_uid;
    *gid = cfg->worker_gid;
    return 0;
}

void mxop__workeruid_release(const mxop__config_t *cfg, uid_t uid)
{
    if (!cfg->worker_uid_range || uid < cfg->worker_uid_first ||
        uid - cfg->worker_uid_first >= cfg->worker_uid_count)
        return;
    held[uid - cfg->worker_uid_first] = 0;
}

bool mxop__workeruid_is_workers(const mxop__config_t *cfg, uid_t uid)
{
    if (uid == geteuid())
        return false;
    if (cfg->worker_uid_range)
        return uid >= cfg->worker_uid_first && uid - cfg->worker_uid_first < cfg->worker_uid_count;
    return cfg->has_worker_uid && uid == cfg->worker_uid;
}

void mxop__workeruid_describe(const mxop__config_t *cfg, char *out, size_t outlen)
{
    if (cfg->worker_uid_range) {
        mxop__fmt(out, outlen,
                  "a uid of their own each, from %u-%u (gid the same; chosen by the daemon%s) in "
                  "their own network namespaces",
                  (unsigned)cfg->worker_uid_first,
                  (unsigned)(cfg->worker_uid_first + cfg->worker_uid_count - 1),
                  cfg->worker_uids_given ? ", --worker-uids" : "");
        return;
    }
    if (!cfg->has_worker_uid) {
        mxop__fmt(out, outlen, "the daemon's uid %u%s, all of them", (unsigned)geteuid(),
                  geteuid() == 0 ? " (root: --sandbox none)" : "");
        return;
    }
    const struct passwd *pw = getpwuid(cfg->worker_uid);
    mxop__fmt(out, outlen,
              "uid %u gid %u (%s, --worker-uid), all of them, in their own network "
              "namespaces",
              (unsigned)cfg->worker_uid, (unsigned)cfg->worker_gid,
              pw != NULL ? pw->pw_name : "no account");
}
