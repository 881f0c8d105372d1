/*
 * bench/diag/vcpu_relu.c - the same in-process relu of 1 MiB pinned to
 * each CPU in turn: whether the host runs the VM's vCPUs alike this minute
 * (docs/performance.md, "The machine": the two vCPUs are not always
 * alike).  Not built by the Makefile:
 *
 *     cc -O2 -o /tmp/vcpu_relu bench/diag/vcpu_relu.c && /tmp/vcpu_relu
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N (1 << 18) /* floats: 1 MiB */
#define ROUNDS 3000

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(void)
{
    float *x = aligned_alloc(64, N * sizeof(float)), *y = aligned_alloc(64, N * sizeof(float));
    if (x == NULL || y == NULL)
        return 1;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 7 - 3);
    memset(y, 0, N * sizeof(float));
    cpu_set_t all;
    sched_getaffinity(0, sizeof(all), &all);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &all))
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0)
            continue;
        double best = 1e18, sum = 0;
        for (int k = 0; k < ROUNDS; k++) {
            double t0 = now_ns();
            for (int i = 0; i < N; i++)
                y[i] = x[i] > 0 ? x[i] : 0;
            double d = now_ns() - t0;
            sum += d;
            best = d < best ? d : best;
        }
        printf("cpu %d: relu 1 MiB mean %.1f us, best %.1f us\n", cpu, sum / ROUNDS / 1e3,
               best / 1e3);
    }
    return 0;
}
