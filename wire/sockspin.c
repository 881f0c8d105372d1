/*
 * wire/sockspin.c - the socket data path's adaptive busy-poll (see
 * sockspin.h for why).
 */
#include "wire/sockspin.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* One wait counts at most this much, so one long pause does not stop spinning for long. */
#define WAIT_SAMPLE_MAX_NS (20 * (int64_t)MXOP__SOCKSPIN_NS)

void mxop__sockspin_init(mxop__sockspin_t *s, mxop__sockspin_side_t side)
{
    memset(s, 0, sizeof(*s));
    s->side = side;
    /* A new session starts out spinning, until its waits say otherwise. */
    s->hit_rate = MXOP__SOCKSPIN_HIT_ONE;
    s->probe_every = MXOP__SOCKSPIN_PROBE_EVERY;
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
    if (s->hit_rate < MXOP__SOCKSPIN_HIT_MIN && ++s->unspun < s->probe_every) {
        s->n_skip_rare++;
        return 0;
    }
    s->unspun = 0;
    return 1;
}

/*
 * While spins do not pay, each probe that fails doubles the waits to the
 * next (up to MXOP__SOCKSPIN_PROBE_EVERY_MAX), and one that succeeds is
 * followed by another at once, so that a peer that has become quick again
 * is spun for within a few waits.
 */
static void note_spin(mxop__sockspin_t *s, int hit)
{
    int probe = s->hit_rate < MXOP__SOCKSPIN_HIT_MIN;
    s->n_spins++;
    s->n_spin_hits += (uint64_t)hit;
    s->hit_rate += ((hit ? MXOP__SOCKSPIN_HIT_ONE : 0) - s->hit_rate) / 16;
    if (hit) {
        s->probe_every = MXOP__SOCKSPIN_PROBE_EVERY;
        if (probe)
            s->unspun = s->probe_every;
    } else if (probe && s->probe_every < MXOP__SOCKSPIN_PROBE_EVERY_MAX) {
        s->probe_every *= 2;
    }
}

/* The verdict on a spin that saw the answer at look number `looks` (see sockspin.h). */
static void note_answer(mxop__sockspin_t *s, int looks, int lost_cpu)
{
    if (s->side == MXOP__SOCKSPIN_CLIENT)
        note_spin(s, 1);
    else if (looks > 1 || lost_cpu)
        note_spin(s, !lost_cpu);
}

int mxop__sockspin_wait(mxop__sockspin_t *s, int (*ready)(void *arg), void *arg)
{
    if (s->off || !spin_pays(s))
        return 0;
    int64_t start = mxop__now_ns(), b = budget(s), prev = start;
    /* A probe while spins do not pay is short: it only has to notice a quick peer. */
    if (s->hit_rate < MXOP__SOCKSPIN_HIT_MIN && b > MXOP__SOCKSPIN_PROBE_NS)
        b = MXOP__SOCKSPIN_PROBE_NS;
    int r, looks = 0, lost_cpu = 0;
    for (;;) {
        r = ready(arg);
        looks++;
        int64_t now = mxop__now_ns();
        lost_cpu |= now - prev > MXOP__SOCKSPIN_GAP_NS;
        prev = now;
        /* An error is not a spin's verdict: the blocking path reports it. */
        if (r < 0)
            return r;
        if (r > 0 || now - start >= b || (lost_cpu && s->side == MXOP__SOCKSPIN_WORKER))
            break;
    }
    s->n_lost_cpu += (uint64_t)lost_cpu;
    if (r > 0)
        note_answer(s, looks, lost_cpu);
    else
        note_spin(s, 0);
    return r;
}

void mxop__sockspin_note_wait(mxop__sockspin_t *s, int64_t waited_ns)
{
    if (waited_ns > WAIT_SAMPLE_MAX_NS)
        waited_ns = WAIT_SAMPLE_MAX_NS;
    if (waited_ns < 0)
        waited_ns = 0;
    s->wait_avg_ns += (waited_ns - s->wait_avg_ns) / 8;
}
