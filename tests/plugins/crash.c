/*
 * tests/plugins/crash.c - ops that misbehave on purpose, for the tests of
 * isolation and supervision.  Every op takes 1 input and gives 1 output.
 *
 *   segv         dereferences a bad pointer (SIGSEGV)
 *   abort        calls abort() (SIGABRT)
 *   exit3        calls _exit(3)
 *   hang         spins forever (only the deadline ends it)
 *   write_input  writes into its read-only input tensor (SIGSEGV)
 *   identity     copies in to out: the op that works
 *   fail         returns MXOP_EOP_FAILED with "fail: asked to fail"
 *   crash_nth    counts its calls in a static; the call whose number (from
 *                1, per worker process) equals attribute n segfaults, the
 *                others copy in to out
 *   sleep        sleeps attribute ms milliseconds, then copies in to out
 *   exit0        calls exit(0): atexit handlers run, the worker "succeeds"
 *   stack_overflow  recurses without end (no tail call) until the stack runs out
 *   double_free  frees the same block twice (glibc aborts: SIGABRT)
 *   pause        sleeps in pause() forever (only the deadline ends it)
 *   oom          allocates and touches 16 MiB blocks until malloc fails, then
 *                uses the NULL it got, as an op that never checks would
 *                (SIGSEGV at the memory limit); attribute max_mb (default
 *                8192) stops it, with an error, where no limit is set
 *   oom_checked  the same, but checks: frees everything and returns
 *                MXOP_ENOMEM with a message; the worker lives on
 *   fork_bomb    forks until fork fails or attribute max (default 64)
 *                children exist; each child pause()s.  out[0] = children
 *                made, out[1] = errno of the fork that failed (0: none)
 *   close_fds    closes descriptors it does not own: fd 3 (bit 1 of
 *                attribute fds) and fd 4 (bit 2), default both.
 *                out[0], out[1] = 0 or the errno of close(3), close(4)
 *   garbage_fds  writes 64 bytes of garbage into fd 3 and/or fd 4 (the same
 *                attribute); out[0], out[1] = 0 or the errno of each write
 *   thread_crash starts a detached thread that sleeps attribute ms
 *                (default 100) and then segfaults; the call itself copies
 *                in to out and returns 0
 *   destroy_crash  stateful: create and forward work (forward copies), the
 *                state's destructor segfaults
 *
 * Ops that write results into out[] expect f32 tensors of at least 2
 * elements.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("crash", "1.0");

static const mxop_host_t *host;

/*
 * A null pointer the compiler cannot see through: because the variable is
 * volatile it must be read at run time, so the store below is neither
 * dropped as undefined nor flagged at compile time.
 */
static int *volatile bad_pointer;

static void segfault(void)
{
    *bad_pointer = 42;
}

static int copy_through(const mxop_tensor_t *in, mxop_tensor_t *out)
{
    if (out->req != MXOP_REQ_NULL && in->size > 0)
        memcpy(out->data, in->data, in->size * mxop_dtype_size(in->dtype));
    return 0;
}

static int segv_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    segfault();
    return copy_through(&in[0], &out[0]);
}

static int abort_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    abort();
}

static int exit3_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    _exit(3);
}

static int hang_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    volatile int spin = 1;
    while (spin) {
    }
    return copy_through(&in[0], &out[0]);
}

static int write_input_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    /* Inputs are mapped read-only, so this store must fault and end only the worker. */
    volatile unsigned char *p = in[0].data;
    p[0] = (unsigned char)(p[0] + 1);
    return copy_through(&in[0], &out[0]);
}

static int identity_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    return copy_through(&in[0], &out[0]);
}

static int identity_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    /* in = [dy, x, y]; dx = dy. */
    return copy_through(&in[0], &out[0]);
}

static int fail_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    return host->set_error(ctx, MXOP_EOP_FAILED, "fail: asked to fail");
}

static int crash_nth_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    static int64_t calls;
    int64_t n;
    int rc = host->attr_int(ctx, "n", 0, &n);
    if (rc != 0)
        return rc;
    if (++calls == n)
        segfault();
    return copy_through(&in[0], &out[0]);
}

static int sleep_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    int64_t ms;
    int rc = host->attr_int(ctx, "ms", 0, &ms);
    if (rc != 0)
        return rc;
    if (ms < 0)
        return host->set_error(ctx, MXOP_EATTR, "sleep: attribute 'ms' must be >= 0, got %lld",
                               (long long)ms);
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return copy_through(&in[0], &out[0]);
}

static int exit0_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    exit(0);
}

/* Read at run time, so the recursion has no visible end and is not folded away. */
static volatile long recursion_limit = 0x7fffffffL;

static long recurse(volatile char *caller, long depth)
{
    volatile char frame[1024];
    frame[0] = (char)depth;
    frame[sizeof(frame) - 1] = caller != NULL ? caller[0] : 0;
    if (depth >= recursion_limit)
        return frame[0];
    /* Using the frame after the call keeps it from being a tail call. */
    return recurse(frame, depth + 1) + frame[sizeof(frame) - 1];
}

static int stack_overflow_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                  mxop_tensor_t *out)
{
    long r = recurse(NULL, 0);
    return r == 12345 ? copy_through(&in[0], &out[0])
                      : host->set_error(ctx, MXOP_EOP_FAILED, "stack_overflow: returned");
}

static void *volatile freed_twice;

static int double_free_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    freed_twice = malloc(64);
    free(freed_twice);
    free(freed_twice);
    return copy_through(&in[0], &out[0]);
}

static int pause_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    volatile int forever = 1;
    while (forever)
        pause();
    return copy_through(&in[0], &out[0]);
}

#define OOM_BLOCK ((size_t)16 << 20)

struct block {
    struct block *next;
};

static int hog(mxop_ctx_t *ctx, int checked)
{
    int64_t max_mb;
    int rc = host->attr_int(ctx, "max_mb", 8192, &max_mb);
    if (rc != 0)
        return rc;
    struct block *head = NULL;
    int64_t mb = 0;
    while (mb < max_mb) {
        struct block *b = malloc(OOM_BLOCK);
        if (b == NULL && checked)
            break;
        /* Unchecked: a NULL block is written to, as the careless op would. */
        memset(b, 0x5a, OOM_BLOCK);
        b->next = head;
        head = b;
        mb += (int64_t)(OOM_BLOCK >> 20);
    }
    while (head != NULL) {
        struct block *next = head->next;
        free(head);
        head = next;
    }
    if (mb >= max_mb)
        return host->set_error(ctx, MXOP_EOP_FAILED,
                               "oom: allocated %lld MiB without running out: no memory limit?",
                               (long long)mb);
    return host->set_error(ctx, MXOP_ENOMEM, "oom_checked: malloc failed after %lld MiB",
                           (long long)mb);
}

static int oom_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out)
{
    return hog(ctx, 0);
}

static int oom_checked_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    return hog(ctx, 1);
}

static int put2(mxop_ctx_t *ctx, const char *op, mxop_tensor_t *out, double a, double b)
{
    if (out->dtype != MXOP_F32 || out->size < 2)
        return host->set_error(ctx, MXOP_EINVAL, "%s: needs an f32 output of 2 or more elements",
                               op);
    ((float *)out->data)[0] = (float)a;
    ((float *)out->data)[1] = (float)b;
    return 0;
}

static int fork_bomb_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    int64_t max;
    int rc = host->attr_int(ctx, "max", 64, &max);
    if (rc != 0)
        return rc;
    int64_t made = 0;
    int err = 0;
    while (made < max) {
        pid_t pid = fork();
        if (pid < 0) {
            err = errno;
            break;
        }
        if (pid == 0) {
            for (;;)
                pause();
        }
        made++;
    }
    return put2(ctx, "fork_bomb", &out[0], (double)made, (double)err);
}

static int fds_attr(mxop_ctx_t *ctx, int64_t *mask)
{
    return host->attr_int(ctx, "fds", 3, mask);
}

static int close_fds_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    int64_t mask;
    int rc = fds_attr(ctx, &mask);
    if (rc != 0)
        return rc;
    int e3 = 0, e4 = 0;
    if ((mask & 1) && close(3) != 0)
        e3 = errno;
    if ((mask & 2) && close(4) != 0)
        e4 = errno;
    return put2(ctx, "close_fds", &out[0], e3, e4);
}

static int garbage_fds_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                               mxop_tensor_t *out)
{
    int64_t mask;
    int rc = fds_attr(ctx, &mask);
    if (rc != 0)
        return rc;
    unsigned char junk[64];
    memset(junk, 0xab, sizeof(junk));
    int e3 = 0, e4 = 0;
    if ((mask & 1) && write(3, junk, sizeof(junk)) < 0)
        e3 = errno;
    if ((mask & 2) && write(4, junk, sizeof(junk)) < 0)
        e4 = errno;
    return put2(ctx, "garbage_fds", &out[0], e3, e4);
}

static void *crash_later(void *arg)
{
    long ms = (long)(intptr_t)arg;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    segfault();
    return NULL;
}

static int thread_crash_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                mxop_tensor_t *out)
{
    int64_t ms;
    int rc = host->attr_int(ctx, "ms", 100, &ms);
    if (rc != 0)
        return rc;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, crash_later, (void *)(intptr_t)ms);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return host->set_error(ctx, MXOP_EOP_FAILED, "thread_crash: pthread_create: %s",
                               strerror(rc));
    return copy_through(&in[0], &out[0]);
}

static int destroy_crash_create(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in_shapes,
                                const int32_t *in_dtypes, void **state)
{
    *state = malloc(16);
    return *state != NULL ? 0 : host->set_error(ctx, MXOP_ENOMEM, "destroy_crash: no memory");
}

static int destroy_crash_forward(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                                 int n_out, mxop_tensor_t *out)
{
    return copy_through(&in[0], &out[0]);
}

static void destroy_crash_destroy(void *state)
{
    free(state);
    segfault();
}

MXOP_PLUGIN_INIT(ctx, h)
{
    static const struct {
        const char *name;
        int (*forward)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
        int (*backward)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {
        {"segv", segv_forward, NULL},
        {"abort", abort_forward, NULL},
        {"exit3", exit3_forward, NULL},
        {"hang", hang_forward, NULL},
        {"write_input", write_input_forward, NULL},
        {"identity", identity_forward, identity_backward},
        {"fail", fail_forward, NULL},
        {"crash_nth", crash_nth_forward, NULL},
        {"sleep", sleep_forward, NULL},
        {"exit0", exit0_forward, NULL},
        {"stack_overflow", stack_overflow_forward, NULL},
        {"double_free", double_free_forward, NULL},
        {"pause", pause_forward, NULL},
        {"oom", oom_forward, NULL},
        {"oom_checked", oom_checked_forward, NULL},
        {"fork_bomb", fork_bomb_forward, NULL},
        {"close_fds", close_fds_forward, NULL},
        {"garbage_fds", garbage_fds_forward, NULL},
        {"thread_crash", thread_crash_forward, NULL},
    };
    host = h;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = "a misbehaving test op (tests/plugins/crash.c)",
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].forward,
            .backward = ops[i].backward,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    mxop_op_def_t stateful = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "destroy_crash",
        .description = "a stateful op whose destructor segfaults (tests/plugins/crash.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .state_create = destroy_crash_create,
        .state_forward = destroy_crash_forward,
        .state_destroy = destroy_crash_destroy,
    };
    return host->register_op(ctx, &stateful);
}
