/*
 * server/worker/fsview.h - the worker's view of the host's filesystem, as one table.
 *
 * Two mechanisms draw it: Landlock (landlock.c) lets the worker reach these
 * paths and nothing else, and the minimal root (namespaces.c) binds them
 * into an empty tmpfs read-only.  Both read this table, so that what the
 * worker sees is decided in one place; the flags say which of the two
 * handles each path where they differ (the minimal root mounts its own
 * /proc, and binds only the parts of /sys a CPU worker needs, which
 * Landlock allows as the whole /sys).
 */
#ifndef MXOP_SERVER_WORKER_FSVIEW_H
#define MXOP_SERVER_WORKER_FSVIEW_H

#include <stddef.h>

enum mxop__fs_how {
    MXOP__FS_LANDLOCK = 1u << 0, /* Landlock allows reading it */
    MXOP__FS_WRITE = 1u << 1,    /* Landlock allows writing it too */
    MXOP__FS_BIND = 1u << 2,     /* the minimal root binds it, read-only */
    MXOP__FS_DEVICE = 1u << 3,   /* a device node: bound with its device usable */
};

typedef struct mxop__fs_path {
    const char *path;
    unsigned how; /* enum mxop__fs_how */
} mxop__fs_path_t;

/* The table, in the order the minimal root binds it (system paths, then device nodes). */
extern const mxop__fs_path_t mxop__fs_view[];
extern const size_t mxop__fs_view_len;

/*
 * Calls fn(path, arg) for each node of the NVIDIA driver (/dev/nvidia*),
 * the gpu profile's devices, until fn returns nonzero; returns that, or 0.
 */
int mxop__fs_each_gpu_node(int (*fn)(const char *path, void *arg), void *arg);

#endif /* MXOP_SERVER_WORKER_FSVIEW_H */
