/*
 * bench/lib/stats.c - see stats.h.
 */
#include "bench/lib/stats.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

int64_t mxb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int mxb_samples_init(mxb_samples_t *s, size_t cap)
{
    s->n = 0;
    s->cap = 0;
    s->ns = malloc((cap ? cap : 1) * sizeof(*s->ns));
    if (s->ns == NULL)
        return -ENOMEM;
    s->cap = cap;
    return 0;
}

void mxb_samples_add(mxb_samples_t *s, int64_t ns)
{
    if (s->n < s->cap)
        s->ns[s->n++] = ns;
}

void mxb_samples_free(mxb_samples_t *s)
{
    free(s->ns);
    s->ns = NULL;
    s->n = s->cap = 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

double mxb_quantile(mxb_samples_t *s, double p)
{
    if (s->n == 0)
        return 0;
    qsort(s->ns, s->n, sizeof(*s->ns), cmp_i64);
    if (p <= 0)
        return (double)s->ns[0];
    if (p >= 1)
        return (double)s->ns[s->n - 1];
    /* The median of an even count is the mean of the middle two; other
     * quantiles take the nearest rank, which never understates a tail. */
    if (p == 0.5 && s->n % 2 == 0)
        return ((double)s->ns[s->n / 2 - 1] + (double)s->ns[s->n / 2]) / 2;
    size_t rank = (size_t)(p * (double)s->n + 0.999999);
    if (rank == 0)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    return (double)s->ns[rank - 1];
}
