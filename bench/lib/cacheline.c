/*
 * bench/lib/cacheline.c - a cache line bounced between CPU 0 and CPU 1
 * (cacheline.h).
 */
#include "bench/lib/cacheline.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* Each on a line of its own, so that only the bounce moves lines. */
typedef struct bounce {
    _Alignas(64) atomic_long ping;
    _Alignas(64) atomic_long pong;
    long rounds;
    double ns;
} bounce_t;

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    (void)pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static void *answer(void *arg)
{
    bounce_t *b = arg;
    pin(1);
    for (long i = 1; i <= b->rounds; i++) {
        while (atomic_load_explicit(&b->ping, memory_order_acquire) != i)
            ;
        atomic_store_explicit(&b->pong, i, memory_order_release);
    }
    return NULL;
}

static void *ask(void *arg)
{
    bounce_t *b = arg;
    pin(0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 1; i <= b->rounds; i++) {
        atomic_store_explicit(&b->ping, i, memory_order_release);
        while (atomic_load_explicit(&b->pong, memory_order_acquire) != i)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    b->ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
            (double)b->rounds;
    return NULL;
}

int mxb_cacheline_rtt(long bounces, double *ns)
{
    static bounce_t b; /* static: aligned whatever the stack's alignment */
    atomic_store(&b.ping, 0);
    atomic_store(&b.pong, 0);
    b.rounds = bounces > 0 ? bounces : 1;
    b.ns = 0;
    /* Two threads of their own: the caller's own affinity stays as it is. */
    pthread_t a, q;
    if (pthread_create(&a, NULL, answer, &b) != 0)
        return -1;
    if (pthread_create(&q, NULL, ask, &b) != 0) {
        /* The answerer waits for pings that never come: give them. */
        for (long i = 1; i <= b.rounds; i++) {
            atomic_store(&b.ping, i);
            while (atomic_load(&b.pong) != i)
                ;
        }
        pthread_join(a, NULL);
        return -1;
    }
    pthread_join(q, NULL);
    pthread_join(a, NULL);
    *ns = b.ns;
    return 0;
}
