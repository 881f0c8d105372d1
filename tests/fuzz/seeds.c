/*
 * tests/fuzz/seeds.c - writes the seed corpus of the fuzz targets.
 *
 *     seeds DIR      writes DIR/frame/, DIR/call/, DIR/control/ and DIR/client/
 *
 * Each seed is a valid message of the kind its target reads, so that the
 * fuzzer starts from inputs that pass the decoder and reach the checks
 * behind it.  Op indices follow fuzz_call.c's load order: 0 relu, 1 gemm,
 * 2 softmax, 3 sum_n, 4 running_mean_norm, 5 noop; regions 1 (1 MiB) and
 * 2 (64 KiB).  The client target's seeds are a worker's answers in
 * fuzz_client.c's layout.  `make fuzz-seeds` regenerates tests/fuzz/corpus/.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control.pb-c.h"
#include "data.pb-c.h"
#include "mxop/errors.h"
#include "shm/call_record.h"
#include "wire/frame.h"
#include "supervisor.pb-c.h"

static const char *root;
static unsigned n_written;

static void write_file(const char *sub, const char *name, const uint8_t *p, size_t n)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof(dir), "%s/%s", root, sub);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    n_written++;
}

/* Writes `msg` packed as a seed of `sub`, and as a framed seed of the frame target. */
static void seed(const char *sub, const char *name, uint16_t kind, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(MXOP__FRAME_HDR + n + 1);
    if (buf == NULL)
        exit(1);
    protobuf_c_message_pack(msg, buf + 1 + MXOP__FRAME_HDR);
    if (sub != NULL)
        write_file(sub, name, buf + 1 + MXOP__FRAME_HDR, n);
    /* The frame target's first byte chooses how the stream is cut; 0x3c: whole. */
    buf[0] = 0x3c;
    mxop__frame_hdr_encode(buf + 1, kind, (uint32_t)n);
    char fname[256];
    snprintf(fname, sizeof(fname), "%s-%u", name, kind);
    write_file("frame", fname, buf, 1 + MXOP__FRAME_HDR + n);
    free(buf);
}

static Mxop__TensorDesc desc(uint32_t region, uint64_t offset, int32_t dtype, int64_t *shape,
                             size_t ndim)
{
    Mxop__TensorDesc d = MXOP__TENSOR_DESC__INIT;
    d.region = region;
    d.offset = offset;
    d.dtype = dtype;
    d.shape = shape;
    d.n_shape = ndim;
    return d;
}

/* An attribute: its key and value are bytes on the wire, so `value` may hold a NUL. */
static Mxop__Attr attr(const char *key, const char *value, size_t value_len)
{
    Mxop__Attr a = MXOP__ATTR__INIT;
    a.key.data = (uint8_t *)key;
    a.key.len = strlen(key);
    a.value.data = (uint8_t *)value;
    a.value.len = value_len;
    return a;
}

static void invoke_seed(const char *name, uint32_t op, int backward, Mxop__TensorDesc **in,
                        size_t n_in, Mxop__TensorDesc **out, size_t n_out, Mxop__Attr **attrs,
                        size_t n_attrs)
{
    Mxop__Invoke iv = MXOP__INVOKE__INIT;
    iv.op = op;
    iv.backward = backward;
    iv.inputs = in;
    iv.n_inputs = n_in;
    iv.outputs = out;
    iv.n_outputs = n_out;
    iv.attrs = attrs;
    iv.n_attrs = n_attrs;
    iv.deadline_ms = 1000;
    Mxop__Call c = MXOP__CALL__INIT;
    c.id = 7;
    c.body_case = MXOP__CALL__BODY_INVOKE;
    c.invoke = &iv;
    seed("call", name, MXOP__KIND_CALL, &c.base);
    /* The same call as a mailbox call record, when it is one a record carries. */
    size_t rec = mxop__call_rec_size(&c);
    if (rec != 0) {
        uint8_t buf[sizeof(mxop__call_rec_t) + 8 * sizeof(mxop__rec_tensor_t)];
        if (rec > sizeof(buf))
            exit(1);
        mxop__call_rec_encode(buf, &c);
        char fname[256];
        snprintf(fname, sizeof(fname), "%s-record", name);
        write_file("call", fname, buf, rec);
    }
}

/* The gemm call with a NUL inside its attribute's value ("2.5\0junk"). */
static void nul_attr_seed(Mxop__TensorDesc **in, Mxop__TensorDesc **out)
{
    Mxop__Attr alpha = attr("alpha", "2.5\0junk", 8);
    Mxop__Attr *attrs[] = {&alpha};
    Mxop__Invoke iv = MXOP__INVOKE__INIT;
    iv.op = 1;
    iv.inputs = in;
    iv.n_inputs = 2;
    iv.outputs = out;
    iv.n_outputs = 1;
    iv.attrs = attrs;
    iv.n_attrs = 1;
    iv.deadline_ms = 1000;
    Mxop__Call c = MXOP__CALL__INIT;
    c.id = 7;
    c.body_case = MXOP__CALL__BODY_INVOKE;
    c.invoke = &iv;
    uint8_t buf[512];
    size_t n = protobuf_c_message_get_packed_size(&c.base);
    if (n > sizeof(buf))
        exit(1);
    protobuf_c_message_pack(&c.base, buf);
    write_file("call", "gemm-attr-nul", buf, n);
}

static void call_seeds(void)
{
    int64_t s16[] = {16}, s44[] = {4, 4}, s23[] = {2, 3}, s34[] = {3, 4}, s24[] = {2, 4};
    Mxop__TensorDesc x = desc(1, 0, 0, s16, 1), y = desc(1, 4096, 0, s16, 1);
    Mxop__TensorDesc *in1[] = {&x}, *out1[] = {&y};
    invoke_seed("relu", 0, 0, in1, 1, out1, 1, NULL, 0);
    Mxop__TensorDesc dy = desc(2, 0, 0, s16, 1);
    Mxop__TensorDesc *bin[] = {&dy, &x}, *bout[] = {&y};
    invoke_seed("relu-backward", 0, 1, bin, 2, bout, 1, NULL, 0);

    Mxop__TensorDesc a = desc(1, 0, 0, s23, 2), b = desc(1, 256, 0, s34, 2),
                     c = desc(2, 0, 0, s24, 2);
    Mxop__TensorDesc *gin[] = {&a, &b}, *gout[] = {&c};
    Mxop__Attr alpha = attr("alpha", "2.5", 3);
    Mxop__Attr *attrs[] = {&alpha};
    invoke_seed("gemm", 1, 0, gin, 2, gout, 1, attrs, 1);
    nul_attr_seed(gin, gout);

    Mxop__TensorDesc m = desc(1, 0, 0, s44, 2), o = desc(2, 64, 0, s44, 2);
    Mxop__TensorDesc *sin[] = {&m}, *sout[] = {&o};
    invoke_seed("softmax", 2, 0, sin, 1, sout, 1, NULL, 0);

    Mxop__TensorDesc p = desc(1, 0, 0, s16, 1), q = desc(1, 64, 0, s16, 1),
                     r = desc(1, 128, 0, s16, 1), z = desc(2, 0, 0, s16, 1);
    Mxop__TensorDesc *nin[] = {&p, &q, &r}, *nout[] = {&z};
    invoke_seed("sum_n", 3, 0, nin, 3, nout, 1, NULL, 0);

    Mxop__TensorDesc *noin[] = {&x}, *noout[] = {&y};
    invoke_seed("noop", 5, 0, noin, 1, noout, 1, NULL, 0);

    /* Infer and state calls. */
    Mxop__Shape sh = MXOP__SHAPE__INIT;
    sh.dims = s44;
    sh.n_dims = 2;
    Mxop__Shape *shapes[] = {&sh};
    int32_t dts[] = {0};
    Mxop__Infer inf = MXOP__INFER__INIT;
    inf.op = 2;
    inf.in_dtypes = dts;
    inf.n_in_dtypes = 1;
    inf.in_shapes = shapes;
    inf.n_in_shapes = 1;
    Mxop__Call ci = MXOP__CALL__INIT;
    ci.id = 8;
    ci.body_case = MXOP__CALL__BODY_INFER;
    ci.infer = &inf;
    seed("call", "infer", MXOP__KIND_CALL, &ci.base);

    Mxop__StateCreate sc = MXOP__STATE_CREATE__INIT;
    sc.op = 4;
    sc.in_dtypes = dts;
    sc.n_in_dtypes = 1;
    sc.in_shapes = shapes;
    sc.n_in_shapes = 1;
    Mxop__Call cs = MXOP__CALL__INIT;
    cs.id = 9;
    cs.body_case = MXOP__CALL__BODY_STATE_CREATE;
    cs.state_create = &sc;
    seed("call", "state-create", MXOP__KIND_CALL, &cs.base);

    Mxop__StateDestroy sd = MXOP__STATE_DESTROY__INIT;
    sd.state = (1ull << 32) | 1;
    Mxop__Call cd = MXOP__CALL__INIT;
    cd.id = 10;
    cd.body_case = MXOP__CALL__BODY_STATE_DESTROY;
    cd.state_destroy = &sd;
    seed("call", "state-destroy", MXOP__KIND_CALL, &cd.base);
}

static void request_seed(const char *name, Mxop__Request *r)
{
    seed("control", name, MXOP__KIND_CTL_REQUEST, &r->base);
}

static void control_seeds(void)
{
    Mxop__Request r = MXOP__REQUEST__INIT;
    r.id = 1;

    Mxop__Hello h = MXOP__HELLO__INIT;
    h.min_version = 1;
    h.max_version = 1;
    r.body_case = MXOP__REQUEST__BODY_HELLO;
    r.hello = &h;
    request_seed("hello", &r);

    Mxop__OpenSession os = MXOP__OPEN_SESSION__INIT;
    r.body_case = MXOP__REQUEST__BODY_OPEN_SESSION;
    r.open_session = &os;
    request_seed("open-session", &r);

    Mxop__LoadLibrary ll = MXOP__LOAD_LIBRARY__INIT;
    ll.path = "relu.so";
    r.body_case = MXOP__REQUEST__BODY_LOAD_LIBRARY;
    r.load_library = &ll;
    request_seed("load-library", &r);

    Mxop__ListOps lo = MXOP__LIST_OPS__INIT;
    r.body_case = MXOP__REQUEST__BODY_LIST_OPS;
    r.list_ops = &lo;
    request_seed("list-ops", &r);

    Mxop__RegisterRegion rr = MXOP__REGISTER_REGION__INIT;
    rr.size = 1 << 20;
    r.body_case = MXOP__REQUEST__BODY_REGISTER_REGION;
    r.register_region = &rr;
    request_seed("register-region", &r);

    Mxop__ReleaseRegion rel = MXOP__RELEASE_REGION__INIT;
    rel.region = 1;
    r.body_case = MXOP__REQUEST__BODY_RELEASE_REGION;
    r.release_region = &rel;
    request_seed("release-region", &r);

    Mxop__Stats st = MXOP__STATS__INIT;
    r.body_case = MXOP__REQUEST__BODY_STATS;
    r.stats = &st;
    request_seed("stats", &r);
}

/* ---- the client target (fuzz_client.c): a worker's answers ---- */

typedef struct seedbuf {
    uint8_t p[8192];
    size_t n;
} seedbuf_t;

static void put(seedbuf_t *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        b->p[b->n++] = (uint8_t)(v >> (8 * i));
}

static void put_bytes(seedbuf_t *b, const uint8_t *p, size_t n, int len_bytes)
{
    put(b, n, len_bytes);
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* A result frame (header and payload) appended to out[*n]. */
static void result_frame(uint8_t *out, size_t *n, const Mxop__CallResult *r)
{
    size_t len = protobuf_c_message_get_packed_size(&r->base);
    mxop__frame_hdr_encode(out + *n, MXOP__KIND_CALL_RESULT, (uint32_t)len);
    protobuf_c_message_pack(&r->base, out + *n + MXOP__FRAME_HDR);
    *n += MXOP__FRAME_HDR + len;
}

/*
 * One seed: the header fields, then the socket bytes of channels A and B,
 * then each call's api with, on the shm path, its result in the reply slot.
 */
static void client_seed(const char *name, int shm, int restarted, const uint8_t *a, size_t na,
                        const uint8_t *bb, size_t nb, const uint8_t *apis, int ncalls,
                        const uint8_t (*slot)[512], const size_t *nslot)
{
    seedbuf_t b = {.n = 0};
    put(&b, shm ? 1 : 0, 1);
    put(&b, 0, 1);                 /* ev_call */
    put(&b, 25, 1);                /* ev_code: MXOP_EWORKER_CRASHED */
    put(&b, restarted ? 1 : 0, 1); /* ev_flags */
    put_bytes(&b, (const uint8_t *)"worker killed by SIGSEGV", 24, 1);
    put_bytes(&b, a, na, 2);
    put_bytes(&b, bb, nb, 2);
    put(&b, (uint64_t)ncalls, 1);
    for (int k = 0; k < ncalls; k++) {
        put(&b, apis[k], 1);
        if (slot != NULL && nslot[k] > 0) {
            put(&b, 1, 1);
            put_bytes(&b, slot[k], nslot[k], 2);
        } else {
            put(&b, 0, 1);
        }
    }
    write_file("client", name, b.p, b.n);
}

static void client_seeds(void)
{
    uint8_t a[2048], slot[4][512];
    size_t na, nslot[4];
    int64_t d16[] = {16}, d4[] = {4};
    int32_t f32[] = {0};
    Mxop__Shape s16 = MXOP__SHAPE__INIT, s4 = MXOP__SHAPE__INIT;
    s16.dims = d16;
    s16.n_dims = 1;
    s4.dims = d4;
    s4.n_dims = 1;
    Mxop__Shape *sh16[] = {&s16}, *sh4[] = {&s4};

    /* The socket path: ids from 1; apis 0 forward, 1 dynamic, 2 backward, 3 infer, 4 state. */
    Mxop__CallResult ok = MXOP__CALL_RESULT__INIT, fail = MXOP__CALL_RESULT__INIT,
                     inf = MXOP__CALL_RESULT__INIT, st = MXOP__CALL_RESULT__INIT,
                     dyn = MXOP__CALL_RESULT__INIT;
    ok.id = 1;
    na = 0;
    result_frame(a, &na, &ok);
    client_seed("sock-forward", 0, 0, a, na, NULL, 0, (const uint8_t[]){0}, 1, NULL, NULL);

    fail.id = 1;
    fail.status = -1024;
    fail.message = "op 'plain' failed: \x1b[1mbad\xff";
    na = 0;
    result_frame(a, &na, &fail);
    client_seed("sock-error", 0, 0, a, na, NULL, 0, (const uint8_t[]){0}, 1, NULL, NULL);

    inf.id = 1;
    inf.out_dtypes = f32;
    inf.n_out_dtypes = 1;
    inf.out_shapes = sh16;
    inf.n_out_shapes = 1;
    na = 0;
    result_frame(a, &na, &inf);
    client_seed("sock-infer", 0, 0, a, na, NULL, 0, (const uint8_t[]){3}, 1, NULL, NULL);

    st.id = 1;
    st.state = (2ull << 32) | 1;
    na = 0;
    result_frame(a, &na, &st);
    client_seed("sock-state", 0, 0, a, na, NULL, 0, (const uint8_t[]){4}, 1, NULL, NULL);

    dyn.id = 1;
    dyn.out_shapes = sh4;
    dyn.n_out_shapes = 1;
    na = 0;
    result_frame(a, &na, &dyn);
    client_seed("sock-dynamic", 0, 0, a, na, NULL, 0, (const uint8_t[]){1}, 1, NULL, NULL);

    /* Three calls on one channel, a stale result first. */
    Mxop__CallResult r = MXOP__CALL_RESULT__INIT;
    na = 0;
    for (uint64_t id = 1; id <= 3; id++) {
        r.id = id;
        result_frame(a, &na, &r);
    }
    client_seed("sock-three", 0, 0, a, na, NULL, 0, (const uint8_t[]){0, 2, 5}, 3, NULL, NULL);

    /* Garbage, then the replacement answers the next call (call 2 on channel B). */
    const char junk[] = "debug: 16 elements\n";
    uint8_t bb[256];
    size_t nb = 0;
    r.id = 2;
    result_frame(bb, &nb, &r);
    client_seed("sock-garbage-replaced", 0, 1, (const uint8_t *)junk, sizeof(junk) - 1, bb, nb,
                (const uint8_t[]){0, 0}, 2, NULL, NULL);

    /* The shm path: the attach took id 1; results in the reply slot. */
    for (int k = 0; k < 3; k++) {
        Mxop__CallResult m = MXOP__CALL_RESULT__INIT;
        m.id = (uint64_t)k + 2;
        if (k == 1) {
            m.out_dtypes = f32;
            m.n_out_dtypes = 1;
            m.out_shapes = sh16;
            m.n_out_shapes = 1;
        }
        nslot[k] = 0;
        result_frame(slot[k], &nslot[k], &m);
    }
    client_seed("shm-forward", 1, 0, NULL, 0, NULL, 0, (const uint8_t[]){0}, 1, slot, nslot);
    client_seed("shm-three", 1, 0, NULL, 0, NULL, 0, (const uint8_t[]){0, 3, 2}, 3, slot, nslot);
    /* The same answers as result records (shm/call_record.h), as a worker writes most. */
    for (int k = 0; k < 2; k++) {
        Mxop__CallResult m = MXOP__CALL_RESULT__INIT;
        m.id = 2;
        m.status = k == 0 ? 0 : MXOP_EOP_FAILED;
        m.message = k == 0 ? "" : "op 'relu' failed: bad input";
        size_t len = mxop__result_rec_size(&m);
        mxop__frame_hdr_encode(slot[k], MXOP__KIND_RESULT_REC, (uint32_t)len);
        mxop__result_rec_encode(slot[k] + MXOP__FRAME_HDR, &m, len);
        nslot[k] = MXOP__FRAME_HDR + len;
    }
    client_seed("shm-forward-record", 1, 0, NULL, 0, NULL, 0, (const uint8_t[]){0}, 1, slot, nslot);
    client_seed("shm-error-record", 1, 0, NULL, 0, NULL, 0, (const uint8_t[]){0}, 1, slot + 1,
                nslot + 1);
    /* A result on the socket while the mailbox is quiet (one too large for a slot comes so). */
    na = 0;
    r.id = 2;
    result_frame(a, &na, &r);
    size_t none[4] = {0};
    client_seed("shm-socket-result", 1, 0, a, na, NULL, 0, (const uint8_t[]){0}, 1, slot, none);
    /* Junk in the slot, then the replacement: it takes its mailbox (call 3), answers call 4. */
    memcpy(slot[0], "not a frame at all", 18);
    nslot[0] = 18;
    nslot[1] = 0;
    nb = 0;
    for (uint64_t id = 3; id <= 4; id++) {
        r.id = id;
        result_frame(bb, &nb, &r);
    }
    client_seed("shm-junk-replaced", 1, 1, NULL, 0, bb, nb, (const uint8_t[]){0, 0}, 2, slot,
                nslot);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seeds DIR\n");
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    call_seeds();
    control_seeds();
    client_seeds();
    printf("seeds: %u files in %s\n", n_written, root);
    return 0;
}
