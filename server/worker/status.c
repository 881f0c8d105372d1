/*
 * server/worker/status.c - publishing the call in flight in the status page.
 *
 * The daemon's watchdog reads the page without any lock, so the worker
 * writes it as a seqlock: seq turns odd, the fields change, seq turns even
 * again.  A reader that sees the same even seq before and after its reads
 * has a consistent call.
 */
#include <stdatomic.h>
#include <string.h>

#include "common/util.h"
#include "server/worker/worker.h"

static mxop__status_page_t *page;

void mxop__status_set(mxop__status_page_t *p)
{
    page = p;
}

mxop__status_page_t *mxop__status_page(void)
{
    return page;
}

static uint32_t write_begin(void)
{
    uint32_t s = atomic_load_explicit(&page->seq, memory_order_relaxed);
    atomic_store_explicit(&page->seq, s + 1, memory_order_relaxed);
    /* The odd seq must be visible before any field changes. */
    atomic_thread_fence(memory_order_release);
    return s + 2;
}

static void write_end(uint32_t s)
{
    atomic_store_explicit(&page->seq, s, memory_order_release);
}

void mxop__status_begin(uint64_t call_id, const char *op, uint32_t deadline_ms)
{
    if (page == NULL)
        return;
    int64_t now = mxop__now_ns();
    uint32_t s = write_begin();
    page->call_id = call_id;
    size_t n = strnlen(op, MXOP__STATUS_OP_MAX - 1);
    memcpy(page->op, op, n);
    memset(page->op + n, 0, MXOP__STATUS_OP_MAX - n);
    page->start_ns = now;
    page->deadline_ns = deadline_ms != 0 ? now + (int64_t)deadline_ms * 1000000 : 0;
    memset(page->callback, 0, sizeof(page->callback));
    atomic_store_explicit(&page->busy, 1, memory_order_relaxed);
    write_end(s);
}

void mxop__status_callback(const char *name)
{
    if (page == NULL)
        return;
    /* A plain store of a short name: the daemon reads it only to quote it, checking each byte. */
    size_t n = strnlen(name, MXOP__STATUS_CB_MAX - 1);
    memcpy(page->callback, name, n);
    memset(page->callback + n, 0, MXOP__STATUS_CB_MAX - n);
}

void mxop__status_inputs(int n, const mxop_tensor_t *t)
{
    if (page == NULL)
        return;
    /* Plain stores, a few dozen bytes a call: only quoted after a crash, each field checked. */
    page->in_count = n > 0 ? (uint32_t)n : 0;
    for (int i = 0; i < n && i < MXOP__STATUS_IN_MAX; i++) {
        page->in_dtype[i] = t[i].dtype;
        page->in_ndim[i] = t[i].ndim;
        for (int k = 0; k < t[i].ndim && k < MXOP__STATUS_DIMS_MAX; k++)
            page->in_dims[i][k] = t[i].shape[k];
    }
}

void mxop__status_end(void)
{
    if (page == NULL)
        return;
    uint32_t s = write_begin();
    atomic_store_explicit(&page->busy, 0, memory_order_relaxed);
    write_end(s);
}
