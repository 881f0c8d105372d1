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
 *   forge_idle_hang    writes "no call in flight" (busy 0) into the status
 *                      page, then hangs
 *   forge_odd_hang     leaves the page's seqlock odd, then hangs
 *   forge_future_hang  writes deadline 0 and a start time an hour ahead,
 *                      then hangs
 *               Each must still be killed at the call's deadline, which
 *               the watchdog takes from the client, never from this page.
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
#include "../../shm/status_page.h" /* the layout any op of the worker can see */

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

static int forge_hang(int how)
{
    mxop__status_page_t *page = find_page();
    if (page != NULL) {
        if (how == 0) {
            atomic_store(&page->busy, 0);
            page->call_id = 0;
        } else if (how == 1) {
            atomic_store(&page->seq, atomic_load(&page->seq) | 1u);
        } else {
            page->deadline_ns = 0;
            page->start_ns += 3600LL * 1000000000LL;
        }
    }
    for (;;)
        sleep(1);
    return 0;
}

static int forge_idle_hang(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    return forge_hang(0);
}

static int forge_odd_hang(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    return forge_hang(1);
}

static int forge_future_hang(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                             mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)in, (void)n_out, (void)out;
    return forge_hang(2);
}

MXOP_PLUGIN_INIT(ctx, host)
{
    static const struct {
        const char *name;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } hangs[] = {{"forge_idle_hang", forge_idle_hang},
                 {"forge_odd_hang", forge_odd_hang},
                 {"forge_future_hang", forge_future_hang}};
    for (size_t i = 0; i < sizeof(hangs) / sizeof(hangs[0]); i++) {
        mxop_op_def_t d = {.struct_size = sizeof(mxop_op_def_t),
                           .name = hangs[i].name,
                           .description = "forges the status page, then hangs",
                           .num_inputs = 1,
                           .num_outputs = 1,
                           .forward = hangs[i].fn};
        int rc = host->register_op(ctx, &d);
        if (rc != 0)
            return rc;
    }
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
