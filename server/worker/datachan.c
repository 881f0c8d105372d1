/*
 * server/worker/datachan.c - the worker's data channel: calls from the
 * client over the socket (fd 4) and, once the client attached one, through
 * the shared-memory mailbox (shm/mailbox.h).
 *
 * The waiting is done here, for both channels of the worker: the mailbox is
 * spun on for a short adaptive time after each call, then the worker
 * sleeps in one poll() on the supervisor socket, the data socket and the
 * mailbox's bell.  So a supervisor request or a client that went away is
 * seen at once, and an idle worker sleeps in the kernel and burns nothing.
 * The supervisor comes first whenever it has something: after a restart,
 * the replayed loads and maps are served before any call.
 *
 * A call from the socket costs poll + recvmsg (header and payload at once)
 * + sendmsg; a call through the mailbox costs no syscall at all while the
 * client keeps the worker busy.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/client.h"
#include "wire/frame.h"
#include "shm/status_page.h"
#include "server/worker/blas.h"
#include "server/worker/pid1.h"
#include "server/worker/prefill.h"
#include "server/worker/worker.h"
#include "shm/worker_exit.h"
#include "shm/call_record.h"
#include "shm/mailbox.h"
#include "shm/placement.h"
#include "wire/rxbuf.h"
#include "wire/sockspin.h"

/*
 * Once a call has begun to arrive on the socket, the rest must follow
 * within this time; a client that stalls mid-frame would otherwise keep the
 * supervisor waiting.
 */
#define FRAME_TIMEOUT_MS 10000

/* While calls keep coming through the mailbox, the sockets are still
 * looked at this often (a supervisor request, a hang-up). */
#define SOCKET_CHECK_NS (1000 * 1000)

static int sup_fd = -1;
static int data_fd = -1;
static int data_open;
static mxop__pbarena_t *arena;
static mxop__rxbuf_t rx;
static mxop__framebuf_t tx;
static mxop__mbox_t mbox;
static uint8_t *mbox_buf; /* a frame copied out of the mailbox */
static int64_t last_socket_check;
static int64_t idle_since; /* when the last call was answered: waits are measured from here */
static mxop__sockspin_t sock_spin; /* the socket path's busy-poll before poll() blocks */
static int64_t call_avg_ns;        /* mailbox calls' time in the worker, over about the last 8 */
static int calls_long;             /* call_avg_ns is over MXOP__PLACEMENT_LONG_NS */
static int64_t replied_ns;         /* when the last result was published in the mailbox */
static mxop__call_rec_view_t rec_view; /* a call record decoded (shm/call_record.h) */

int mxop__data_init(int sup, int data, mxop__pbarena_t *a)
{
    sup_fd = sup;
    data_fd = data;
    data_open = 1;
    mxop__transport_track(MXOP__TRANSPORT_SUP, sup, "supervisor channel");
    mxop__transport_track(MXOP__TRANSPORT_DATA, data, "data channel");
    arena = a;
    mxop__mbox_close(&mbox);
    mxop__sockspin_init(&sock_spin, MXOP__SOCKSPIN_WORKER);
    mxop__placement_init();
    if (mxop__rxbuf_init(&rx, 64 * 1024) != 0)
        return MXOP_ENOMEM;
    if (mxop__framebuf_reserve(&tx, 64 * 1024) != 0)
        return MXOP_ENOMEM;
    mbox_buf = malloc(MXOP__MBOX_SLOT_BYTES);
    return mbox_buf == NULL ? MXOP_ENOMEM : 0;
}

void mxop__data_free(void)
{
    mxop__prefill_watch(NULL, NULL);
    mxop__mbox_close(&mbox);
    mxop__rxbuf_free(&rx);
    mxop__framebuf_free(&tx);
    free(mbox_buf);
    mbox_buf = NULL;
}

/* The mailbox goes; its bells are no longer the transport's. */
static void close_mbox(void)
{
    mxop__transport_untrack(MXOP__TRANSPORT_BELL_RX);
    mxop__transport_untrack(MXOP__TRANSPORT_BELL_TX);
    /* The background prefill stops reading the client's progress words before they go. */
    mxop__prefill_watch(NULL, NULL);
    mxop__mbox_close(&mbox);
}

/*
 * The client is gone or the stream lost its framing: nothing more is read.
 * The channel is not shut down: under strict the filter refuses shutdown()
 * of fd 4 to everyone in the worker (a library could otherwise cut its own
 * session's channel), and none is needed - a client that hung up is gone,
 * and a channel without framing ends with the worker's _exit, which closes
 * the last descriptor of this end (the daemon keeps none).
 */
static void close_data(void)
{
    data_open = 0;
    close_mbox();
    mxop__rxbuf_reset(&rx);
}

/*
 * Sends a result: through the mailbox when the call came that way and the
 * result fits a slot, else on the socket (where the client also looks).
 */
static void reply(Mxop__CallResult *res, int via_mbox)
{
    if (via_mbox && mbox.sh != NULL) {
        /* A result without inferred dtypes or shapes goes as a record (shm/call_record.h). */
        size_t rec = mxop__result_rec_size(res);
        size_t n = rec != 0 ? rec : protobuf_c_message_get_packed_size(&res->base);
        if (mxop__mbox_fits(n)) {
            mxop__mbox_say_busy(&mbox, mxop__blas_take_threads_used());
            uint8_t *at = mxop__mbox_put_begin(&mbox);
            if (rec != 0)
                mxop__result_rec_encode(at, res, rec);
            else
                protobuf_c_message_pack(&res->base, at);
            /* One clock read stamps the result and ends the call's time (serve_mbox). */
            replied_ns = mxop__now_ns();
            mxop__mbox_put_end(&mbox, rec != 0 ? MXOP__KIND_RESULT_REC : MXOP__KIND_CALL_RESULT, n,
                               replied_ns);
            return;
        }
    }
    /* A client that is gone is noticed by the next poll; the daemon ends this worker. */
    if (data_open &&
        mxop__frame_send(data_fd, &tx, MXOP__KIND_CALL_RESULT, &res->base, NULL, 0) != 0)
        close_data();
}

static void reply_fail(int code, const char *message, int via_mbox)
{
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    res.status = code;
    res.message = (char *)message;
    reply(&res, via_mbox);
}

static void close_fds(int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}

static void attach(const Mxop__Call *call, int *fds, int nfds, Mxop__CallResult *res)
{
    static char m[256];
    const Mxop__AttachMailbox *am = call->attach_mailbox;
    res->id = call->id;
    res->message = "";
    if (nfds != 3) {
        close_fds(fds, nfds);
        mxop__fmt(m, sizeof(m),
                  "AttachMailbox carries %d descriptors; it needs 3 (memfd, request bell, "
                  "reply bell)",
                  nfds);
        res->status = MXOP_EINVAL;
        res->message = m;
        return;
    }
    if (am->version != MXOP__MBOX_VERSION || am->slot_bytes != MXOP__MBOX_SLOT_BYTES) {
        close_fds(fds, nfds);
        mxop__fmt(m, sizeof(m),
                  "mailbox layout version %u with slots of %u bytes; this worker has version %d "
                  "with slots of %u bytes",
                  am->version, am->slot_bytes, MXOP__MBOX_VERSION, MXOP__MBOX_SLOT_BYTES);
        res->status = MXOP_EVERSION;
        res->message = m;
        return;
    }
    /* A second mailbox replaces the first. */
    close_mbox();
    res->status = mxop__mbox_attach(&mbox, fds[0], fds[1], fds[2], am->size, m, sizeof(m));
    if (res->status != 0) {
        res->message = m;
        return;
    }
    mxop__transport_track(MXOP__TRANSPORT_BELL_RX, mbox.bell_rx, "mailbox's request bell");
    mxop__transport_track(MXOP__TRANSPORT_BELL_TX, mbox.bell_tx, "mailbox's reply bell");
    /* How far the client has reserved a region it registers (server/worker/prefill.c). */
    mxop__prefill_watch(&mbox.sh->reserve_ino, &mbox.sh->reserve_from);
}

/*
 * Serves a call record (shm/call_record.h): decoded into the Call that
 * unpacking would have made, then checked and run by the same code.  A
 * record that does not decode is answered with its id when it has one, so
 * that the client's call fails with the reason and the session goes on.
 */
static void serve_record(uint32_t len, const uint8_t *payload, int via_mbox)
{
    char m[160];
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    int rc = mxop__call_rec_decode(payload, len, &rec_view, m, sizeof(m));
    if (rc != 0) {
        res.id = rec_view.call.id;
        res.status = rc;
        res.message = m;
        reply(&res, via_mbox);
        return;
    }
    mxop__run_call(&rec_view.call, &res);
    reply(&res, via_mbox);
}

/* Decodes and serves one CALL frame; `fds` came with it (taken). */
static void serve_frame(uint16_t kind, uint32_t len, const uint8_t *payload, int via_mbox, int *fds,
                        int nfds)
{
    char m[160];
    if (kind == MXOP__KIND_CALL_REC) {
        close_fds(fds, nfds);
        serve_record(len, payload, via_mbox);
        return;
    }
    if (kind != MXOP__KIND_CALL) {
        close_fds(fds, nfds);
        mxop__fmt(m, sizeof(m), "the data channel carries CALL frames, not kind %u", kind);
        reply_fail(MXOP_EPROTOCOL, m, via_mbox);
        return;
    }
    mxop__pbarena_reset(arena);
    Mxop__Call *call = mxop__call__unpack(&arena->allocator, len, payload);
    if (call == NULL) {
        close_fds(fds, nfds);
        mxop__fmt(m, sizeof(m), "a CALL frame of %u bytes does not decode as mxop.Call", len);
        reply_fail(MXOP_EPROTOCOL, m, via_mbox);
        return;
    }
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    if (call->body_case == MXOP__CALL__BODY_ATTACH_MAILBOX) {
        /* Answered on the socket: the client waits there until the mailbox is in use. */
        attach(call, fds, nfds, &res);
        reply(&res, 0);
        return;
    }
    close_fds(fds, nfds);
    mxop__run_call(call, &res);
    reply(&res, via_mbox);
}

/* Serves the frames buffered from the socket; returns how many. */
static int serve_buffered(void)
{
    int served = 0;
    while (data_open) {
        uint16_t kind;
        uint32_t len;
        const uint8_t *payload;
        int rc = mxop__rxbuf_frame(&rx, &kind, &len, &payload);
        if (rc == 0)
            break;
        if (rc < 0) {
            char m[160];
            mxop__fmt(m, sizeof(m), "bad frame on the data channel (%s)", mxop_err_name(rc));
            reply_fail(rc == MXOP_ENOMEM ? MXOP_EPROTOCOL : rc, m, 0);
            close_data();
            /* Without framing the channel is lost: the daemon replaces us and tells the client. */
            _exit(MXOP__W_EXIT_DATA_FRAMING);
        }
        int fds[MXOP__FRAME_MAX_FDS];
        int nfds = mxop__rxbuf_take_fds(&rx, fds, MXOP__FRAME_MAX_FDS);
        serve_frame(kind, len, payload, 0, fds, nfds);
        mxop__rxbuf_consume(&rx, len);
        served++;
    }
    return served;
}

/*
 * The data socket is readable: one recvmsg takes the call whole when it is
 * all there; a call that arrives in pieces is waited for (at most
 * FRAME_TIMEOUT_MS), then served.
 */
static void serve_socket(void)
{
    int64_t end = 0;
    for (;;) {
        ssize_t n = mxop__rxbuf_fill(&rx, data_fd, 1, 0);
        if (n == 0 || n == -ECONNRESET || n == -EPIPE || n == -ENOTCONN) {
            close_data();
            return;
        }
        if (n < 0 && n != -EINTR && n != -EAGAIN) {
            close_data();
            return;
        }
        if (serve_buffered() > 0 || !data_open || rx.off == rx.end)
            return;
        /* Part of a frame is here; the rest must follow soon. */
        if (end == 0)
            end = mxop__now_ns() + (int64_t)FRAME_TIMEOUT_MS * 1000000;
        int64_t left = end - mxop__now_ns();
        struct pollfd p = {.fd = data_fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)((left + 999999) / 1000000)) == 0) {
            char m[160];
            mxop__fmt(m, sizeof(m), "a call frame began but did not complete within %d ms",
                      FRAME_TIMEOUT_MS);
            reply_fail(MXOP_EPROTOCOL, m, 0);
            close_data();
            _exit(MXOP__W_EXIT_DATA_FRAMING);
        }
    }
}

/* One look of the socket path's busy-poll: the same poll() without blocking. */
typedef struct poll_look {
    struct pollfd *pfd;
    int n; /* what the last poll() returned */
} poll_look_t;

static int look_once(void *arg)
{
    poll_look_t *l = arg;
    l->n = poll(l->pfd, 3, 0);
    if (l->n > 0)
        return 1;
    return l->n < 0 && errno != EINTR ? -1 : 0;
}

/*
 * Without a mailbox, the next call comes on the socket: poll without
 * blocking for a short while first (wire/sockspin.h: a blocked worker's
 * idle CPU costs a wake-up of tens of microseconds here).  Returns what
 * poll() returned with pfd filled in, or 0 when the caller should block.
 */
static int spin_for_socket(struct pollfd pfd[3])
{
    poll_look_t l = {pfd, 0};
    int r = mxop__sockspin_wait(&sock_spin, look_once, &l);
    if (r > 0)
        mxop__sockspin_note_wait(&sock_spin, mxop__now_ns() - idle_since);
    return r > 0 ? l.n : 0;
}

/*
 * Serves the newest frame of the mailbox, if there is one; returns 1 if so
 * (then idle_since is when the call ended).  The wait for it is told to the
 * spin policy with the same clock read that starts the call.
 */
static int serve_mbox(void)
{
    uint16_t kind;
    uint32_t len;
    int64_t t0 = mxop__now_ns();
    mxop__mbox_note_wait_at(&mbox, idle_since, t0);
    int rc = mxop__mbox_take(&mbox, mbox_buf, MXOP__MBOX_SLOT_BYTES, &kind, &len);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        /* A slot cannot lose its framing: say why and carry on. */
        char m[160];
        mxop__fmt(m, sizeof(m), "bad frame in the mailbox (%s)", mxop_err_name(rc));
        reply_fail(rc, m, 1);
        idle_since = mxop__now_ns();
        return 1;
    }
    serve_frame(kind, len, mbox_buf + MXOP__FRAME_HDR, 1, NULL, 0);
    /* The clock read of the reply ends the call (one that went on the socket reads its own). */
    int64_t end = replied_ns >= t0 ? replied_ns : mxop__now_ns();
    /*
     * Calls that are not short on average: their ops may want every CPU, or
     * the client's cache, more than the next call wants a spin.
     */
    call_avg_ns += (end - t0 - call_avg_ns) / 8;
    calls_long = call_avg_ns > MXOP__PLACEMENT_LONG_NS;
    idle_since = end;
    return 1;
}

/*
 * Where to run after answering a call (shm/placement.h), looked at after
 * every call (sched_getcpu reads the rseq area; only a move is a system
 * call):
 *  - a client that slept CROWDED (its process's calls fill the CPUs):
 *    moved to its CPU, which it leaves free through each call.  The
 *    answer's wake-up then finds the client where its worker is about to
 *    spin with a yield at each look (mxop__mbox_spin_now), instead of
 *    queued behind another worker's op while this one spins on the other
 *    CPU.  Not when the call kept more than one CPU busy (BLAS threads):
 *    then the client sleeps because of this worker's own threads;
 *  - long calls: anywhere (their ops may want every CPU, or the client's
 *    cache, more than the next call wants a spin);
 *  - short calls flow: off the client's CPU, so that both spins can
 *    succeed.  A client that lands on this CPU, as after its turn of the
 *    spin lease begins (client/lease.c), costs two context switches a call
 *    until the worker moves.
 */
static void place_after_call(void)
{
    int peer = atomic_load_explicit(&mbox.rx->cpu, memory_order_relaxed);
    int one_cpu = atomic_load_explicit(&mbox.tx->busy_cpus, memory_order_relaxed) <= 1;
    if (mbox.peer_crowded && one_cpu)
        mxop__placement_join(peer);
    else if (calls_long)
        mxop__placement_release();
    else if (peer == sched_getcpu())
        mxop__placement_keep_off(peer);
}

int mxop__data_serve(void)
{
    for (;;) {
        /* Fast path: the client sends its next call within the spin. */
        if (mbox.sh != NULL) {
            int64_t spent = 0;
            if (mxop__mbox_ready(&mbox) || mxop__mbox_spin(&mbox, MXOP__MBOX_SPIN_NS, &spent)) {
                if (!serve_mbox())
                    idle_since = mxop__now_ns(); /* a frame still being written: wait again */
                int64_t now = idle_since;
                place_after_call();
                if (now - last_socket_check < SOCKET_CHECK_NS)
                    continue;
                last_socket_check = now;
                struct pollfd p = {.fd = sup_fd, .events = POLLIN};
                if (poll(&p, 1, 0) > 0)
                    return MXOP__W_SUP_READY;
                continue;
            }
        }

        struct pollfd pfd[3] = {{sup_fd, POLLIN, 0}, {data_fd, POLLIN, 0}, {-1, POLLIN, 0}};
        int has_mbox = mbox.sh != NULL;
        /*
         * Before sleeping, the bells must still be the bells (transport.c): a
         * replaced request bell would never ring (or always), a replaced reply
         * bell would have rung into nothing.  Only here, on the slow path.
         */
        if (has_mbox)
            mxop__transport_check(MXOP__TRANSPORT_BELLS, "by the last call or a thread of an op");
        if (has_mbox) {
            pfd[2].fd = mbox.bell_rx;
            if (mxop__mbox_sleep_begin(&mbox, MXOP__MBOX_SLEEPING))
                continue;
        }
        /* A closed data channel is not polled (it would always be ready). */
        if (!data_open)
            pfd[1].fd = -1;
        /* No call runs now: the orphans of the libraries' processes are reaped (pid1.c). */
        mxop__pid1_reap();
        int n = has_mbox || !data_open ? 0 : spin_for_socket(pfd);
        if (n == 0) {
            n = poll(pfd, 3, -1);
            if (!has_mbox && data_open && n > 0)
                mxop__sockspin_note_wait(&sock_spin, mxop__now_ns() - idle_since);
        }
        if (has_mbox)
            mxop__mbox_sleep_end(&mbox, n > 0 && (pfd[2].revents & POLLIN));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return MXOP_EIO;
        }
        last_socket_check = mxop__now_ns();
        /* Supervisor first: after a restart, replayed loads and maps precede any call. */
        if (pfd[0].revents != 0)
            return MXOP__W_SUP_READY;
        if (data_open && pfd[1].revents != 0) {
            if (pfd[1].revents & POLLNVAL)
                close_data();
            else
                serve_socket();
            idle_since = mxop__now_ns();
        }
        /* A mailbox frame (the bell rang) is taken at the top of the loop. */
    }
}
