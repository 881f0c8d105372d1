/*
 * tests/plugins/crash_bt.c - a library that crashes in a function of its
 * own with a name in its dynamic symbol table, so that the backtrace in
 * the crash's note (server/worker/fault.c) can be shown to name it.
 *
 *   crash_bt  calls crash_bt_deref_null(), which writes through NULL
 */
#include <stddef.h>

#include "mxop/op.h"

MXOP_PLUGIN("crash_bt", "1.0");

__attribute__((visibility("default"), noinline)) int crash_bt_deref_null(int *volatile *where);

static int *volatile nowhere;

/* Exported and not inlined: the frame the backtrace must name. */
__attribute__((visibility("default"), noinline)) int crash_bt_deref_null(int *volatile *where)
{
    **where = 42;
    return **where;
}

static int forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    return crash_bt_deref_null(&nowhere) == 42 ? 0 : 1;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "crash_bt",
        .description = "segfaults in an exported function (tests/plugins/crash_bt.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = forward,
    };
    return host->register_op(ctx, &def);
}
