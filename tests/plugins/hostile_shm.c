/*
 * tests/plugins/hostile_shm.c - a library that exhausts memory through
 * shared anonymous mappings, which RLIMIT_DATA does not count.
 *
 *   shm_hog   1 input, 1 output (f32).  Maps attribute mb (default 768) MiB
 *             of MAP_SHARED|MAP_ANONYMOUS memory, touches every page, and
 *             returns 0 with out[0] = the MiB it touched.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_shm", "1.0");

static const mxop_host_t *host;

static int shm_hog_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    const char *a = host->attr_get(ctx, "mb");
    size_t mb = a != NULL ? (size_t)strtoul(a, NULL, 10) : 768;
    size_t len = mb << 20;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return host->set_error(ctx, MXOP_ENOMEM, "shm_hog: mmap of %zu MiB failed", mb);
    long page = sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < len; off += (size_t)page)
        p[off] = 1;
    ((float *)out[0].data)[0] = (float)mb;
    munmap(p, len);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "shm_hog",
        .description = "touches shared anonymous memory beyond any data limit",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = shm_hog_forward,
    };
    return host->register_op(ctx, &def);
}
