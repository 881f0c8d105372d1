/*
 * demo/train.c - train a small network whose layers run out of process.
 *
 *     usage: train [SOCKET]        (default: $MXOP_SOCKET)
 *
 * A two-layer perceptron learns to separate two interleaved half-moons
 * (256 points, fixed seed).  Every matrix product and every ReLU, forward
 * and backward, is an op call into the session's worker: the "gemm" and
 * "relu" ops of gemm.so and relu.so.  Only the loss (softmax cross-entropy)
 * and the SGD update are computed here.  All arrays live in the client's
 * shared-memory arena (mxop_array_alloc), so the worker reads and writes
 * them in place and nothing is copied per call.
 *
 * Halfway through, the demo calls the "segv" op of the fixture library
 * crash.so, which dereferences a bad pointer.  The worker dies; the call
 * returns MXOP_EWORKER_CRASHED naming the op and the signal; the input is
 * intact (it is mapped read-only in the worker); and training goes on, on
 * the worker the daemon restarted, because the weights never left this
 * process's shared memory.
 *
 * The biases are folded into the products: x gets a constant third
 * column of ones, and hidden unit HIDDEN is wired to that column with a
 * fixed weight of 1, so after the ReLU it is a constant 1 that serves as
 * the output layer's bias input.  That keeps the whole network gemm+relu.
 *
 * Exits 0 only if the crash was reported as MXOP_EWORKER_CRASHED with the
 * input unchanged and the final accuracy is at least 90%.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxop/client.h"

#define N_POINTS 256
#define N_IN 3             /* x, y, 1 */
#define HIDDEN 32          /* learned hidden units */
#define N_HID (HIDDEN + 1) /* plus the constant bias unit */
#define N_CLASSES 2
#define STEPS 300
#define CRASH_STEP 150
#define PRINT_EVERY 20
#define LEARNING_RATE 0.5f
#define SEED 20240611u

/* ---- a small seeded generator, so every run sees the same data ---- */

static uint64_t rng_state = SEED;

static uint64_t rng_next(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(void)
{
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static double rng_normal(void)
{
    /* Box-Muller; 1 - u keeps log() away from 0. */
    double u = 1.0 - rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* ---- the network's arrays, all in shared memory ---- */

typedef struct net {
    mxop_array_t x;       /* [N, 3] inputs with the ones column */
    mxop_array_t w1;      /* [3, N_HID] */
    mxop_array_t h;       /* [N, N_HID] x w1 */
    mxop_array_t r;       /* [N, N_HID] relu(h) */
    mxop_array_t w2;      /* [N_HID, 2] */
    mxop_array_t logits;  /* [N, 2] r w2 */
    mxop_array_t dlogits; /* gradients of the same shapes */
    mxop_array_t dw2;
    mxop_array_t dr;
    mxop_array_t dh;
    mxop_array_t dw1;
    mxop_array_t dx; /* not needed: passed with req NULL */
    mxop_array_t probe_in, probe_out;
} net_t;

static int labels[N_POINTS];

static float *f32(const mxop_array_t *a)
{
    return a->data;
}

/* Prints what failed and why, and passes the code on. */
static int report(mxop_client_t *c, int rc, const char *what)
{
    if (rc != 0)
        fprintf(stderr, "train: %s: %s: %s\n", what, mxop_err_name(rc), mxop_last_error(c));
    return rc;
}

static int alloc2(mxop_client_t *c, mxop_array_t *a, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return report(c, mxop_array_alloc(c, MXOP_F32, 2, shape, a), "mxop_array_alloc");
}

static int net_alloc(mxop_client_t *c, net_t *n)
{
    int rc = 0;
    memset(n, 0, sizeof(*n));
    const struct {
        mxop_array_t *a;
        int64_t rows, cols;
    } dims[] = {
        {&n->x, N_POINTS, N_IN},
        {&n->w1, N_IN, N_HID},
        {&n->h, N_POINTS, N_HID},
        {&n->r, N_POINTS, N_HID},
        {&n->w2, N_HID, N_CLASSES},
        {&n->logits, N_POINTS, N_CLASSES},
        {&n->dlogits, N_POINTS, N_CLASSES},
        {&n->dw2, N_HID, N_CLASSES},
        {&n->dr, N_POINTS, N_HID},
        {&n->dh, N_POINTS, N_HID},
        {&n->dw1, N_IN, N_HID},
        {&n->dx, N_POINTS, N_IN},
        {&n->probe_in, 4, 4},
        {&n->probe_out, 4, 4},
    };
    for (size_t i = 0; rc == 0 && i < sizeof(dims) / sizeof(dims[0]); i++)
        rc = alloc2(c, dims[i].a, dims[i].rows, dims[i].cols);
    return rc;
}

static void net_free(mxop_client_t *c, net_t *n)
{
    mxop_array_t *all[] = {&n->x,   &n->w1, &n->h,  &n->r,   &n->w2, &n->logits,   &n->dlogits,
                           &n->dw2, &n->dr, &n->dh, &n->dw1, &n->dx, &n->probe_in, &n->probe_out};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        mxop_array_free(c, all[i]);
}

/*
 * Two interleaved half-moons with a little noise, centred and scaled to
 * about [-1, 1]; half the points of each class.
 */
static void make_moons(net_t *n)
{
    float *x = f32(&n->x);
    for (int i = 0; i < N_POINTS; i++) {
        int cls = i % 2;
        double t = M_PI * rng_uniform();
        double px = cls ? 1.0 - cos(t) : cos(t);
        double py = cls ? 0.5 - sin(t) : sin(t);
        px += 0.1 * rng_normal();
        py += 0.1 * rng_normal();
        x[i * N_IN + 0] = (float)((px - 0.5) / 1.2);
        x[i * N_IN + 1] = (float)((py - 0.25) / 0.8);
        x[i * N_IN + 2] = 1.0f;
        labels[i] = cls;
    }
}

static void init_weights(net_t *n)
{
    float *w1 = f32(&n->w1), *w2 = f32(&n->w2);
    for (int i = 0; i < N_IN; i++)
        for (int j = 0; j < N_HID; j++)
            w1[i * N_HID + j] = (float)(rng_normal() * sqrt(2.0 / N_IN));
    /* The bias unit: weight 1 from the ones column, 0 from x and y. */
    for (int i = 0; i < N_IN; i++)
        w1[i * N_HID + HIDDEN] = i == N_IN - 1 ? 1.0f : 0.0f;
    for (int i = 0; i < N_HID * N_CLASSES; i++)
        w2[i] = (float)(rng_normal() * sqrt(1.0 / N_HID));
}

typedef struct ops {
    const mxop_op_t *gemm, *relu, *segv;
} ops_t;

/* h = x w1, r = relu(h), logits = r w2: three calls into the worker. */
static int forward(mxop_client_t *c, const ops_t *op, net_t *n)
{
    mxop_array_t in[2] = {n->x, n->w1};
    int rc = report(c, mxop_forward(c, op->gemm, NULL, in, 2, &n->h, 1), "gemm forward (layer 1)");
    if (rc == 0)
        rc = report(c, mxop_forward(c, op->relu, NULL, &n->h, 1, &n->r, 1), "relu forward");
    if (rc == 0) {
        in[0] = n->r;
        in[1] = n->w2;
        rc = report(c, mxop_forward(c, op->gemm, NULL, in, 2, &n->logits, 1),
                    "gemm forward (layer 2)");
    }
    return rc;
}

/*
 * Softmax cross-entropy over the logits, here in the client: returns the
 * mean loss, fills dlogits = (p - onehot) / N and counts correct answers.
 */
static double loss_and_grad(net_t *n, int *correct)
{
    const float *z = f32(&n->logits);
    float *dz = f32(&n->dlogits);
    double loss = 0;
    *correct = 0;
    for (int i = 0; i < N_POINTS; i++) {
        const float *zi = z + i * N_CLASSES;
        float mx = zi[0] > zi[1] ? zi[0] : zi[1];
        double e[N_CLASSES], s = 0;
        for (int k = 0; k < N_CLASSES; k++)
            s += e[k] = exp((double)(zi[k] - mx));
        for (int k = 0; k < N_CLASSES; k++) {
            double p = e[k] / s;
            dz[i * N_CLASSES + k] = (float)((p - (k == labels[i])) / N_POINTS);
        }
        loss -= log(e[labels[i]] / s);
        *correct += (zi[1] > zi[0]) == labels[i];
    }
    return loss / N_POINTS;
}

/*
 * Backward through the same ops: in = [output gradient, inputs, output],
 * out = input gradients.  The gradient of x is not wanted, so its req is
 * NULL and the op skips it.
 */
static int backward(mxop_client_t *c, const ops_t *op, net_t *n)
{
    mxop_array_t in[4] = {n->dlogits, n->r, n->w2, n->logits};
    mxop_array_t out[2] = {n->dr, n->dw2};
    int rc = report(c, mxop_backward(c, op->gemm, NULL, in, 4, out, 2), "gemm backward (layer 2)");
    if (rc == 0) {
        mxop_array_t rin[3] = {n->dr, n->h, n->r};
        rc = report(c, mxop_backward(c, op->relu, NULL, rin, 3, &n->dh, 1), "relu backward");
    }
    if (rc == 0) {
        mxop_array_t gin[4] = {n->dh, n->x, n->w1, n->h};
        mxop_array_t gout[2] = {n->dx, n->dw1};
        gout[0].req = MXOP_REQ_NULL;
        gout[1].req = MXOP_REQ_WRITE;
        rc =
            report(c, mxop_backward(c, op->gemm, NULL, gin, 4, gout, 2), "gemm backward (layer 1)");
    }
    return rc;
}

static void sgd(net_t *n)
{
    float *w1 = f32(&n->w1), *dw1 = f32(&n->dw1), *w2 = f32(&n->w2), *dw2 = f32(&n->dw2);
    for (int i = 0; i < N_IN; i++)
        for (int j = 0; j < HIDDEN; j++) /* the bias unit's column stays fixed */
            w1[i * N_HID + j] -= LEARNING_RATE * dw1[i * N_HID + j];
    for (int i = 0; i < N_HID * N_CLASSES; i++)
        w2[i] -= LEARNING_RATE * dw2[i];
}

/*
 * Calls the crashing op on a small array and checks what the engine sees:
 * the code, the message, and an input the dying op could not touch.
 * Returns 1 when all of it is as promised.
 */
static int crash_once(mxop_client_t *c, const ops_t *op, net_t *n)
{
    float *pin = f32(&n->probe_in);
    float saved[16];
    mxop_stats_t before = {0}, after = {0};
    for (int i = 0; i < 16; i++)
        pin[i] = saved[i] = (float)i * 0.25f - 1.0f;
    int have_stats = mxop_stats(c, &before) == 0;

    int rc = mxop_forward(c, op->segv, NULL, &n->probe_in, 1, &n->probe_out, 1);
    printf("  crash.so 'segv' returned %s: %s\n", mxop_err_name(rc),
           rc ? mxop_last_error(c) : "(no error)");
    int intact = memcmp(pin, saved, sizeof(saved)) == 0;
    printf("  its input array is %s\n", intact ? "unchanged" : "CHANGED");
    if (have_stats && mxop_stats(c, &after) == 0)
        printf("  worker pid %u -> %u, restarts %llu\n", before.worker_pid, after.worker_pid,
               (unsigned long long)after.worker_restarts);
    return rc == MXOP_EWORKER_CRASHED && intact;
}

static int find_op(mxop_client_t *c, const char *name, const mxop_op_t **op)
{
    int rc = mxop_op_find(c, name, op);
    if (rc != 0)
        fprintf(stderr, "train: op '%s': %s: %s\n", name, mxop_err_name(rc), mxop_last_error(c));
    return rc;
}

int main(int argc, char **argv)
{
    const char *socket_path = argc > 1 ? argv[1] : NULL;
    mxop_client_t *c = NULL;
    net_t net;

    /* Line-buffered, so the lines interleave with the daemon's log in order. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    ops_t op;
    int crash_ok = 0, correct = 0, rc;
    double loss = 0;

    if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: %s [SOCKET]   (default: $MXOP_SOCKET)\n", argv[0]);
        return 2;
    }
    mxop_connect_opts_t opts = {
        .struct_size = sizeof(opts), .timeout_ms = 10000, .client_name = "demo/train"};
    rc = mxop_connect(socket_path, &opts, &c);
    if (rc != 0) {
        fprintf(stderr, "train: cannot connect: %s: %s\n", mxop_err_name(rc), mxop_connect_error());
        return 1;
    }

    static const char *const libs[] = {"relu.so", "gemm.so", "crash.so"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        rc = mxop_load_library(c, libs[i]);
        if (rc != 0) {
            fprintf(stderr, "train: loading %s: %s: %s\n", libs[i], mxop_err_name(rc),
                    mxop_last_error(c));
            goto err_close;
        }
    }
    if (find_op(c, "gemm", &op.gemm) || find_op(c, "relu", &op.relu) ||
        find_op(c, "segv", &op.segv))
        goto err_close;
    printf("loaded relu.so, gemm.so, crash.so: %d ops\n", mxop_op_count(c));

    if (net_alloc(c, &net) != 0)
        goto err_free;
    make_moons(&net);
    init_weights(&net);
    printf("training a %d-%d-%d MLP on %d points (two moons), SGD lr %.2f\n", N_IN - 1, HIDDEN,
           N_CLASSES, N_POINTS, (double)LEARNING_RATE);

    for (int step = 0; step <= STEPS; step++) {
        if (step == CRASH_STEP) {
            printf("step %d: calling an op that segfaults\n", step);
            crash_ok = crash_once(c, &op, &net);
        }
        if (forward(c, &op, &net) != 0)
            goto err_free;
        loss = loss_and_grad(&net, &correct);
        if (step % PRINT_EVERY == 0 || step == CRASH_STEP || step == STEPS)
            printf("step %3d  loss %.4f  accuracy %.3f\n", step, loss, (double)correct / N_POINTS);
        if (step == STEPS)
            break;
        if (backward(c, &op, &net) != 0)
            goto err_free;
        sgd(&net);
    }

    double acc = (double)correct / N_POINTS;
    printf("final loss %.4f, accuracy %.3f (%d/%d); crash %s\n", loss, acc, correct, N_POINTS,
           crash_ok ? "reported as MXOP_EWORKER_CRASHED, training went on" : "NOT handled");
    net_free(c, &net);
    mxop_close(c);
    return crash_ok && acc >= 0.9 ? 0 : 1;

err_free:
    net_free(c, &net);
err_close:
    mxop_close(c);
    return 1;
}
