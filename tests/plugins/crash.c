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
 */
#include <errno.h>
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
    return 0;
}
