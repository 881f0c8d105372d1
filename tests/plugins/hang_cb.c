/*
 * tests/plugins/hang_cb.c - ops that hang in one callback each, so that
 * every kind of callback is shown to run under a deadline.  Every op takes
 * 1 input and gives 1 output; what does not hang copies input to output.
 *
 *   hang_infer    infer_shape never returns
 *   hang_backward backward never returns
 *   hang_create   stateful: state_create never returns
 *   hang_destroy  stateful: state_destroy never returns
 *   hang_attrs    check_attrs never returns
 *   hang_infer_type  infer_type never returns
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hang_cb", "1.0");

static const mxop_host_t *host;

static void hang(void)
{
    for (;;)
        sleep(1);
}

static int copy(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)n_out;
    if (out[0].req != MXOP_REQ_NULL && in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    return 0;
}

static int infer_hang(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                      mxop_shape_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    hang();
    return 0;
}

static int attrs_hang(mxop_ctx_t *ctx)
{
    (void)ctx;
    hang();
    return 0;
}

static int infer_type_hang(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    hang();
    return 0;
}

static int backward_hang(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    hang();
    return 0;
}

static int create_hang(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *s, const int32_t *d,
                       void **state)
{
    (void)ctx, (void)n_in, (void)s, (void)d, (void)state;
    hang();
    return 0;
}

static int create_ok(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *s, const int32_t *d,
                     void **state)
{
    (void)n_in, (void)s, (void)d;
    *state = malloc(16);
    return *state != NULL ? 0 : host->set_error(ctx, MXOP_ENOMEM, "hang_cb: no memory");
}

static int state_copy(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in, int n_out,
                      mxop_tensor_t *out)
{
    (void)state;
    return copy(ctx, n_in, in, n_out, out);
}

static void destroy_hang(void *state)
{
    (void)state;
    hang();
}

static void destroy_ok(void *state)
{
    free(state);
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t defs[6] = {
        {.name = "hang_infer", .forward = copy, .infer_shape = infer_hang},
        {.name = "hang_backward", .forward = copy, .backward = backward_hang},
        {.name = "hang_create",
         .state_create = create_hang,
         .state_forward = state_copy,
         .state_destroy = destroy_ok},
        {.name = "hang_destroy",
         .state_create = create_ok,
         .state_forward = state_copy,
         .state_destroy = destroy_hang},
        {.name = "hang_attrs", .forward = copy, .check_attrs = attrs_hang},
        {.name = "hang_infer_type", .forward = copy, .infer_type = infer_type_hang},
    };
    for (int i = 0; i < 6; i++) {
        defs[i].struct_size = sizeof(mxop_op_def_t);
        defs[i].description = "hangs in one callback (tests/plugins/hang_cb.c)";
        defs[i].num_inputs = 1;
        defs[i].num_outputs = 1;
        int rc = host->register_op(ctx, &defs[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}
