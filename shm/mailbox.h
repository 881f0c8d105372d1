/*
 * shm/mailbox.h - the shared-memory data path of one session.
 *
 * A mailbox is one small memfd shared by a client and its worker, beside
 * their data socket.  It holds two slots, each the bytes of one frame
 * (header and payload, as on the socket; the common calls and results as
 * records of fixed layout, shm/call_record.h): the request slot (client to
 * worker) and the reply slot (worker to client).  One call is in flight at
 * a time, so a slot never holds more than one frame that matters.
 *
 * Publishing is a seqlock: the writer makes the slot's seq odd, writes the
 * frame, and makes seq even again (+2 per frame); the reader copies the
 * frame out and checks seq did not move while it copied.  The reader never
 * decodes shared memory in place, so a peer that scribbles on the slot can
 * only produce a frame that fails to decode.
 *
 * Waking: the reader first spins on seq for a bounded, adaptive time (the
 * peer usually answers within a few microseconds), yielding the CPU while
 * it spins if the peer last ran on the same CPU (spinning there would only
 * keep the peer from running).  It does not spin at all when its recent
 * spins mostly ended without a frame, as they do when the peer waits for a
 * CPU (more runnable processes than CPUs) or is busy with a long op; then
 * it tries one spin in MXOP__MBOX_PROBE_EVERY waits, to notice when
 * spinning pays again.  Then it raises the
 * slot's `sleeping` flag and sleeps in poll() on its bell (an eventfd)
 * together with its sockets, so that a dead peer (POLLHUP) or a supervisor
 * request is seen at once and an idle side burns nothing.  A writer that
 * finds the flag raised after publishing rings the bell.  Flag and seq are
 * ordered by full fences on both sides (a Dekker pair), so a frame is never
 * published unseen by a reader that went to sleep.
 *
 * Frames that do not fit a slot travel on the socket, which is always
 * there; see docs/protocol.md.
 */
#ifndef MXOP_SHM_MAILBOX_H
#define MXOP_SHM_MAILBOX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#define MXOP__MBOX_MAGIC 0x584F424Du /* "MBOX", little-endian */
/* 2: a slot may also hold the call and result records of shm/call_record.h. */
#define MXOP__MBOX_VERSION 2
/* The most frame bytes (header included) one slot holds. */
#define MXOP__MBOX_SLOT_BYTES (64u * 1024)

/*
 * Spinning: the budget follows the waits a spin can catch.  It is at least
 * SPIN_NS, more than twice a wake-up here (20-30 us): with a budget close
 * to the wake-up time, one side that slept makes the other miss its spin
 * too, and the pair can stay in that slow rhythm for thousands of calls.
 * Up to the caller's cap (mxop__mbox_spin), it is twice the recent average
 * wait: a client waiting for an op of tens of microseconds (a relu of
 * 1 MiB) then does not go to sleep just before the result comes and pay
 * the wake-up of a halted CPU (50-100 us on this VM, more than the op).
 * Past the cap the wake-up is a small part of the wait, and the budget
 * falls towards SPIN_MIN_NS as waits grow, catching only quick answers.
 * The worker, waiting for the engine's next call, caps at SPIN_NS: the
 * engine's pauses between calls are its own business.  The client caps at
 * SPIN_LONG_NS while its process's calls in flight leave a CPU for each
 * worker, and does not spin at all beyond that (client/spincap.c): a spin
 * beside busy workers takes their CPU.
 */
#define MXOP__MBOX_SPIN_NS 50000
#define MXOP__MBOX_SPIN_LONG_NS 250000
#define MXOP__MBOX_SPIN_MIN_NS 2000

/*
 * Spin successes are averaged over about the last 16 spins, in 1/1024ths;
 * below MXOP__MBOX_HIT_MIN (a quarter) a spin costs more than it saves, and
 * the side sleeps at once, except for one probing spin every
 * MXOP__MBOX_PROBE_EVERY waits.
 */
#define MXOP__MBOX_HIT_ONE 1024
#define MXOP__MBOX_HIT_MIN 256
#define MXOP__MBOX_PROBE_EVERY 16

/*
 * The `sleeping` word of a slot: whether its reader sleeps on its bell,
 * and why.  CROWDED: it went to sleep without spinning because its
 * process's calls in flight fill the CPUs (client/spincap.c); the worker
 * then runs on the CPU its client leaves free (shm/placement.h).  Any
 * other non-zero value reads as SLEEPING.
 */
#define MXOP__MBOX_AWAKE 0u
#define MXOP__MBOX_SLEEPING 1u
#define MXOP__MBOX_CROWDED 2u

typedef struct mxop__mbox_slot {
    _Atomic uint32_t seq;      /* even: stable; odd: being written */
    _Atomic uint32_t sleeping; /* MXOP__MBOX_AWAKE or why the reader sleeps on its bell */
    _Atomic uint32_t len;      /* frame bytes in data[] */
    _Atomic int32_t cpu;       /* the CPU the writer ran on when it last wrote (-1: unknown) */
    _Atomic int64_t put_ns;    /* CLOCK_MONOTONIC when the writer published its last frame */
    /* The CPUs the work behind the writer's last frame kept busy (0: not said). */
    _Atomic uint32_t busy_cpus;
    /*
     * The frame begins in the control words' cache line, at byte 28: a
     * result record, or a call record without tensors (36 bytes with their
     * frame header, shm/call_record.h), fills the rest of it exactly, so
     * the reader that saw seq move has the frame with the same cache line
     * instead of waiting for a second one from the writer's CPU.
     */
    uint8_t data[MXOP__MBOX_SLOT_BYTES];
    uint8_t pad_[36]; /* the next slot's control words get their own cache line */
} mxop__mbox_slot_t;

/* The layout of the shared memfd; the client initialises the header. */
typedef struct mxop__mbox_shared {
    uint32_t magic;
    uint32_t version;
    uint32_t slot_bytes;
    uint32_t pad0_;
    /*
     * How far the client has reserved the region it is registering
     * (client/regions.c): the memfd's inode number, and the offset below
     * which its pages are not reserved yet (it falls to 0).  Written by the
     * client only; the worker's background prefill faults in what is
     * reserved while the rest is being reserved (server/worker/prefill.c).
     * A hint: a wrong value can only make the worker fault pages itself.
     */
    _Atomic uint64_t reserve_ino;
    _Atomic uint64_t reserve_from;
    uint32_t pad_[8];
    mxop__mbox_slot_t req; /* client -> worker: CALL frames */
    mxop__mbox_slot_t rep; /* worker -> client: CALL_RESULT frames */
} mxop__mbox_shared_t;

/* One side's view of a mailbox. */
typedef struct mxop__mbox {
    mxop__mbox_shared_t *sh; /* the shared mapping, or NULL */
    mxop__mbox_slot_t *tx;   /* the slot this side writes */
    mxop__mbox_slot_t *rx;   /* the slot this side reads */
    int bell_tx;             /* eventfd that wakes the peer */
    int bell_rx;             /* eventfd this side sleeps on */
    uint32_t rx_seen;        /* seq of the last frame taken from rx */
    uint32_t tx_seq;         /* seq of the last frame put (kept here, not trusted from the peer) */
    int64_t wait_avg_ns;     /* moving average of recent waits, for the spin budget */
    int32_t hit_rate;        /* moving average of spin successes, in 1/MXOP__MBOX_HIT_ONE */
    uint32_t unspun;         /* waits since the last spin, when spins stopped paying */
    int peer_crowded;        /* 1: the peer slept CROWDED when the last put woke it */
    /* What the policy did, for tests and the bench (never reset). */
    uint64_t n_spins, n_spin_hits, n_skip_rare;
} mxop__mbox_t;

/* The size of the memfd. */
#define MXOP__MBOX_BYTES sizeof(mxop__mbox_shared_t)

/**
 * Client side: creates a mailbox (a sealed memfd, mapped and pre-faulted
 * here, and two eventfds).  fds[0..3) get the descriptors to pass to the
 * worker with AttachMailbox: the memfd (taken by the caller, who closes it
 * once sent), the request bell and the reply bell (borrowed: they stay the
 * mailbox's).  Returns 0 or MXOP_ESHM with a reason in msg.
 */
int mxop__mbox_create(mxop__mbox_t *m, int fds[3], char *msg, size_t msglen);

/**
 * Worker side: maps the mailbox memfd `memfd` of `size` bytes and keeps the
 * bells.  All three descriptors are taken (closed here on failure; the
 * memfd also on success, the mapping stays).  Checks the size, the seals,
 * the header.  Returns 0 or MXOP_EINVAL / MXOP_ESHM with the reason in msg.
 */
int mxop__mbox_attach(mxop__mbox_t *m, int memfd, int bell_req, int bell_rep, uint64_t size,
                      char *msg, size_t msglen);

/**
 * Unmaps and closes everything; accepts a zeroed mailbox (never opened).
 * A closed mailbox is zeroed again: mxop__mbox_take, the sleep halves and
 * mxop__mbox_note_wait do nothing on it (take says "no frame"), so that a
 * reader whose mailbox was dropped under it (its peer wrote garbage, or
 * died) cannot fault on it; the other calls need an open one.
 */
void mxop__mbox_close(mxop__mbox_t *m);

/** Whether a frame whose payload packs to `payload` bytes fits a slot. */
static inline int mxop__mbox_fits(size_t payload)
{
    return payload <= MXOP__MBOX_SLOT_BYTES - 12;
}

/**
 * Packs `msg` as a frame of `kind` (its payload `payload` bytes, which must
 * fit) into the tx slot, publishes it and rings the peer's bell if it
 * sleeps.  Never blocks.
 */
void mxop__mbox_put(mxop__mbox_t *m, uint16_t kind, const ProtobufCMessage *msg, size_t payload);

/**
 * The two halves of mxop__mbox_put, for a writer that writes its payload
 * straight into the slot (shm/call_record.h): put_begin marks the tx slot
 * as being written and returns where the payload goes (payload bytes
 * after the frame header, at most MXOP__MBOX_SLOT_BYTES - 12); put_end
 * writes the header for `kind` and `payload` bytes, stamps put_ns with
 * now_ns (the writer's CLOCK_MONOTONIC, read at most a few microseconds
 * earlier: a hint for the reader's spin), publishes the frame and rings
 * the peer's bell if it sleeps.  Never blocks.
 */
uint8_t *mxop__mbox_put_begin(mxop__mbox_t *m);
void mxop__mbox_put_end(mxop__mbox_t *m, uint16_t kind, size_t payload, int64_t now_ns);

/**
 * Says, with the next put, how many CPUs the work behind that frame kept
 * busy (the worker: its op's BLAS threads).  A hint for the peer's spin
 * (client/spincap.c); whatever a writer says costs only its own peer's spin.
 */
static inline void mxop__mbox_say_busy(mxop__mbox_t *m, int cpus)
{
    /* The reader clamps whatever it finds (mxop__mbox_peer_busy). */
    atomic_store_explicit(&m->tx->busy_cpus, cpus > 0 ? (uint32_t)cpus : 0u, memory_order_relaxed);
}

/** The peer's last word on the CPUs its work kept busy: 1 to 64 (1 when not said). */
static inline int mxop__mbox_peer_busy(const mxop__mbox_t *m)
{
    uint32_t n = atomic_load_explicit(&m->rx->busy_cpus, memory_order_relaxed);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/** Whether a frame newer than the last one taken is in the rx slot (no copy). */
static inline int mxop__mbox_ready(const mxop__mbox_t *m)
{
    uint32_t s = atomic_load_explicit(&m->rx->seq, memory_order_acquire);
    return s != m->rx_seen && (s & 1u) == 0;
}

/**
 * Copies the newest frame of the rx slot into buf[cap] (cap at least
 * MXOP__MBOX_SLOT_BYTES) and decodes its header.  Returns 1 with *kind,
 * *len (payload bytes, at buf + 12); 0 when there is no new frame (or one is still being written);
 * MXOP_EPROTOCOL / MXOP_EVERSION / MXOP_EFRAME_TOO_LARGE for a frame that is
 * not one (the frame is consumed).
 */
int mxop__mbox_take(mxop__mbox_t *m, uint8_t *buf, size_t cap, uint16_t *kind, uint32_t *len);

/**
 * Spins until a new frame is ready or this side's adaptive budget runs out;
 * does not spin at all when spinning cannot pay (see the top of this file).
 * cap_ns (MXOP__MBOX_SPIN_NS or MXOP__MBOX_SPIN_LONG_NS) bounds how far the
 * budget follows long waits; 0 means no spin.  Returns 1 (ready) or 0.  *spent_ns gets the
 * time spun.
 */
int mxop__mbox_spin(mxop__mbox_t *m, int64_t cap_ns, int64_t *spent_ns);

/**
 * The two halves of mxop__mbox_spin, for a caller that does something
 * between deciding and spinning (the client takes its spin lease,
 * client/lease.c).  spin_pays: whether this wait should spin (counts a
 * probe when it says yes while spins rarely succeed).  spin_now: spins as
 * mxop__mbox_spin does once it decided to.
 */
int mxop__mbox_spin_pays(mxop__mbox_t *m);
int mxop__mbox_spin_now(mxop__mbox_t *m, int64_t cap_ns, int64_t *spent_ns);

/**
 * mxop__mbox_spin_now for a caller that knows when its wait began
 * (start_ns, CLOCK_MONOTONIC; the client: when it published its call), so
 * that the spin reads no clock before its first looks and its budget
 * counts from the start of the wait.
 */
int mxop__mbox_spin_since(mxop__mbox_t *m, int64_t cap_ns, int64_t start_ns, int64_t *spent_ns);

/**
 * Raises the sleeping flag before a poll() on bell_rx: `why` is
 * MXOP__MBOX_SLEEPING, or MXOP__MBOX_CROWDED for a reader that sleeps
 * because its calls in flight fill the CPUs.  Returns 1 if a frame arrived
 * meanwhile (the flag is lowered again: do not sleep).
 */
int mxop__mbox_sleep_begin(mxop__mbox_t *m, uint32_t why);

/** Lowers the flag after the poll; drains the bell when poll said it rang. */
void mxop__mbox_sleep_end(mxop__mbox_t *m, int bell_rang);

/**
 * Tells the spin policy about a wait that began at since_ns and has just
 * taken its frame: how long the peer took to answer.  That is the frame's
 * publication time (put_ns) less since_ns, not the whole wait, which after
 * a sleep also holds the wake-up: a budget that followed wake-ups would
 * grow past the cap and collapse, and spins would never catch the answer
 * again.  The peer writes put_ns, so it is bounded by the wait itself: a
 * peer that lies can only make this side spin up to its cap.
 */
void mxop__mbox_note_wait(mxop__mbox_t *m, int64_t since_ns);

/** mxop__mbox_note_wait with the time now (CLOCK_MONOTONIC) given by a caller that has it. */
void mxop__mbox_note_wait_at(mxop__mbox_t *m, int64_t since_ns, int64_t now_ns);

#endif /* MXOP_SHM_MAILBOX_H */
