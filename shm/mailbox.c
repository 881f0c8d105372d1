/*
 * shm/mailbox.c - the shared-memory mailbox: creation, attachment, the
 * seqlocked slots and the spin-then-sleep policy (see mailbox.h).
 */
#include "shm/mailbox.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "wire/frame.h"
#include "shm/region.h"

_Static_assert(MXOP__FRAME_HDR == 12, "mxop__mbox_fits assumes a 12-byte frame header");
_Static_assert(sizeof(mxop__mbox_slot_t) % 64 == 0, "slots keep their cache lines apart");

/* A hint to the CPU that this is a spin loop (and to a hyperthread sibling to run). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Looks at seq between two reads of the clock while spinning. */
#define SPIN_LOOKS 32

/* A frame that keeps changing while it is copied is a peer that scribbles. */
#define TAKE_TRIES 1000

/* One wait counts at most this much, so one long pause does not stop spinning for long. */
#define WAIT_SAMPLE_MAX_NS (20 * (int64_t)MXOP__MBOX_SPIN_NS)

static void mbox_init(mxop__mbox_t *m)
{
    memset(m, 0, sizeof(*m));
    m->bell_tx = -1;
    m->bell_rx = -1;
    /* A new session starts out spinning, until its waits say otherwise. */
    m->hit_rate = MXOP__MBOX_HIT_ONE;
}

int mxop__mbox_create(mxop__mbox_t *m, int fds[3], char *msg, size_t msglen)
{
    int memfd = -1;
    void *p = NULL;

    mbox_init(m);
    fds[0] = fds[1] = fds[2] = -1;
    if (mxop__region_create_fd("mxop-mailbox", MXOP__MBOX_BYTES, &memfd) != 0) {
        mxop__fmt(msg, msglen, "cannot create the mailbox memfd: %s", strerror(errno));
        return MXOP_ESHM;
    }
    if (mxop__region_map(memfd, MXOP__MBOX_BYTES, 1, &p) != 0) {
        mxop__fmt(msg, msglen, "cannot map the mailbox: %s", strerror(errno));
        goto err_fd;
    }
    m->bell_tx = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    m->bell_rx = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m->bell_tx < 0 || m->bell_rx < 0) {
        mxop__fmt(msg, msglen, "cannot create the mailbox bells: %s", strerror(errno));
        goto err_map;
    }
    /* Fault the slots in now, not on the first calls (a fault costs microseconds here). */
    mxop__region_prefault(p, MXOP__MBOX_BYTES, 1);
    m->sh = p;
    atomic_store_explicit(&m->sh->req.cpu, -1, memory_order_relaxed);
    atomic_store_explicit(&m->sh->rep.cpu, -1, memory_order_relaxed);
    m->sh->magic = MXOP__MBOX_MAGIC;
    m->sh->version = MXOP__MBOX_VERSION;
    m->sh->slot_bytes = MXOP__MBOX_SLOT_BYTES;
    m->tx = &m->sh->req;
    m->rx = &m->sh->rep;
    fds[0] = memfd;
    fds[1] = m->bell_tx;
    fds[2] = m->bell_rx;
    return 0;

err_map:
    if (m->bell_tx >= 0)
        close(m->bell_tx);
    if (m->bell_rx >= 0)
        close(m->bell_rx);
    mxop__region_unmap(p, MXOP__MBOX_BYTES);
err_fd:
    close(memfd);
    mbox_init(m);
    return MXOP_ESHM;
}

int mxop__mbox_attach(mxop__mbox_t *m, int memfd, int bell_req, int bell_rep, uint64_t size,
                      char *msg, size_t msglen)
{
    char why[256];
    void *p = NULL;
    int rc = MXOP_EINVAL;

    mbox_init(m);
    if (size != MXOP__MBOX_BYTES) {
        mxop__fmt(msg, msglen, "mailbox of %llu bytes; this worker's layout has %zu",
                  (unsigned long long)size, (size_t)MXOP__MBOX_BYTES);
        goto err_fds;
    }
    why[0] = '\0';
    if (mxop__region_check_fd(memfd, size, why, sizeof(why)) != 0) {
        mxop__fmt(msg, msglen, "mailbox: %s", why);
        goto err_fds;
    }
    /* An unsealed memfd could be shrunk under the mapping, and the next touch would SIGBUS. */
    int seals = fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        mxop__fmt(msg, msglen, "mailbox memfd is not sealed against shrinking");
        goto err_fds;
    }
    /* The bells are read without blocking, whatever the peer set. */
    for (int i = 0; i < 2; i++) {
        int fd = i == 0 ? bell_req : bell_rep;
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
            mxop__fmt(msg, msglen, "mailbox bell %d is not usable: %s", i, strerror(errno));
            goto err_fds;
        }
    }
    if (mxop__region_map(memfd, MXOP__MBOX_BYTES, 1, &p) != 0) {
        mxop__fmt(msg, msglen, "cannot map the mailbox: %s", strerror(errno));
        rc = MXOP_ESHM;
        goto err_fds;
    }
    mxop__mbox_shared_t *sh = p;
    if (sh->magic != MXOP__MBOX_MAGIC || sh->version != MXOP__MBOX_VERSION ||
        sh->slot_bytes != MXOP__MBOX_SLOT_BYTES) {
        mxop__fmt(msg, msglen,
                  "mailbox header (magic 0x%08x, version %u, slots of %u bytes) is not version "
                  "%d with slots of %u bytes",
                  sh->magic, sh->version, sh->slot_bytes, MXOP__MBOX_VERSION,
                  MXOP__MBOX_SLOT_BYTES);
        mxop__region_unmap(p, MXOP__MBOX_BYTES);
        goto err_fds;
    }
    close(memfd);
    mxop__region_prefault(p, MXOP__MBOX_BYTES, 1);
    m->sh = sh;
    m->tx = &sh->rep;
    m->rx = &sh->req;
    m->bell_rx = bell_req;
    m->bell_tx = bell_rep;
    m->rx_seen = atomic_load_explicit(&m->rx->seq, memory_order_acquire) & ~1u;
    m->tx_seq = atomic_load_explicit(&m->tx->seq, memory_order_relaxed) & ~1u;
    return 0;

err_fds:
    close(memfd);
    close(bell_req);
    close(bell_rep);
    return rc;
}

void mxop__mbox_close(mxop__mbox_t *m)
{
    /* The bells are only ever held together with the mapping, so a zeroed
     * mailbox (never opened) closes nothing. */
    if (m->sh != NULL) {
        mxop__region_unmap(m->sh, MXOP__MBOX_BYTES);
        if (m->bell_tx >= 0)
            close(m->bell_tx);
        if (m->bell_rx >= 0)
            close(m->bell_rx);
    }
    mbox_init(m);
}

static void ring(int bell)
{
    uint64_t one = 1;
    /* EAGAIN means the counter is saturated: the peer is woken anyway. */
    while (write(bell, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

uint8_t *mxop__mbox_put_begin(mxop__mbox_t *m)
{
    mxop__mbox_slot_t *s = m->tx;
    atomic_store_explicit(&s->seq, m->tx_seq + 1, memory_order_relaxed);
    /*
     * The odd seq is visible before any byte of the frame changes: a
     * reader that copied bytes of this frame then finds seq moved (its
     * acquire fence after the copy pairs with this release fence).
     */
    atomic_thread_fence(memory_order_release);
    return s->data + MXOP__FRAME_HDR;
}

void mxop__mbox_put_end(mxop__mbox_t *m, uint16_t kind, size_t payload, int64_t now_ns)
{
    mxop__mbox_slot_t *s = m->tx;
    uint32_t seq = m->tx_seq;

    mxop__frame_hdr_encode(s->data, kind, (uint32_t)payload);
    atomic_store_explicit(&s->len, (uint32_t)(MXOP__FRAME_HDR + payload), memory_order_relaxed);
    atomic_store_explicit(&s->cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store_explicit(&s->put_ns, now_ns, memory_order_relaxed);
    m->tx_seq = seq + 2;
    /*
     * The even seq, sequentially consistent (its release half makes the
     * frame visible before it), then the sleeping flag, sequentially
     * consistent: with the reader's store of `sleeping` before its load of
     * seq (mxop__mbox_sleep_begin), one of the two sees the other, so
     * either the reader finds the frame or this side rings the bell.  This
     * store-then-load is the one full fence of a put (an xchg on x86).
     */
    atomic_store_explicit(&s->seq, seq + 2, memory_order_seq_cst);
    uint32_t why = atomic_load_explicit(&s->sleeping, memory_order_seq_cst);
    m->peer_crowded = why == MXOP__MBOX_CROWDED;
    if (why != MXOP__MBOX_AWAKE)
        ring(m->bell_tx);
}

void mxop__mbox_put(mxop__mbox_t *m, uint16_t kind, const ProtobufCMessage *msg, size_t payload)
{
    protobuf_c_message_pack(msg, mxop__mbox_put_begin(m));
    mxop__mbox_put_end(m, kind, payload, mxop__now_ns());
}

int mxop__mbox_take(mxop__mbox_t *m, uint8_t *buf, size_t cap, uint16_t *kind, uint32_t *len)
{
    mxop__mbox_slot_t *s = m->rx;
    if (s == NULL)
        return 0; /* closed: nothing will ever come */
    for (int tries = 0; tries < TAKE_TRIES; tries++) {
        uint32_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (s1 == m->rx_seen)
            return 0;
        if (s1 & 1u) {
            cpu_relax();
            continue;
        }
        uint32_t n = atomic_load_explicit(&s->len, memory_order_relaxed);
        int bad = n < MXOP__FRAME_HDR || n > MXOP__MBOX_SLOT_BYTES || n > cap;
        if (!bad)
            memcpy(buf, s->data, n);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) != s1)
            continue; /* torn: the peer wrote while we copied */
        m->rx_seen = s1;
        if (bad)
            return MXOP_EPROTOCOL;
        int rc = mxop__frame_hdr_decode(buf, kind, len);
        if (rc != 0)
            return rc;
        if (*len != n - MXOP__FRAME_HDR)
            return MXOP_EPROTOCOL;
        return 1;
    }
    /*
     * The writer is still (or again) writing: it may have been preempted in
     * the middle of its copy.  That is not a bad frame; say "not yet" and
     * let the caller wait for the bell, which the writer rings once the
     * frame is published (mxop__mbox_ready ignores a slot being written).
     */
    return 0;
}

static int64_t spin_budget(const mxop__mbox_t *m, int64_t cap)
{
    int64_t avg = m->wait_avg_ns;
    if (avg <= MXOP__MBOX_SPIN_NS / 2)
        return MXOP__MBOX_SPIN_NS;
    if (avg <= cap / 2)
        return 2 * avg;
    if (avg <= cap)
        return cap;
    /* Long waits: spin less (and burn less), for the occasional quick answer. */
    int64_t b = (int64_t)MXOP__MBOX_SPIN_NS * MXOP__MBOX_SPIN_NS / avg;
    return b < MXOP__MBOX_SPIN_MIN_NS ? MXOP__MBOX_SPIN_MIN_NS : b;
}

/*
 * Whether to spin before this wait: not when recent spins rarely
 * succeeded, except for a probe now and then, so that the side learns when
 * the peer answers quickly again.
 */
int mxop__mbox_spin_pays(mxop__mbox_t *m)
{
    if (m->hit_rate < MXOP__MBOX_HIT_MIN && ++m->unspun < MXOP__MBOX_PROBE_EVERY) {
        m->n_skip_rare++;
        return 0;
    }
    m->unspun = 0;
    return 1;
}

static void note_spin(mxop__mbox_t *m, int hit)
{
    m->n_spins++;
    m->n_spin_hits += (uint64_t)hit;
    m->hit_rate += ((hit ? MXOP__MBOX_HIT_ONE : 0) - m->hit_rate) / 16;
}

int mxop__mbox_spin(mxop__mbox_t *m, int64_t cap_ns, int64_t *spent_ns)
{
    *spent_ns = 0;
    if (cap_ns <= 0 || !mxop__mbox_spin_pays(m))
        return mxop__mbox_ready(m);
    return mxop__mbox_spin_now(m, cap_ns, spent_ns);
}

int mxop__mbox_spin_now(mxop__mbox_t *m, int64_t cap_ns, int64_t *spent_ns)
{
    return mxop__mbox_spin_since(m, cap_ns, mxop__now_ns(), spent_ns);
}

int mxop__mbox_spin_since(mxop__mbox_t *m, int64_t cap_ns, int64_t start, int64_t *spent_ns)
{
    int64_t budget = spin_budget(m, cap_ns), now = start;
    *spent_ns = 0;
    if (cap_ns <= 0)
        return mxop__mbox_ready(m);
    /*
     * Two processes on one CPU: the peer can only answer when this side
     * lets it run, so yield at each look instead of spinning (sched_getcpu
     * is a read of the rseq area, no syscall).  Past half the budget, yield
     * anyway, in case the peer moved here since it last wrote.
     *
     * Not done, as measured: yielding at each look
     * whenever the machine has more runnable threads than CPUs.  It helped
     * when only mxop's own pairs crowded the CPUs, but with other work on
     * the machine each yield handed a whole time slice to that work, and
     * the calls fell to the socket path's rate.  Spins that fail, which is
     * what crowding leads to, are handled by spin_pays instead.
     */
    int me = sched_getcpu();
    int peer = atomic_load_explicit(&m->rx->cpu, memory_order_relaxed);
    int yield_each = me >= 0 && me == peer;
    /*
     * The clock is read once per SPIN_LOOKS looks, after each batch: a
     * quick answer (the common case) costs no clock read in the loop, and
     * the budget, tens of microseconds, is kept to within a batch of
     * looks.  *spent_ns is as coarse.
     */
    for (;;) {
        for (int i = 0; i < SPIN_LOOKS; i++) {
            if (mxop__mbox_ready(m)) {
                *spent_ns = now - start;
                note_spin(m, 1);
                return 1;
            }
            cpu_relax();
        }
        now = mxop__now_ns();
        if (now - start >= budget)
            break;
        if (yield_each || now - start > budget / 2)
            sched_yield();
    }
    *spent_ns = now - start;
    note_spin(m, 0);
    return 0;
}

int mxop__mbox_sleep_begin(mxop__mbox_t *m, uint32_t why)
{
    if (m->rx == NULL)
        return 0;
    atomic_store_explicit(&m->rx->sleeping, why, memory_order_seq_cst);
    uint32_t s = atomic_load_explicit(&m->rx->seq, memory_order_seq_cst);
    if (s != m->rx_seen && (s & 1u) == 0) {
        atomic_store_explicit(&m->rx->sleeping, 0, memory_order_relaxed);
        return 1;
    }
    return 0;
}

void mxop__mbox_sleep_end(mxop__mbox_t *m, int bell_rang)
{
    if (m->rx == NULL)
        return;
    atomic_store_explicit(&m->rx->sleeping, 0, memory_order_relaxed);
    if (bell_rang) {
        uint64_t v;
        while (read(m->bell_rx, &v, sizeof(v)) < 0 && errno == EINTR)
            ;
    }
}

void mxop__mbox_note_wait(mxop__mbox_t *m, int64_t since_ns)
{
    mxop__mbox_note_wait_at(m, since_ns, mxop__now_ns());
}

void mxop__mbox_note_wait_at(mxop__mbox_t *m, int64_t since_ns, int64_t now)
{
    if (m->rx == NULL)
        return; /* closed under the wait: there is no peer left to learn about */
    int64_t put = atomic_load_explicit(&m->rx->put_ns, memory_order_relaxed);
    int64_t waited_ns = put >= since_ns && put <= now ? put - since_ns : now - since_ns;
    if (waited_ns > WAIT_SAMPLE_MAX_NS)
        waited_ns = WAIT_SAMPLE_MAX_NS;
    if (waited_ns < 0)
        waited_ns = 0;
    /* An average over about the last eight waits. */
    m->wait_avg_ns += (waited_ns - m->wait_avg_ns) / 8;
}
