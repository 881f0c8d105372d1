/*
 * shm/sockspin.c - the socket data path's adaptive busy-poll (see
 * sockspin.h for why).
 */
#include "shm/sockspin.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* One wait counts at most this much, so one long pause does not stop spinning for long. */
#define WAIT_SAMPLE_MAX_NS (20 * (int64_t)MXOP__SOCKSPIN_NS)

void mxop__sockspin_init(mxop__sockspin_t *s)
{
    memset(s, 0, sizeof(*s));
    /* A new session starts out spinning, until its waits say otherwise. */
    s->hit_rate = MXOP__SOCKSPIN_HIT_ONE;
    const char *e = getenv("MXOP_SOCKET_SPIN");
    s->off = e != NULL && strcmp(e, "0") == 0;
}

static int64_t budget(const mxop__sockspin_t *s)
{
    int64_t avg = s->wait_avg_ns;
    if (avg <= MXOP__SOCKSPIN_NS)
        return MXOP__SOCKSPIN_NS;
    int64_t b = (int64_t)MXOP__SOCKSPIN_NS * MXOP__SOCKSPIN_NS / avg;
    return b < MXOP__SOCKSPIN_MIN_NS ? MXOP__SOCKSPIN_MIN_NS : b;
}

/* Not when recent spins rarely succeeded, except a probe now and then. */
static int spin_pays(mxop__sockspin_t *s)
{
    if (s->hit_rate < MXOP__SOCKSPIN_HIT_MIN && ++s->unspun < MXOP__SOCKSPIN_PROBE_EVERY) {
        s->n_skip_rare++;
        return 0;
    }
    s->unspun = 0;
    return 1;
}

static void note_spin(mxop__sockspin_t *s, int hit)
{
    s->n_spins++;
    s->n_spin_hits += (uint64_t)hit;
    s->hit_rate += ((hit ? MXOP__SOCKSPIN_HIT_ONE : 0) - s->hit_rate) / 16;
}

int mxop__sockspin_wait(mxop__sockspin_t *s, int (*ready)(void *arg), void *arg)
{
    if (s->off || !spin_pays(s))
        return 0;
    int64_t start = mxop__now_ns(), b = budget(s);
    /* A probe while spins do not pay is short: it only has to notice a quick peer. */
    if (s->hit_rate < MXOP__SOCKSPIN_HIT_MIN && b > MXOP__SOCKSPIN_PROBE_NS)
        b = MXOP__SOCKSPIN_PROBE_NS;
    for (;;) {
        int r = ready(arg);
        if (r != 0) {
            /* An error is not a spin's failure: the blocking path reports it. */
            if (r > 0)
                note_spin(s, 1);
            return r;
        }
        if (mxop__now_ns() - start >= b)
            break;
    }
    note_spin(s, 0);
    return 0;
}

void mxop__sockspin_note_wait(mxop__sockspin_t *s, int64_t waited_ns)
{
    if (waited_ns > WAIT_SAMPLE_MAX_NS)
        waited_ns = WAIT_SAMPLE_MAX_NS;
    if (waited_ns < 0)
        waited_ns = 0;
    s->wait_avg_ns += (waited_ns - s->wait_avg_ns) / 8;
}
