/*
 * tests/plugins/forge_note.c - an op that lies about its own death.
 *
 *   forge_segv  writes a fault note claiming MXOP_EDISCONNECTED ("the daemon
 *               went away") into the worker's status page, then segfaults.
 *               The daemon must answer from what it observed (SIGSEGV:
 *               MXOP_EWORKER_CRASHED), the note at most an annotation.
 *   forge_oom_exit  writes a note claiming MXOP_EWORKER_OOM, then exits
 *               with status 5: no fault signal, so no out-of-memory verdict.
 *
 * The status page is found as the worker's mapping of the memfd named
 * "mxop-status" in /proc/self/maps: memory any op of the worker can write.
 * Ops expect 1 f32 input and 1 output.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mxop/errors.h"
#include "mxop/op.h"
#include "../../server/status_page.h" /* the layout any op of the worker can see */

MXOP_PLUGIN("forge_note", "1.0");

static int *volatile bad_pointer;

static mxop__status_page_t *find_page(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return NULL;
    char line[512];
    unsigned long lo = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "mxop-status") != NULL && strstr(line, "rw") != NULL) {
            sscanf(line, "%lx-", &lo);
            break;
        }
    }
    fclose(f);
    return (mxop__status_page_t *)lo;
}

static void forge(int code, const char *msg)
{
    mxop__status_page_t *page = find_page();
    if (page == NULL)
        return;
    snprintf(page->fault_msg, sizeof(page->fault_msg), "%s", msg);
    atomic_store(&page->fault_code, code);
}

static int forge_segv(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                      mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    forge(MXOP_EDISCONNECTED, "forged: the daemon disconnected");
    *bad_pointer = 1;
    return 0;
}

static int forge_oom_exit(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    forge(MXOP_EWORKER_OOM, "forged: out of memory");
    _exit(5);
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t a = {.struct_size = sizeof(mxop_op_def_t),
                       .name = "forge_segv",
                       .description = "forges a fault note, then segfaults",
                       .num_inputs = 1,
                       .num_outputs = 1,
                       .forward = forge_segv};
    int rc = host->register_op(ctx, &a);
    if (rc != 0)
        return rc;
    mxop_op_def_t b = {.struct_size = sizeof(mxop_op_def_t),
                       .name = "forge_oom_exit",
                       .description = "forges an out-of-memory note, then exits 5",
                       .num_inputs = 1,
                       .num_outputs = 1,
                       .forward = forge_oom_exit};
    return host->register_op(ctx, &b);
}
