/*
 * bench/bench_prefault.c - which way of pre-faulting a shared region makes
 * its first use in another process run at full speed.
 *
 *     bench_prefault [BUILD_DIR]        (make bench runs it)
 *
 * No daemon: two processes stand for the client and the worker.  The
 * client creates a 64 MiB memfd as mxop does (fallocate, sealed size) and
 * maps it; the worker maps it twice, read-only and read-write, as the
 * worker does, and pre-faults both mappings with one of the methods below
 * while the client waits.  Then:
 *
 *   input:  the client writes the region, the worker reads all of it
 *           twice (the first read against the later one);
 *   output: the worker writes a second fresh region twice.
 *
 * Methods: none; madvise(MADV_POPULATE_READ / MADV_POPULATE_WRITE) (what
 * shm/region.c does at registration); a real touch of every page (read one
 * byte through the read-only mapping, read and write back one byte
 * through the read-write one).  The table goes to stdout and to
 * BUILD/bench/prefault.csv and prefault.json.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/lib/env.h"
#include "bench/lib/report.h"
#include "bench/lib/stats.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define REGION_BYTES ((size_t)64 << 20)
#define PAGE 4096
#define REPS 2

enum { M_NONE = 0, M_MADVISE = 1, M_TOUCH = 2, N_METHODS = 3 };
static const char *const method_names[N_METHODS] = {"no pre-fault", "madvise POPULATE",
                                                    "touch every page"};

/* What the worker measured, sent back through a pipe. */
typedef struct worker_times {
    int rc;
    int64_t prefault_in, read1, read2;
    int64_t prefault_out, write1, write2;
} worker_times_t;

_Noreturn __attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("bench_prefault: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* A region as mxop makes one: memfd, fallocate'd, size sealed. */
static int region_fd(void)
{
    int fd = memfd_create("mxop-bench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)REGION_BYTES) != 0 ||
        posix_fallocate(fd, 0, (off_t)REGION_BYTES) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        die("cannot create a %zu-byte memfd: %s", REGION_BYTES, strerror(errno));
    return fd;
}

static void *map(int fd, int writable)
{
    void *p =
        mmap(NULL, REGION_BYTES, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    return p;
}

/* Pre-faults the worker's two mappings of one region; returns the time it took. */
static int64_t prefault(int method, const unsigned char *ro, unsigned char *rw)
{
    int64_t t0 = mxb_now_ns();
    if (method == M_MADVISE) {
        if (madvise((void *)ro, REGION_BYTES, MADV_POPULATE_READ) != 0 ||
            madvise(rw, REGION_BYTES, MADV_POPULATE_WRITE) != 0)
            die("madvise(MADV_POPULATE_*): %s", strerror(errno));
    } else if (method == M_TOUCH) {
        const volatile unsigned char *r = ro;
        volatile unsigned char *w = rw;
        unsigned sum = 0;
        for (size_t off = 0; off < REGION_BYTES; off += PAGE) {
            sum += r[off];
            /* Writing back what is there changes nothing the client wrote. */
            w[off] = w[off];
        }
        (void)sum;
    }
    return mxb_now_ns() - t0;
}

/* Reads all of a float region (as an op reads its input); returns the time. */
static int64_t read_all(const float *x, float *sum)
{
    int64_t t0 = mxb_now_ns();
    float s = 0;
    for (size_t i = 0; i < REGION_BYTES / sizeof(float); i++)
        s += x[i] > 0 ? x[i] : 0;
    *sum = s;
    return mxb_now_ns() - t0;
}

/* Writes all of a float region (as an op writes its output), from no other memory. */
static int64_t write_all(float *y, float v)
{
    int64_t t0 = mxb_now_ns();
    for (size_t i = 0; i < REGION_BYTES / sizeof(float); i++)
        y[i] = v + (float)(i & 1023);
    return mxb_now_ns() - t0;
}

_Noreturn static void worker(int method, int fd_in, int ready_fd, int go_fd, int res_fd)
{
    worker_times_t t = {0};
    char byte = 1;
    float sum;
    const unsigned char *ro = map(fd_in, 0);
    unsigned char *rw = map(fd_in, 1);
    t.prefault_in = prefault(method, ro, rw);
    if (write(ready_fd, &byte, 1) != 1 || read(go_fd, &byte, 1) != 1)
        _exit(1);
    /* The client has written the input now. */
    t.read1 = read_all((const float *)ro, &sum);
    t.read2 = read_all((const float *)ro, &sum);

    int fd_out = region_fd();
    const unsigned char *ro2 = map(fd_out, 0);
    unsigned char *rw2 = map(fd_out, 1);
    t.prefault_out = prefault(method, ro2, rw2);
    t.write1 = write_all((float *)rw2, 1.0f);
    t.write2 = write_all((float *)rw2, 2.0f);
    t.rc = sum == sum ? 0 : 1;
    if (write(res_fd, &t, sizeof(t)) != (ssize_t)sizeof(t))
        _exit(1);
    _exit(0);
}

static void run(int method, const float *data, worker_times_t *out, int64_t *client_write)
{
    int ready[2], go[2], res[2];
    char byte = 1;
    if (pipe(ready) || pipe(go) || pipe(res))
        die("pipe: %s", strerror(errno));
    int fd = region_fd();
    float *mine = map(fd, 1);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        worker(method, fd, ready[1], go[0], res[1]);
    }
    if (read(ready[0], &byte, 1) != 1)
        die("the worker process died while pre-faulting");
    int64_t t0 = mxb_now_ns();
    memcpy(mine, data, REGION_BYTES);
    *client_write = mxb_now_ns() - t0;
    if (write(go[1], &byte, 1) != 1 || read(res[0], out, sizeof(*out)) != (ssize_t)sizeof(*out) ||
        out->rc != 0)
        die("the worker process failed");
    waitpid(pid, NULL, 0);
    munmap(mine, REGION_BYTES);
    close(fd);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    close(res[0]);
    close(res[1]);
}

int main(int argc, char **argv)
{
    char build[PATH_MAX], dir[PATH_MAX + 16], csv[PATH_MAX + 32], json[PATH_MAX + 32];
    setvbuf(stdout, NULL, _IOLBF, 0);
    char machine[320];
    if (mxb_build_dir(argc, argv, build, sizeof(build)) != 0)
        die("cannot find the build directory; pass it as the argument");
    mxb_machine_line(machine, sizeof(machine));
    printf("bench_prefault: first use of a fresh 64 MiB region in a second process; %s\n", machine);

    /* Random data: pages a hypervisor could merge would flatter the client's write. */
    float *data = malloc(REGION_BYTES);
    if (data == NULL)
        die("out of memory");
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < REGION_BYTES / sizeof(float); i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        data[i] = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }

    for (int m = 0; m < N_METHODS; m++) {
        mxb_samples_t pin, r1, r2, pout, w1, w2, cw;
        mxb_samples_t *all[] = {&pin, &r1, &r2, &pout, &w1, &w2, &cw};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            if (mxb_samples_init(all[i], REPS) != 0)
                die("out of memory");
        for (int r = 0; r < REPS; r++) {
            worker_times_t t;
            int64_t client_write;
            run(m, data, &t, &client_write);
            mxb_samples_add(&pin, t.prefault_in);
            mxb_samples_add(&r1, t.read1);
            mxb_samples_add(&r2, t.read2);
            mxb_samples_add(&pout, t.prefault_out);
            mxb_samples_add(&w1, t.write1);
            mxb_samples_add(&w2, t.write2);
            mxb_samples_add(&cw, client_write);
        }
        char name[80];
        snprintf(name, sizeof(name), "%s: worker pre-fault, 2 maps", method_names[m]);
        mxb_report_add("P", name, &pin, NULL, NULL);
        snprintf(name, sizeof(name), "%s: input, first full read", method_names[m]);
        mxb_report_add("P", name, &r1, "later read", &r2);
        snprintf(name, sizeof(name), "%s: output, first full write", method_names[m]);
        mxb_report_add("P", name, &w1, "later write", &w2);
        snprintf(name, sizeof(name), "%s: client's first write", method_names[m]);
        mxb_report_add("P", name, &cw, NULL, NULL);
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            mxb_samples_free(all[i]);
    }
    free(data);

    mxb_report_print(stdout);
    if (snprintf(dir, sizeof(dir), "%s/bench", build) >= (int)sizeof(dir) ||
        snprintf(csv, sizeof(csv), "%s/prefault.csv", dir) >= (int)sizeof(csv) ||
        snprintf(json, sizeof(json), "%s/prefault.json", dir) >= (int)sizeof(json))
        die("the build directory's path is too long");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("mkdir %s: %s", dir, strerror(errno));
    if (mxb_report_write(csv, json, machine) != 0)
        return 1;
    printf("\nresults in %s and %s\n", csv, json);
    return 0;
}
