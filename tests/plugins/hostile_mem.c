/*
 * tests/plugins/hostile_mem.c - a library that makes its read-only input
 * writable with mprotect() and then changes it.
 *
 *   mprotect_write  1 input, 1 output (f32, at least 1 element).  mprotect
 *                   the pages of in[0] PROT_READ|PROT_WRITE (out[0] = 0, or
 *                   -errno when refused), then flips a bit of every byte of
 *                   in[0] and returns 0.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_mem", "1.0");

static const mxop_host_t *host;

static int mprotect_write_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                                  mxop_tensor_t *out)
{
    size_t len = in[0].size * mxop_dtype_size(in[0].dtype);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)in[0].data & ~(page - 1);
    uintptr_t end = ((uintptr_t)in[0].data + len + page - 1) & ~(page - 1);
    int rc = mprotect((void *)start, end - start, PROT_READ | PROT_WRITE);
    ((float *)out[0].data)[0] = rc == 0 ? 0.0f : -(float)errno;
    volatile unsigned char *p = in[0].data;
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(p[i] ^ 1);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "mprotect_write",
        .description = "mprotects its input writable and changes it",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = mprotect_write_forward,
    };
    return host->register_op(ctx, &def);
}
