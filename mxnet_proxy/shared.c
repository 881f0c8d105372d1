/*
 * mxnet_proxy/shared.c - MXNet's cpu_shared arrays passed without a copy.
 *
 * MXNet's cpu_shared context allocates each array in a POSIX shared-memory
 * file it unlinks at once and keeps open for the array's life (Linux),
 * mapped MAP_SHARED; it closes the descriptor when it frees the array.
 * Such memory can be an mxop region as it is: the proxy finds the mapping
 * that holds an array in /proc/self/maps, the descriptor MXNet keeps open
 * for it in /proc/self/fd (same device and inode), and registers that file
 * with the session once (libmxop duplicates the descriptor).  The array
 * then travels as (region, offset): the worker reads and writes MXNet's
 * memory itself, no staging copy either way.
 *
 * Reading the maps costs about a millisecond in an MXNet process, so what
 * it said is kept:
 *  - a shared file while MXNet's descriptor still names it (one fstat per
 *    call): MXNet unmaps the array only when it closes that descriptor, so
 *    the mapping is still there.  One whose descriptor is closed or reused
 *    is released at once (the registration keeps the file alive);
 *  - ranges of other mappings (MXNet's ordinary memory): an array there is
 *    staged without a look.  Were such a range unmapped and a shared file
 *    mapped there, its arrays would only be staged: slower, never wrong.
 * Only arrays of at least MXOP__PX_SHARED_MIN bytes are looked at: below
 * that the staging copy costs less.
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

enum { MAX_FILES = 256, MAX_OTHER = 64 };

/* One mapping of /proc/self/maps. */
typedef struct mapping {
    uintptr_t start, end;
    uint64_t pgoff;
    dev_t dev;
    ino_t ino;
    int shm; /* a MAP_SHARED mapping of a /dev/shm file */
} mapping_t;

/* Shared files registered as regions, and other ranges (all under the client lock). */
static struct shared_file {
    mapping_t m; /* MXNet's mapping of it */
    int fd;      /* MXNet's descriptor for it (not ours: never closed here) */
    uint32_t region;
} files[MAX_FILES];
static int n_files;
static struct range {
    uintptr_t start, end;
} other[MAX_OTHER];
static int n_other, next_other;
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

static int parse_line(const char *line, mapping_t *m)
{
    unsigned long long start, end, pgoff, ino;
    unsigned int maj, min;
    char perms[8];
    int path = 0;
    if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &pgoff, &maj, &min,
               &ino, &path) < 7)
        return 0;
    m->start = (uintptr_t)start;
    m->end = (uintptr_t)end;
    m->pgoff = pgoff;
    m->dev = makedev(maj, min);
    m->ino = (ino_t)ino;
    m->shm = path > 0 && perms[3] == 's' && strncmp(line + path, "/dev/shm/", 9) == 0;
    return 1;
}

/* The mapping holding [p, p + n) in `maps`; 0 when none does. */
static int find_mapping(const char *maps, uintptr_t p, size_t n, mapping_t *m)
{
    for (const char *line = maps; *line != '\0';) {
        if (parse_line(line, m) && m->start <= p && p + n <= m->end)
            return 1;
        const char *nl = strchr(line, '\n');
        line = nl != NULL ? nl + 1 : line + strlen(line);
    }
    return 0;
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

/* Releases the files MXNet has closed (freed arrays): their mappings are gone too. */
static void collect(mxop_client_t *c)
{
    for (int i = 0; i < n_files;) {
        struct stat st;
        if (fstat(files[i].fd, &st) != 0 || st.st_dev != files[i].m.dev ||
            st.st_ino != files[i].m.ino) {
            (void)mxop_region_release(c, files[i].region);
            files[i] = files[--n_files];
        } else {
            i++;
        }
    }
}

/* Registers MXNet's file behind mapping m; its entry, or NULL (the array is staged). */
static struct shared_file *add_file(mxop_client_t *c, const mapping_t *m)
{
    if (n_files == MAX_FILES)
        return NULL;
    int fd = find_fd(m->dev, m->ino);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return NULL;
    uint32_t region = 0;
    if (mxop_region_register_fd(c, fd, (size_t)st.st_size, &region, NULL) != 0)
        return NULL;
    struct shared_file *f = &files[n_files++];
    f->m = *m;
    f->fd = fd;
    f->region = region;
    return f;
}

static void add_other(const mapping_t *m)
{
    other[next_other].start = m->start;
    other[next_other].end = m->end;
    next_other = (next_other + 1) % MAX_OTHER;
    if (n_other < MAX_OTHER)
        n_other++;
}

/* The registered file holding [p, p + n), else NULL; *known when it lies in another range. */
static struct shared_file *cached(uintptr_t p, size_t n, int *known)
{
    for (int i = 0; i < n_files; i++)
        if (files[i].m.start <= p && p + n <= files[i].m.end)
            return &files[i];
    *known = 0;
    for (int i = 0; i < n_other && !*known; i++)
        *known = other[i].start <= p && p + n <= other[i].end;
    return NULL;
}

void mxop__px_shared_map(mxop_client_t *c, mxop_array_t *a, int n)
{
    char *maps = NULL;
    collect(c);
    for (int i = 0; i < n; i++) {
        uintptr_t p = (uintptr_t)a[i].data;
        int known = 0;
        struct shared_file *f = NULL;
        if (a[i].nbytes >= MXOP__PX_SHARED_MIN && (f = cached(p, a[i].nbytes, &known)) == NULL &&
            !known && (maps != NULL || (maps = read_maps()) != NULL)) {
            mapping_t m;
            if (find_mapping(maps, p, a[i].nbytes, &m)) {
                if (m.shm)
                    f = add_file(c, &m);
                else
                    add_other(&m);
            }
        }
        if (f == NULL) {
            staged_bytes += a[i].nbytes;
            continue;
        }
        a[i].region = f->region;
        a[i].offset = (uint64_t)(p - f->m.start) + f->m.pgoff;
        zero_copy_bytes += a[i].nbytes;
    }
    free(maps);
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
