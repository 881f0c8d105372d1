/*
 * tests/fuzz/fuzz_client.c - libFuzzer target: the client's side of the
 * data channel and the mailbox, with the worker's answers as the input.
 *
 * Each input is played by a hostile worker against a real libmxop client
 * (mxop__client_new, the client mxop_connect makes before it connects):
 * the bytes the worker writes on its data channel (a socketpair), what it
 * writes into the mailbox's reply slot before each call (the very mapping
 * the client reads), and the replacement's channel the daemon hands over
 * if the client asks for one or the channel closes.  The calls are the
 * public ones an engine makes (mxop_forward with a plain and a dynamic-shape
 * op, mxop_backward, mxop_infer, mxop_state_create, mxop_state_destroy),
 * so every path that decodes worker output runs as in an engine: the
 * socket's frames, the slot's seqlock, length and header, the result's
 * id, status and message, inferred and dynamic shapes, state ids, the
 * garbage and death handling, and the next call after each.  Any input
 * must end in results or named errors, never in a fault, a leak, or a wait
 * (each channel is shut after its bytes, so every call ends).
 *
 * The input (little-endian; missing bytes read as 0):
 *
 *     u8  flags      bit 0: the shm data path (a mailbox; ids then start at 2,
 *                    the attach taking 1); else the socket path (ids from 1)
 *     u8  ev_call    the call id the daemon's WorkerEvent names
 *     u8  ev_code    the event's code: 0 none, else -(1000 + ev_code)
 *     u8  ev_flags   bit 0: restarted (hands over channel B); bit 1: idle_cpu
 *     u8  n, n bytes the event's message
 *     u16 n, n bytes what the worker writes on channel A (the first)
 *     u16 n, n bytes what the replacement writes on channel B
 *     u8  calls      how many calls follow (at most 4)
 *     per call:
 *         u8  api    % 6: forward, forward of the dynamic op, backward,
 *                    infer, state_create, state_destroy
 *         u8  mbox   what the worker writes into the reply slot first:
 *                    bit 0 a frame (u16 n, n bytes; published with seq + 2),
 *                    bit 1 a raw seq (u32), bit 2 a raw length (u32),
 *                    bit 3 put_ns (u64), bit 4 busy_cpus and cpu (u32, u32)
 *
 * tests/fuzz/seeds.c writes seeds in this layout (tests/fuzz/corpus/client/).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "control.pb-c.h"
#include "wire/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor_t;

static uint64_t take(cursor_t *c, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        if (c->left > 0) {
            v |= (uint64_t)c->p[0] << (8 * i);
            c->p++;
            c->left--;
        }
    }
    return v;
}

/* Up to n bytes of the input (fewer where it ends); *got says how many. */
static const uint8_t *take_bytes(cursor_t *c, size_t n, size_t *got)
{
    const uint8_t *p = c->p;
    *got = n < c->left ? n : c->left;
    c->p += *got;
    c->left -= *got;
    return p;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* The session's ops, as the daemon would list them. */
static int give_ops(mxop_client_t *c)
{
    Mxop__OpInfo plain = MXOP__OP_INFO__INIT, dyn = MXOP__OP_INFO__INIT,
                 state = MXOP__OP_INFO__INIT;
    plain.index = 0;
    plain.name = "plain";
    plain.library = "fuzz.so";
    plain.num_inputs = 1;
    plain.num_outputs = 1;
    plain.has_backward = 1;
    dyn = plain;
    dyn.index = 1;
    dyn.name = "dyn";
    dyn.dynamic_outputs = 1;
    state = plain;
    state.index = 2;
    state.name = "state";
    state.stateful = 1;
    Mxop__OpInfo *ops[] = {&plain, &dyn, &state};
    Mxop__OpList list = MXOP__OP_LIST__INIT;
    list.ops = ops;
    list.n_ops = 3;
    return mxop__ops_update(c, &list);
}

/* Region 1: the engine's memory the arrays live in (the client's table only). */
static uint8_t region_mem[64 * 1024] __attribute__((aligned(64)));

static int give_region(mxop_client_t *c)
{
    if (mxop__region_reserve(c) != 0)
        return -1;
    mxop__region_t *e = &c->regions[c->nregions++];
    memset(e, 0, sizeof *e);
    e->id = 1;
    e->fd = -1;
    e->base = region_mem;
    e->size = sizeof region_mem;
    e->kind = MXOP__REGION_USER;
    return 0;
}

/* A CallResult frame {id, status 0} on fd (the worker's answer to the attach). */
static void send_ok(int fd, uint64_t id)
{
    Mxop__CallResult r = MXOP__CALL_RESULT__INIT;
    r.id = id;
    mxop__framebuf_t fb = {0};
    mxop__frame_send(fd, &fb, MXOP__KIND_CALL_RESULT, &r.base, NULL, 0);
    mxop__framebuf_free(&fb);
}

/* What the daemon says on the control socket: the event, then the answer to ReplaceWorker. */
static void send_daemon(int fd, cursor_t *in, int b_client)
{
    uint8_t ev_call = (uint8_t)take(in, 1), ev_code = (uint8_t)take(in, 1);
    uint8_t ev_flags = (uint8_t)take(in, 1);
    size_t n;
    const uint8_t *m = take_bytes(in, take(in, 1), &n);
    char msg[256];
    memcpy(msg, m, n);
    msg[n] = '\0';

    mxop__framebuf_t fb = {0};
    Mxop__WorkerEvent ev = MXOP__WORKER_EVENT__INIT;
    ev.code = ev_code ? -(1000 + (int32_t)ev_code) : 0;
    ev.call_id = ev_call;
    ev.message = msg;
    ev.restarted = ev_flags & 1;
    ev.idle_cpu = (ev_flags >> 1) & 1;
    ev.generation = 2;
    ev.worker_pid = 2;
    ev.signal = 9;
    Mxop__Reply r = MXOP__REPLY__INIT;
    r.body_case = MXOP__REPLY__BODY_EVENT;
    r.event = &ev;
    mxop__frame_send(fd, &fb, MXOP__KIND_CTL_REPLY, &r.base, ev.restarted ? &b_client : NULL,
                     ev.restarted ? 1 : 0);
    Mxop__Reply ok = MXOP__REPLY__INIT;
    ok.id = 1; /* the client's first request: ReplaceWorker */
    mxop__frame_send(fd, &fb, MXOP__KIND_CTL_REPLY, &ok.base, NULL, 0);
    mxop__framebuf_free(&fb);
}

/* What the worker writes into the reply slot before a call (as any op of the worker could). */
static void scribble(mxop_client_t *c, cursor_t *in)
{
    static uint8_t frame[MXOP__MBOX_SLOT_BYTES];
    uint8_t what = (uint8_t)take(in, 1);
    uint32_t seq = (uint32_t)take(in, (what & 2) ? 4 : 0);
    uint32_t len = (uint32_t)take(in, (what & 4) ? 4 : 0);
    int64_t put_ns = (int64_t)take(in, (what & 8) ? 8 : 0);
    uint32_t busy = (uint32_t)take(in, (what & 16) ? 4 : 0);
    int32_t cpu = (int32_t)take(in, (what & 16) ? 4 : 0);
    size_t n = 0;
    const uint8_t *p = (what & 1) ? take_bytes(in, take(in, 2), &n) : NULL;
    if (n > 0)
        memcpy(frame, p, n);
    if (c->sess.chan != MXOP__CHAN_MBOX || c->mbox.sh == NULL)
        return; /* the socket path, or the mailbox was dropped */
    mxop__mbox_slot_t *s = &c->mbox.sh->rep;
    if (what & 1) {
        uint32_t q = atomic_load(&s->seq) & ~1u;
        atomic_store(&s->seq, q + 1);
        memcpy(s->data, frame, n);
        atomic_store(&s->len, (what & 4) ? len : (uint32_t)n);
        atomic_store(&s->seq, q + 2);
    } else if (what & 4) {
        atomic_store(&s->len, len);
    }
    if (what & 2)
        atomic_store(&s->seq, seq);
    if (what & 8)
        atomic_store(&s->put_ns, put_ns);
    if (what & 16) {
        atomic_store(&s->busy_cpus, busy);
        atomic_store(&s->cpu, cpu);
    }
}

/* One call of the engine's; its outcome is checked only for being an outcome. */
static void call(mxop_client_t *c, uint8_t api)
{
    const mxop_op_t *plain = NULL, *dyn = NULL, *state = NULL;
    if (mxop_op_find(c, "plain", &plain) != 0 || mxop_op_find(c, "dyn", &dyn) != 0 ||
        mxop_op_find(c, "state", &state) != 0)
        abort();
    mxop_array_t x = {.dtype = MXOP_F32, .ndim = 1, .region = 1, .offset = 0};
    mxop_array_t y = {
        .dtype = MXOP_F32, .ndim = 1, .region = 1, .offset = 4096, .req = MXOP_REQ_WRITE};
    x.shape[0] = y.shape[0] = 16;
    x.data = region_mem;
    y.data = region_mem + 4096;
    x.nbytes = y.nbytes = 64;
    int rc;
    switch (api % 6) {
    case 0: rc = mxop_forward(c, plain, NULL, &x, 1, &y, 1); break;
    case 1:
        rc = mxop_forward(c, dyn, NULL, &x, 1, &y, 1);
        /* A dynamic output's shape is believed only within what the caller gave. */
        if (rc == 0 && (y.ndim < 0 || y.ndim > MXOP_MAX_DIMS || y.nbytes > 64))
            abort();
        break;
    case 2: rc = mxop_backward(c, plain, NULL, &x, 1, &y, 1); break;
    case 3: {
        int32_t in_dt[] = {MXOP_F32}, out_dt[1];
        mxop_shape_t in_sh[1] = {{.ndim = 1, .dims = {16}}}, out_sh[1];
        rc = mxop_infer(c, plain, NULL, 1, in_dt, in_sh, 1, out_dt, out_sh);
        if (rc == 0 && (mxop_dtype_size(out_dt[0]) == 0 || out_sh[0].ndim < 0 ||
                        out_sh[0].ndim > MXOP_MAX_DIMS))
            abort();
        for (int d = 0; rc == 0 && d < out_sh[0].ndim; d++)
            if (out_sh[0].dims[d] < 0)
                abort();
        break;
    }
    case 4: {
        uint64_t st = 0;
        rc = mxop_state_create(c, state, NULL, 1, (int32_t[]){MXOP_F32},
                               (mxop_shape_t[]){{.ndim = 1, .dims = {16}}}, &st);
        if (rc == 0 && st == 0)
            abort();
        break;
    }
    default: rc = mxop_state_destroy(c, 7); break;
    }
    const char *msg = mxop_last_error(c);
    /* FUZZ_CLIENT_VERBOSE=1: what each call of an input came to (checking a seed). */
    if (getenv("FUZZ_CLIENT_VERBOSE") != NULL)
        fprintf(stderr, "fuzz_client: api %d: %d %s %s\n", api % 6, rc, mxop_err_name(rc), msg);
    /* Every outcome is 0 or a named code with a message of clean, bounded text. */
    if (rc > 0 || (rc < 0 && strcmp(mxop_err_name(rc), "MXOP_E?") == 0))
        abort();
    if (strlen(msg) >= MXOP__ERR_MAX || strchr(msg, 0x1b) != NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cursor_t in = {data, size};
    int shm = take(&in, 1) & 1;
    int ctl[2], a[2], b[2];
    mxop_client_t *c = NULL;
    if (mxop__client_new(shm ? MXOP_DATA_PATH_SHM : MXOP_DATA_PATH_SOCKET, 1000, 1000, &c) != 0)
        abort();
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) != 0)
        abort();
    c->ctl.fd = ctl[0];
    mxop__sess_to(c, MXOP__SESS_SERVING, a[0], 0, NULL);
    if (give_ops(c) != 0 || give_region(c) != 0)
        abort();
    if (shm) {
        /* The worker takes the mailbox (call 1); its answer is not the fuzzer's. */
        send_ok(a[1], 1);
        mxop__data_attach_now(c);
        if (c->sess.chan != MXOP__CHAN_MBOX)
            abort();
    }

    /* Everything the daemon and the workers will say, then each of them hangs up. */
    send_daemon(ctl[1], &in, b[0]);
    close(b[0]);
    shutdown(ctl[1], SHUT_WR);
    size_t n;
    const uint8_t *p = take_bytes(&in, take(&in, 2), &n);
    write_all(a[1], p, n);
    shutdown(a[1], SHUT_WR);
    p = take_bytes(&in, take(&in, 2), &n);
    write_all(b[1], p, n);
    shutdown(b[1], SHUT_WR);

    unsigned calls = (unsigned)take(&in, 1) % 5;
    for (unsigned k = 0; k < calls; k++) {
        uint8_t api = (uint8_t)take(&in, 1);
        scribble(c, &in);
        call(c, api);
    }

    mxop_close(c);
    close(ctl[1]);
    close(a[1]);
    close(b[1]);
    return 0;
}
