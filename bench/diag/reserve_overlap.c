/*
 * bench/diag/reserve_overlap.c - what a fresh 64 MiB memfd costs when it
 * is reserved (posix_fallocate) and then faulted in through a shared
 * mapping (MADV_POPULATE_WRITE) one after the other, against reserving the
 * lower half while another thread faults in the upper one, against an
 * anonymous first touch (shm/region.h says what was chosen).  Not built by the Makefile:
 *
 *     cc -O2 -pthread -o /tmp/reserve_overlap bench/diag/reserve_overlap.c && /tmp/reserve_overlap
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SIZE ((size_t)64 << 20)
#define CHUNK ((size_t)2 << 20)

static char *view;
static double populate_ms;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The worker's prefill thread: the upper half, 2 MiB at a time from the end. */
static void *populate_upper(void *arg)
{
    double t0 = now_ms();
    for (size_t off = SIZE; off > SIZE / 2; off -= CHUNK)
        madvise(view + off - CHUNK, CHUNK, MADV_POPULATE_WRITE);
    populate_ms = now_ms() - t0;
    return arg;
}

int main(void)
{
    for (int round = 0; round < 3; round++) {
        int fd = memfd_create("serial", 0);
        if (fd < 0 || ftruncate(fd, SIZE) != 0)
            return 1;
        double t0 = now_ms();
        posix_fallocate(fd, 0, SIZE);
        double t1 = now_ms();
        view = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        madvise(view, SIZE, MADV_POPULATE_WRITE);
        double t2 = now_ms();
        printf("serial: reserve %.1f ms, populate %.1f ms, %.1f ms in all\n", t1 - t0, t2 - t1,
               t2 - t0);
        munmap(view, SIZE);
        close(fd);

        fd = memfd_create("split", 0);
        if (fd < 0 || ftruncate(fd, SIZE) != 0)
            return 1;
        t0 = now_ms();
        posix_fallocate(fd, SIZE / 2, SIZE / 2);
        view = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        pthread_t th;
        pthread_create(&th, NULL, populate_upper, NULL);
        posix_fallocate(fd, 0, SIZE / 2);
        pthread_join(th, NULL);
        t1 = now_ms();
        madvise(view, SIZE / 2, MADV_POPULATE_WRITE);
        t2 = now_ms();
        printf("split: reserved, upper half populated meanwhile (%.1f ms) after %.1f ms; "
               "lower half populated %.1f ms; %.1f ms in all\n",
               populate_ms, t1 - t0, t2 - t1, t2 - t0);
        munmap(view, SIZE);
        close(fd);

        char *anon = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        t0 = now_ms();
        for (size_t off = 0; off < SIZE; off += 4096)
            anon[off] = 1;
        t1 = now_ms();
        munmap(anon, SIZE);
        printf("anonymous first touch: %.1f ms\n", t1 - t0);
    }
    return 0;
}
