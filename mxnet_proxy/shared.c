/*
 * mxnet_proxy/shared.c - MXNet's cpu_shared arrays passed without a copy.
 *
 * MXNet's cpu_shared context allocates each array in a POSIX shared-memory
 * file it unlinks at once and keeps open (Linux), mapped MAP_SHARED.  Such
 * memory can be an mxop region as it is: the proxy finds the mapping that
 * holds the array in /proc/self/maps, the descriptor MXNet keeps open for
 * it in /proc/self/fd (same device and inode), and registers that file
 * with the session once (libmxop duplicates the descriptor).  The array
 * then travels as (region, offset): the worker reads and writes MXNet's
 * memory itself, no staging copy either way.
 *
 * The address is looked up in /proc/self/maps at every call, never
 * cached: MXNet may free an array and map another file at the same
 * address.  Regions are keyed by inode; a file no longer mapped where
 * MXNet had it (MXNet freed the array; libmxop's own mapping of the
 * region, elsewhere, does not count) is released at the next lookup, so
 * the registration (which keeps the file alive) holds no memory for long.
 * Only arrays of at least MXOP__PX_SHARED_MIN bytes are looked up: below
 * that the staging copy costs less than reading the maps.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "mxnet_proxy/proxy.h"

enum { MAX_FILES = 256 };

/* Shared files registered as regions (under the client lock). */
static struct shared_file {
    dev_t dev;
    ino_t ino;
    uintptr_t start; /* MXNet's mapping of it (libmxop maps it elsewhere too) */
    uint32_t region;
    int seen;
} files[MAX_FILES];
static int n_files;
static uint64_t zero_copy_bytes, staged_bytes;

/* /proc/self/maps whole, NUL-terminated (malloc'ed), or NULL. */
static char *read_maps(void)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (len + 1 == cap) {
            char *b = realloc(buf, cap * 2);
            if (b == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

/* One line of the maps: a shared mapping of a /dev/shm file (MXNet's cpu_shared memory). */
typedef struct mapping {
    uintptr_t start, end;
    uint64_t pgoff;
    dev_t dev;
    ino_t ino;
} mapping_t;

static int parse_line(const char *line, mapping_t *m)
{
    unsigned long long start, end, pgoff, ino;
    unsigned int maj, min;
    char perms[8];
    int path = 0;
    if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &pgoff, &maj, &min,
               &ino, &path) < 7 ||
        path == 0)
        return 0;
    if (perms[3] != 's' || strncmp(line + path, "/dev/shm/", 9) != 0)
        return 0;
    m->start = (uintptr_t)start;
    m->end = (uintptr_t)end;
    m->pgoff = pgoff;
    m->dev = makedev(maj, min);
    m->ino = (ino_t)ino;
    return 1;
}

/* The descriptor of this process open on (dev, ino), or -1. */
static int find_fd(dev_t dev, ino_t ino)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int found = -1, own = dirfd(d);
    struct dirent *e;
    while (found < 0 && (e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || fd == own || fstat(fd, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino)
            found = fd;
    }
    closedir(d);
    return found;
}

/* Releases the regions of files no longer mapped (MXNet freed their arrays). */
static void collect(mxop_client_t *c, const char *maps)
{
    for (int i = 0; i < n_files; i++)
        files[i].seen = 0;
    for (const char *line = maps; *line != '\0';) {
        mapping_t m;
        if (parse_line(line, &m))
            for (int i = 0; i < n_files; i++)
                if (files[i].dev == m.dev && files[i].ino == m.ino && files[i].start == m.start)
                    files[i].seen = 1;
        const char *nl = strchr(line, '\n');
        line = nl != NULL ? nl + 1 : line + strlen(line);
    }
    for (int i = 0; i < n_files;) {
        if (!files[i].seen) {
            (void)mxop_region_release(c, files[i].region);
            files[i] = files[--n_files];
        } else {
            i++;
        }
    }
}

/* The region of (dev, ino), registered now if new; 0 when it cannot be. */
static uint32_t region_of(mxop_client_t *c, const mapping_t *m)
{
    for (int i = 0; i < n_files; i++)
        if (files[i].dev == m->dev && files[i].ino == m->ino)
            return files[i].region;
    if (n_files == MAX_FILES)
        return 0;
    int fd = find_fd(m->dev, m->ino);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 0;
    uint32_t region = 0;
    if (mxop_region_register_fd(c, fd, (size_t)st.st_size, &region, NULL) != 0)
        return 0;
    files[n_files].dev = m->dev;
    files[n_files].ino = m->ino;
    files[n_files].start = m->start;
    files[n_files].region = region;
    n_files++;
    return region;
}

void mxop__px_shared_map(mxop_client_t *c, mxop_array_t *a, int n)
{
    char *maps = NULL;
    for (int i = 0; i < n; i++) {
        if (a[i].nbytes < MXOP__PX_SHARED_MIN) {
            staged_bytes += a[i].nbytes;
            continue;
        }
        if (maps == NULL && (maps = read_maps()) == NULL)
            return;
        uintptr_t p = (uintptr_t)a[i].data;
        mapping_t m;
        int hit = 0;
        for (const char *line = maps; *line != '\0' && !hit;) {
            hit = parse_line(line, &m) && m.start <= p && p + a[i].nbytes <= m.end;
            const char *nl = strchr(line, '\n');
            line = nl != NULL ? nl + 1 : line + strlen(line);
        }
        uint32_t region = hit ? region_of(c, &m) : 0;
        if (region == 0) {
            staged_bytes += a[i].nbytes;
            continue;
        }
        a[i].region = region;
        a[i].offset = (uint64_t)(p - m.start) + m.pgoff;
        zero_copy_bytes += a[i].nbytes;
    }
    if (maps != NULL) {
        collect(c, maps);
        free(maps);
    }
}

__attribute__((visibility("default"))) void
mxop_mxnet_proxy_stats(uint64_t *zero_copy, uint64_t *staged, uint32_t *regions)
{
    mxop_client_t *c = mxop__px_client_lock();
    *zero_copy = zero_copy_bytes;
    *staged = staged_bytes;
    *regions = (uint32_t)n_files;
    if (c != NULL)
        mxop__px_client_unlock();
}
