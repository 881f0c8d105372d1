/*
 * server/worker/fsview.c - the worker's view of the host's filesystem (fsview.h).
 *
 * A path that is not on the host is skipped by both readers: systems
 * differ in what they have.
 */
#include <dirent.h>
#include <string.h>

#include "common/util.h"
#include "server/worker/fsview.h"

#define BOTH (MXOP__FS_LANDLOCK | MXOP__FS_BIND)

const mxop__fs_path_t mxop__fs_view[] = {
    /* The dynamic loader, libraries and what they read at start-up. */
    {"/usr", BOTH},
    {"/lib", BOTH},
    {"/lib64", BOTH},
    {"/lib32", BOTH},
    {"/libx32", BOTH},
    {"/opt", MXOP__FS_LANDLOCK},
    {"/etc/ld.so.cache", BOTH},
    {"/etc/ld.so.conf", BOTH},
    {"/etc/ld.so.conf.d", BOTH},
    {"/etc/ld.so.preload", BOTH},
    {"/etc/nsswitch.conf", BOTH},
    {"/etc/passwd", BOTH},
    {"/etc/group", BOTH},
    {"/etc/localtime", BOTH},
    {"/etc/alternatives", BOTH},
    /* The minimal root mounts a /proc of its own. */
    {"/proc", MXOP__FS_LANDLOCK},
    /* The CPU topology (thread pools size themselves by it); the gpu profile binds all /sys. */
    {"/sys", MXOP__FS_LANDLOCK},
    {"/sys/devices/system/cpu", MXOP__FS_BIND},
    {"/sys/devices/system/node", MXOP__FS_BIND},
    /* Device nodes, after the system paths. */
    {"/dev/null", BOTH | MXOP__FS_WRITE | MXOP__FS_DEVICE},
    {"/dev/zero", BOTH | MXOP__FS_WRITE | MXOP__FS_DEVICE},
    {"/dev/random", BOTH | MXOP__FS_DEVICE},
    {"/dev/urandom", BOTH | MXOP__FS_DEVICE},
};

const size_t mxop__fs_view_len = sizeof(mxop__fs_view) / sizeof(mxop__fs_view[0]);

int mxop__fs_each_gpu_node(int (*fn)(const char *path, void *arg), void *arg)
{
    DIR *d = opendir("/dev");
    if (d == NULL)
        return 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "nvidia", 6) != 0)
            continue;
        char path[300];
        mxop__fmt(path, sizeof(path), "/dev/%s", e->d_name);
        rc = fn(path, arg);
    }
    closedir(d);
    return rc;
}
