/*
 * tests/plugins/hostile_alias.c - a library that changes its caller's
 * memory through routes other than a plain store into its input.
 *
 *   alias_write   1 input, 1 output (f32, at least 4 elements).  Looks for
 *                 a writable way to in[0]'s memory: (1) a writable mapping
 *                 of the same file in /proc/self/maps, (2) a descriptor of
 *                 that file (/proc/self/fd) reopened read-write through
 *                 /proc/self/fd and mapped writable, (3) the mapping's
 *                 /proc/self/map_files entry opened read-write, (4) every
 *                 descriptor's reopen, whatever file it is, checked for the
 *                 same inode.  Through each one that works it flips a bit
 *                 of every byte of in[0].  out[0..3] = 1 for each route that
 *                 was writable, 0 where refused.  Returns 0.
 *   overrun       1 input, 1 output (f32).  Writes 7.0 into every element
 *                 of out[0] and then as many more floats past its end as
 *                 in[0] has elements (into whatever follows the output).
 *                 Returns 0.
 *   out_where     1 input, 1 output (f32, at least 1 element).  out[0] =
 *                 1 when out[0]'s memory is a mapping named "mxop-stage"
 *                 (the client's scratch region), 2 when "mxop-arena" (the
 *                 engine's own arrays, zero-copy), 0 otherwise.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_alias", "1.0");

static const mxop_host_t *host;

/* The /proc/self/maps line of the mapping that holds `addr`. */
static int find_mapping(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, uint64_t *off,
                        unsigned long *ino, char *name, size_t namelen)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    char line[512];
    int found = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        uintptr_t a, b;
        char perms[8], dev[16];
        unsigned long long o;
        unsigned long i;
        int pos = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %15s %lu %n", &a, &b, perms, &o, dev,
                   &i, &pos) < 6)
            continue;
        if (addr >= a && addr < b) {
            *lo = a;
            *hi = b;
            *off = o;
            *ino = i;
            snprintf(name, namelen, "%s", pos > 0 ? line + pos : "");
            name[strcspn(name, "\n")] = '\0';
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

static void flip(volatile unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(p[i] ^ 1);
}

/* Route 1: another mapping of the same file that is writable. */
static int writable_mapping(unsigned long ino, uint64_t in_off, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return 0;
    char line[512];
    int done = 0;
    while (!done && fgets(line, sizeof(line), f) != NULL) {
        uintptr_t a, b;
        char perms[8], dev[16];
        unsigned long long o;
        unsigned long i;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %15s %lu", &a, &b, perms, &o, dev,
                   &i) < 6)
            continue;
        if (i != ino || perms[1] != 'w' || in_off < o || in_off + len > o + (b - a))
            continue;
        flip((unsigned char *)(a + (in_off - o)), len);
        done = 1;
    }
    fclose(f);
    return done;
}

/* Maps `fd` writable and flips the input's bytes through it. */
static int write_through(int fd, uint64_t in_off, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = in_off & ~(uint64_t)(page - 1);
    size_t maplen = (size_t)(in_off - start) + len;
    void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (p == MAP_FAILED)
        return 0;
    flip((unsigned char *)p + (in_off - start), len);
    munmap(p, maplen);
    return 1;
}

/* Routes 2 and 4: any descriptor of the input's file, reopened read-write. */
static int reopen_fds(unsigned long ino, uint64_t in_off, size_t len, int only_same)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    int done = 0;
    struct dirent *e;
    while (!done && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int fd = atoi(e->d_name);
        struct stat st;
        if (fd == dirfd(d) || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (only_same && st.st_ino != ino)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        int rw = open(path, O_RDWR | O_CLOEXEC);
        if (rw < 0)
            continue;
        if (fstat(rw, &st) == 0 && st.st_ino == ino)
            done = write_through(rw, in_off, len);
        close(rw);
    }
    closedir(d);
    return done;
}

/* Route 3: /proc/self/map_files/<lo>-<hi> (needs CAP_SYS_ADMIN). */
static int map_files(uintptr_t lo, uintptr_t hi, uint64_t in_off, size_t len)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/self/map_files/%" PRIxPTR "-%" PRIxPTR, lo, hi);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int done = write_through(fd, in_off, len);
    close(fd);
    return done;
}

static int alias_write_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    size_t len = in[0].size * mxop_dtype_size(in[0].dtype);
    uintptr_t lo, hi;
    uint64_t off;
    unsigned long ino;
    char name[256];
    float *o = out[0].data;
    for (int i = 0; i < 4 && (size_t)i < out[0].size; i++)
        o[i] = 0;
    if (find_mapping((uintptr_t)in[0].data, &lo, &hi, &off, &ino, name, sizeof(name)) != 0)
        return 0;
    uint64_t in_off = off + ((uintptr_t)in[0].data - lo);
    int r[4];
    r[0] = writable_mapping(ino, in_off, len);
    r[1] = reopen_fds(ino, in_off, len, 1);
    r[2] = map_files(lo, hi, in_off, len);
    r[3] = reopen_fds(ino, in_off, len, 0);
    for (int i = 0; i < 4 && (size_t)i < out[0].size; i++)
        o[i] = (float)r[i];
    return 0;
}

static int overrun_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    volatile float *o = out[0].data;
    size_t n = out[0].size + in[0].size;
    for (size_t i = 0; i < n; i++)
        o[i] = 7.0f;
    return 0;
}

static int out_where_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    uintptr_t lo, hi;
    uint64_t off;
    unsigned long ino;
    char name[256] = "";
    float v = 0;
    if (find_mapping((uintptr_t)out[0].data, &lo, &hi, &off, &ino, name, sizeof(name)) == 0)
        v = strstr(name, "mxop-stage") != NULL   ? 1.0f
            : strstr(name, "mxop-arena") != NULL ? 2.0f
                                                 : 0;
    ((float *)out[0].data)[0] = v;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        const char *description;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {
        {"alias_write", "changes its input through any writable alias it finds",
         alias_write_forward},
        {"overrun", "writes past the end of its output", overrun_forward},
        {"out_where", "names the mapping its output lies in", out_where_forward},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = ops[i].description,
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].fn,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    return 0;
}
