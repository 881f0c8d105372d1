/*
 * tests/plugins/pid1_signals.c - ops that end their worker by a signal in
 * each way a library can, for the tests of the worker as pid 1 of its pid
 * namespace (tests/test_pid1.c).  Every op takes 1 input and gives 1 output.
 *
 *   raise     raise(attribute sig): a signal the worker sends itself, which
 *             the kernel ignores for pid 1 when its action is the default;
 *             when the worker lives on, copies in to out
 *   div_zero  an integer division by zero (SIGFPE from the instruction)
 *   trap      __builtin_trap() (SIGILL from the instruction on x86-64)
 */
#include <signal.h>
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("pid1_signals", "1.0");

static const mxop_host_t *host;

static int copy_through(const mxop_tensor_t *in, mxop_tensor_t *out)
{
    size_t n = in->size < out->size ? in->size : out->size;
    memcpy(out->data, in->data, n * mxop_dtype_size(in->dtype));
    return 0;
}

static int raise_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    (void)n_in;
    (void)n_out;
    int64_t sig = 0;
    int rc = host->attr_int(ctx, "sig", 0, &sig);
    if (rc != 0 || sig <= 0 || sig >= 32)
        return host->set_error(ctx, MXOP_EATTR, "raise: attribute sig must be 1..31");
    raise((int)sig);
    return copy_through(&in[0], &out[0]);
}

static int div_zero_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                            mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    volatile int zero = 0;
    volatile int x = 1;
    x = x / zero;
    return copy_through(&in[0], &out[0]);
}

static int trap_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    (void)in;
    (void)out;
    __builtin_trap();
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {
        {"raise", raise_forward},
        {"div_zero", div_zero_forward},
        {"trap", trap_forward},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = "ends its worker by a signal",
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].fn,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    return 0;
}
