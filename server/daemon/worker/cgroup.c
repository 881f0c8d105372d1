/*
 * server/daemon/worker/cgroup.c - a cgroup per worker.
 *
 * RLIMIT_DATA does not count shared mappings: a library could touch
 * gigabytes of shared anonymous memory under any --worker-memory-mb.  A
 * memory cgroup counts every page the worker's processes fault in,
 * shared ones included (pages the client faulted first, its regions, stay
 * charged to the client).  Where the worker exceeds its limit the kernel
 * kills it inside the cgroup, never the daemon; the daemon then finds the
 * OOM kill in the cgroup's counters and reports MXOP_EWORKER_OOM.
 *
 * Two layouts exist in the wild and both are handled:
 *   - cgroup v2 (a unified hierarchy with the memory controller, at
 *     /sys/fs/cgroup): /sys/fs/cgroup/mxop-w<pid>/{memory.max, pids.max,
 *     cgroup.procs, cgroup.kill, memory.events};
 *   - cgroup v1: /sys/fs/cgroup/memory/mxop-w<pid>/{memory.limit_in_bytes,
 *     memory.oom_control} and /sys/fs/cgroup/pids/mxop-w<pid>/pids.max.
 * The group is named after the worker's pid, which is unique among live
 * processes; a stale group of that name (a daemon that was killed) is
 * removed first, and at start every empty group of a dead pid.  Killing a worker kills its whole
 * group: cgroup.kill (v2), or SIGKILL to every member until none is left (v1).
 */
#include "server/daemon/worker/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/worker.h"

#define ROOT "/sys/fs/cgroup"

enum layout { UNKNOWN, NONE, V1, V2 };

static enum layout layout = UNKNOWN;
static bool switched_off; /* --worker-cgroup off */
static bool warned;
static uint64_t limit_mb; /* of the groups made, for the OOM note */

static int write_str(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, s, strlen(s));
    int e = errno;
    close(fd);
    return n == (ssize_t)strlen(s) ? 0 : -(n < 0 ? e : EIO);
}

static int read_str(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return -EIO;
    buf[n] = '\0';
    return 0;
}

/*
 * Groups of workers whose daemon was killed (no one reaped them to remove
 * their group) stay behind, empty.  At start, every mxop-w<pid> group that
 * is empty and whose pid is not alive goes.
 */
static void sweep_stale(const char *root)
{
    DIR *d = opendir(root);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "mxop-w", 6) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + 6, &end, 10);
        if (*end != '\0' || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_MAX];
        mxop__fmt(path, sizeof(path), "%s/%s", root, e->d_name);
        rmdir(path); /* fails, harmlessly, on a group that still has members */
    }
    closedir(d);
}

static enum layout detect(void)
{
    if (switched_off)
        return NONE;
    char buf[512];
    if (read_str(ROOT "/cgroup.controllers", buf, sizeof(buf)) == 0 &&
        strstr(buf, "memory") != NULL) {
        /* Children of the root get the controllers only once the root hands them down. */
        write_str(ROOT "/cgroup.subtree_control", "+memory +pids");
        sweep_stale(ROOT);
        return V2;
    }
    if (access(ROOT "/memory/cgroup.procs", W_OK) == 0) {
        sweep_stale(ROOT "/memory");
        sweep_stale(ROOT "/pids");
        return V1;
    }
    return NONE;
}

static void dir_of(char *out, size_t len, const char *ctrl, pid_t pid)
{
    if (ctrl == NULL)
        mxop__fmt(out, len, ROOT "/mxop-w%d", (int)pid);
    else
        mxop__fmt(out, len, ROOT "/%s/mxop-w%d", ctrl, (int)pid);
}

/* Makes the group for `pid` under one controller (NULL: v2) and puts pid in it. */
static int make_group(const char *ctrl, pid_t pid, const char *limit_file, const char *limit)
{
    char dir[128], path[192], num[24];
    dir_of(dir, sizeof(dir), ctrl, pid);
    if (mkdir(dir, 0755) != 0 && (errno != EEXIST || (rmdir(dir) != 0 || mkdir(dir, 0755) != 0)))
        return -errno;
    if (limit_file != NULL) {
        mxop__fmt(path, sizeof(path), "%s/%s", dir, limit_file);
        int rc = write_str(path, limit);
        if (rc != 0)
            return rc;
    }
    mxop__fmt(path, sizeof(path), "%s/cgroup.procs", dir);
    mxop__fmt(num, sizeof(num), "%d", (int)pid);
    return write_str(path, num);
}

const char *mxop__cgroup_describe(void)
{
    if (layout == UNKNOWN)
        layout = detect();
    switch (layout) {
    case V2: return "a cgroup v2 per worker (memory with shared mappings, pids, cgroup.kill)";
    case V1: return "a cgroup v1 per worker (memory with shared mappings, pids)";
    default:
        return switched_off
                   ? "no per-worker cgroup (--worker-cgroup off: memory limited by RLIMIT_AS)"
                   : "no per-worker cgroup (shared memory limited only by RLIMIT_AS, where "
                     "--session-max-region-mb sizes it)";
    }
}

bool mxop__cgroup_holds_worker_process(pid_t pid)
{
    if (!mxop__cgroup_in_use())
        return false;
    char path[64], buf[2048];
    mxop__fmt(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    if (read_str(path, buf, sizeof(buf)) != 0)
        return false;
    /* Lines "ID:CONTROLLERS:/PATH"; a worker's group is /mxop-w<pid> (dir_of). */
    return strstr(buf, ":/mxop-w") != NULL;
}

int mxop__cgroup_option(const char *val, char *err, size_t errlen)
{
    if (strcmp(val, "off") == 0)
        switched_off = true;
    else if (strcmp(val, "auto") == 0)
        switched_off = false;
    else {
        mxop__fmt(err, errlen, "--worker-cgroup must be auto or off, not '%s'", val);
        return MXOP_EINVAL;
    }
    return 0;
}

bool mxop__cgroup_in_use(void)
{
    if (layout == UNKNOWN)
        layout = detect();
    return layout == V1 || layout == V2;
}

uint64_t mxop__cgroup_address_space_mb(uint64_t memory_mb, uint64_t region_quota_mb)
{
    if (mxop__cgroup_in_use() || memory_mb == 0 || region_quota_mb == 0)
        return 0;
    return memory_mb + 2 * region_quota_mb;
}

void mxop__cgroup_enter(pid_t pid, const char *sandbox, uint64_t memory_mb)
{
    if (strcmp(sandbox, "none") == 0)
        return;
    if (layout == UNKNOWN)
        layout = detect();
    if (layout == NONE) {
        if (!warned && !switched_off)
            MXOP__LOGW(0, NULL,
                       "no per-worker cgroup (no writable memory controller under "
                       "%s): memory in shared mappings is limited only by RLIMIT_AS, "
                       "which needs --session-max-region-mb",
                       ROOT);
        warned = true;
        return;
    }
    char mem[32], pids[16];
    if (memory_mb == 0)
        mxop__fmt(mem, sizeof(mem), "%s", layout == V2 ? "max" : "-1");
    else
        mxop__fmt(mem, sizeof(mem), "%llu",
                  (unsigned long long)((memory_mb + MXOP__CGROUP_SLACK_MB) << 20));
    mxop__fmt(pids, sizeof(pids), "%d", MXOP__CGROUP_PIDS_MAX);
    limit_mb = memory_mb == 0 ? 0 : memory_mb + MXOP__CGROUP_SLACK_MB;
    int rc;
    if (layout == V2) {
        rc = make_group(NULL, pid, "memory.max", mem);
        char path[192];
        char dir[128];
        dir_of(dir, sizeof(dir), NULL, pid);
        mxop__fmt(path, sizeof(path), "%s/pids.max", dir);
        if (rc == 0)
            write_str(path, pids);
    } else {
        rc = make_group("memory", pid, "memory.limit_in_bytes", mem);
        if (rc == 0 && access(ROOT "/pids/cgroup.procs", W_OK) == 0)
            rc = make_group("pids", pid, "pids.max", pids);
    }
    if (rc != 0 && !warned) {
        warned = true;
        MXOP__LOGW(0, NULL,
                   "cannot put worker %d in a cgroup of its own (%s): memory in shared "
                   "mappings is not limited",
                   (int)pid, strerror(-rc));
    }
}

/* Kills every member of a group until none is left; then removes it. */
static void empty_and_remove(const char *ctrl, pid_t pid)
{
    char dir[128], path[192], buf[4096];
    dir_of(dir, sizeof(dir), ctrl, pid);
    if (access(dir, F_OK) != 0)
        return;
    if (ctrl == NULL) {
        mxop__fmt(path, sizeof(path), "%s/cgroup.kill", dir);
        write_str(path, "1");
    }
    mxop__fmt(path, sizeof(path), "%s/cgroup.procs", dir);
    for (int round = 0; round < 100; round++) {
        if (read_str(path, buf, sizeof(buf)) != 0 || buf[0] == '\0')
            break;
        for (char *p = buf; *p != '\0';) {
            char *end;
            long member = strtol(p, &end, 10);
            if (end == p)
                break;
            if (member > 0)
                kill((pid_t)member, SIGKILL);
            p = end;
            while (*p == '\n')
                p++;
        }
        usleep(1000);
    }
    /* A member still exiting keeps the group a moment. */
    for (int i = 0; i < 100 && rmdir(dir) != 0 && errno == EBUSY; i++)
        usleep(1000);
}

/* 1 when the kernel's OOM killer killed a member of the worker's memory group. */
static int oom_killed(pid_t pid)
{
    char dir[128], path[192], buf[1024];
    dir_of(dir, sizeof(dir), layout == V2 ? NULL : "memory", pid);
    mxop__fmt(path, sizeof(path), "%s/%s", dir,
              layout == V2 ? "memory.events" : "memory.oom_control");
    if (read_str(path, buf, sizeof(buf)) != 0)
        return 0;
    const char *k = strstr(buf, "oom_kill ");
    return k != NULL && strtoull(k + 9, NULL, 10) > 0;
}

/*
 * Whether the group's usage ever reached its limit (v1 memory.failcnt, v2
 * memory.events "max").  With a SIGKILL the daemon did not send, that is
 * the memory limit's kill even when the oom_kill counter does not show it
 * yet (seen once in a full run: killed at the limit, the counter still 0).
 */
static int hit_limit(pid_t pid)
{
    char dir[128], path[192], buf[1024];
    dir_of(dir, sizeof(dir), layout == V2 ? NULL : "memory", pid);
    mxop__fmt(path, sizeof(path), "%s/%s", dir, layout == V2 ? "memory.events" : "memory.failcnt");
    if (read_str(path, buf, sizeof(buf)) != 0)
        return 0;
    if (layout != V2)
        return strtoull(buf, NULL, 10) > 0;
    const char *k = strstr(buf, "max ");
    return k != NULL && strtoull(k + 4, NULL, 10) > 0;
}

bool mxop__cgroup_release(pid_t pid, mxop__status_page_t *page, bool unasked_sigkill)
{
    if (layout != V1 && layout != V2)
        return false;
    /* The daemon's own observation (the cgroup's counters), not the worker's word. */
    bool oom = oom_killed(pid) || (unasked_sigkill && limit_mb > 0 && hit_limit(pid));
    if (page != NULL && oom && atomic_load_explicit(&page->fault_code, memory_order_acquire) == 0) {
        char *m = (char *)page->fault_msg;
        mxop__fmt(m, MXOP__STATUS_MSG_MAX,
                  "out of memory: the worker's cgroup reached its limit of %llu MiB "
                  "(--worker-memory-mb plus %d MiB for the worker itself; shared memory "
                  "counted) and the kernel killed it",
                  (unsigned long long)limit_mb, MXOP__CGROUP_SLACK_MB);
        atomic_store_explicit(&page->fault_code, MXOP_EWORKER_OOM, memory_order_release);
    }
    if (layout == V2) {
        empty_and_remove(NULL, pid);
    } else {
        empty_and_remove("memory", pid);
        empty_and_remove("pids", pid);
    }
    return oom;
}
