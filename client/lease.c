/*
 * client/lease.c - taking turns to spin (shm/lease_page.h).
 *
 * A call that is about to spin for its result first makes sure its process
 * holds a slot of its uid's lease page; one that will not spin lets go of
 * any.  Holding is cheap: a check of the slot's holder, the quantum and the
 * waiter count, all on lines nobody else writes while the holder runs.
 * Waiting is a futex sleep on the page's generation word, woken by a
 * release, or after MXOP__LEASE_NAP_NS to look for a holder that died or
 * went idle (napping rarely keeps the futex's wake order, first come first
 * served, mostly intact).  A wait in which nothing was released for
 * MXOP__LEASE_STUCK_NS, or that lasts MXOP__LEASE_WAIT_MAX_NS, ends
 * without a slot, and the session goes on without the lease for a second.
 * A holder passes its slot on at the end of a quantum when others wait,
 * and keeps it free for a woken waiter for MXOP__LEASE_HANDOFF_NS, so that
 * the pairs take turns.  A session's side of this is the state in
 * client/lease.h, changed by lease_to alone.
 *
 * Holders are process ids: the sessions of one process (a pool's
 * siblings) share their process's slot, and the calls in flight within a
 * process are bounded by client/spincap.c.  The id is read once per
 * process, and again in a forked child.
 */
#include "client/lease.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "shm/lease_page.h"

/* How long a session goes on without the lease after a wait ran past its bound. */
#define LEASE_OFF_NS 1000000000

static _Atomic uint32_t self_pid;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;

static void self_forked(void)
{
    atomic_store_explicit(&self_pid, (uint32_t)getpid(), memory_order_relaxed);
}

static void self_init(void)
{
    self_forked();
    pthread_atfork(NULL, NULL, self_forked);
}

static uint32_t self(void)
{
    pthread_once(&self_once, self_init);
    return atomic_load_explicit(&self_pid, memory_order_relaxed);
}

/* The one place a session's lease state changes. */
static void lease_to(mxop__lease_t *l, mxop__lease_state_t to, int slot, int64_t off_until_ns)
{
    l->state = to;
    l->slot = to == MXOP__LEASE_TAKEN || to == MXOP__LEASE_HELD ? slot : -1;
    l->off_until_ns = to == MXOP__LEASE_OFF ? off_until_ns : 0;
}

int mxop__lease_map(mxop__lease_t *l, int fd)
{
    l->page = NULL;
    lease_to(l, MXOP__LEASE_NONE, -1, 0);
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(mxop__lease_page_t))
        return -1;
    mxop__lease_page_t *p =
        mmap(NULL, sizeof(mxop__lease_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    if (p->magic != MXOP__LEASE_MAGIC || p->n_slots < 1 || p->n_slots > MXOP__LEASE_SLOTS_MAX) {
        munmap(p, sizeof(*p));
        return -1;
    }
    l->page = p;
    lease_to(l, MXOP__LEASE_FREE, -1, 0);
    return 0;
}

static void futex_wake_one(_Atomic uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Frees slot `s`, held by `me`; with handoff, keeps it for a waiter for a while. */
static void release(mxop__lease_page_t *p, mxop__lease_slot_t *s, uint32_t me, int64_t now,
                    int handoff)
{
    uint32_t want = me;
    atomic_store_explicit(&s->released_by, me, memory_order_relaxed);
    atomic_store_explicit(&s->handoff_until, handoff ? now + MXOP__LEASE_HANDOFF_NS : 0,
                          memory_order_relaxed);
    if (!atomic_compare_exchange_strong(&s->holder, &want, 0))
        return; /* taken from us meanwhile (we looked stale) */
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->waiters, memory_order_seq_cst) > 0)
        futex_wake_one(&p->gen);
}

static void hold(mxop__lease_slot_t *s, int64_t now)
{
    atomic_store_explicit(&s->since_ns, now, memory_order_relaxed);
    atomic_store_explicit(&s->last_ns, now, memory_order_relaxed);
}

/*
 * One look for a slot: one this process holds already, a free one (unless
 * this process just handed it over and a woken waiter may still come), or
 * one whose holder made no call for MXOP__LEASE_STALE_NS (gone or idle).
 * Returns its index, or -1.  *next_ns gets when a slot kept for a hand-over
 * frees up, if earlier.
 */
static int take(mxop__lease_page_t *p, uint32_t me, int64_t now, int64_t *next_ns)
{
    uint32_t n = p->n_slots;
    if (n < 1 || n > MXOP__LEASE_SLOTS_MAX)
        return -1; /* changed under us: no lease */
    for (uint32_t i = 0; i < n; i++) {
        mxop__lease_slot_t *s = &p->slots[i];
        uint32_t h = atomic_load_explicit(&s->holder, memory_order_relaxed);
        if (h == me)
            return (int)i;
        if (h == 0) {
            int64_t until = atomic_load_explicit(&s->handoff_until, memory_order_relaxed);
            if (until > now && atomic_load_explicit(&s->released_by, memory_order_relaxed) == me) {
                if (until < *next_ns)
                    *next_ns = until;
                continue;
            }
        } else if (now - atomic_load_explicit(&s->last_ns, memory_order_relaxed) <
                   MXOP__LEASE_STALE_NS) {
            continue;
        }
        if (atomic_compare_exchange_strong(&s->holder, &h, me)) {
            hold(s, now);
            return (int)i;
        }
    }
    return -1;
}

int mxop__lease_enter(mxop__lease_t *l)
{
    if (l->state == MXOP__LEASE_NONE || l->page == NULL)
        return 0;
    return mxop__lease_enter_at(l, mxop__now_ns());
}

int mxop__lease_enter_at(mxop__lease_t *l, int64_t now)
{
    mxop__lease_page_t *p = l->page;
    if (l->state == MXOP__LEASE_NONE || p == NULL)
        return 0;
    if (l->state == MXOP__LEASE_OFF) {
        if (now < l->off_until_ns)
            return 0;
        lease_to(l, MXOP__LEASE_FREE, -1, 0);
    }
    uint32_t me = self();
    if (l->state == MXOP__LEASE_TAKEN || l->state == MXOP__LEASE_HELD) {
        mxop__lease_slot_t *s = &p->slots[l->slot];
        if (atomic_load_explicit(&s->holder, memory_order_relaxed) == me) {
            if (now - atomic_load_explicit(&s->since_ns, memory_order_relaxed) <
                    MXOP__LEASE_QUANTUM_NS ||
                atomic_load_explicit(&p->waiters, memory_order_relaxed) == 0) {
                atomic_store_explicit(&s->last_ns, now, memory_order_relaxed);
                lease_to(l, MXOP__LEASE_HELD, l->slot, 0);
                return 1;
            }
            /* The quantum is over and others wait: their turn. */
            atomic_fetch_add_explicit(&p->handovers, 1, memory_order_relaxed);
            release(p, s, me, now, 1);
            /*
             * Yield until a waiter has taken the slot (or the hand-over
             * window ends) rather than sleep at once: a CPU that halts
             * here makes the new holder's worker pay the wake-up of a
             * halted vCPU (50-100 us on this project's VM) to start.
             */
            while (atomic_load_explicit(&s->holder, memory_order_relaxed) == 0 &&
                   mxop__now_ns() - now < MXOP__LEASE_HANDOFF_NS)
                sched_yield();
            now = mxop__now_ns();
        }
        /* Handed over, or taken from us while we looked idle. */
        lease_to(l, MXOP__LEASE_FREE, -1, 0);
    }
    int64_t start = now, moved = now; /* when a release was last seen */
    uint32_t seen = atomic_load_explicit(&p->gen, memory_order_seq_cst);
    int waited = 0;
    for (;;) {
        uint32_t g = atomic_load_explicit(&p->gen, memory_order_seq_cst);
        if (g != seen) {
            seen = g;
            moved = now;
        }
        int64_t next = now + MXOP__LEASE_NAP_NS;
        int i = take(p, me, now, &next);
        if (i >= 0) {
            lease_to(l, MXOP__LEASE_TAKEN, i, 0);
            return 1;
        }
        int64_t end = moved + MXOP__LEASE_STUCK_NS;
        if (start + MXOP__LEASE_WAIT_MAX_NS < end)
            end = start + MXOP__LEASE_WAIT_MAX_NS;
        if (now >= end) {
            l->gave_up++;
            lease_to(l, MXOP__LEASE_OFF, -1, now + LEASE_OFF_NS);
            return 0;
        }
        if (!waited) {
            waited = 1;
            l->waits++;
        }
        int64_t nap = (next < end ? next : end) - now;
        if (nap < 1000)
            nap = 1000;
        struct timespec ts = {.tv_sec = nap / 1000000000, .tv_nsec = nap % 1000000000};
        atomic_fetch_add_explicit(&p->waiters, 1, memory_order_seq_cst);
        syscall(SYS_futex, &p->gen, FUTEX_WAIT, g, &ts, NULL, 0);
        atomic_fetch_sub_explicit(&p->waiters, 1, memory_order_relaxed);
        now = mxop__now_ns();
    }
}

void mxop__lease_leave(mxop__lease_t *l)
{
    if (l->state != MXOP__LEASE_TAKEN && l->state != MXOP__LEASE_HELD)
        return;
    mxop__lease_slot_t *s = &l->page->slots[l->slot];
    uint32_t me = self();
    if (atomic_load_explicit(&s->holder, memory_order_relaxed) == me)
        release(l->page, s, me, 0, 0); /* no hand-over: the time is not used */
    lease_to(l, MXOP__LEASE_FREE, -1, 0);
}

void mxop__lease_spin_failed(mxop__lease_t *l)
{
    if (l->state == MXOP__LEASE_TAKEN)
        lease_to(l, MXOP__LEASE_HELD, l->slot, 0);
    else
        mxop__lease_leave(l);
}

void mxop__lease_unmap(mxop__lease_t *l)
{
    if (l->page == NULL)
        return;
    mxop__lease_leave(l);
    munmap(l->page, sizeof(mxop__lease_page_t));
    l->page = NULL;
    lease_to(l, MXOP__LEASE_NONE, -1, 0);
}
