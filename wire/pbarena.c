/*
 * wire/pbarena.c - a bump allocator for protobuf-c unpacking.
 *
 * protobuf-c allocates every unpacked submessage and repeated field
 * separately; with malloc that is a dozen allocations per invoke.  Here
 * they come from one buffer that is reset before the next unpack.
 */
#include "wire/frame.h"

#include <stdlib.h>
#include <string.h>

#include "mxop/errors.h"

#define ALIGN 16

struct overflow_block {
    struct overflow_block *next;
    max_align_t data[];
};

static void *arena_alloc(void *opaque, size_t size)
{
    mxop__pbarena_t *a = opaque;
    size_t need = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (need < size)
        return NULL;
    if (a->cap - a->used >= need) {
        void *p = a->buf + a->used;
        a->used += need;
        return p;
    }
    /* Rare: a message bigger than the arena.  Freed at the next reset. */
    struct overflow_block *b = malloc(sizeof(*b) + size);
    if (b == NULL)
        return NULL;
    b->next = a->overflow;
    a->overflow = b;
    return b->data;
}

static void arena_free(void *opaque, void *ptr)
{
    /* Everything is released at once by mxop__pbarena_reset. */
    (void)opaque;
    (void)ptr;
}

int mxop__pbarena_init(mxop__pbarena_t *a, size_t cap)
{
    memset(a, 0, sizeof(*a));
    a->buf = aligned_alloc(ALIGN, (cap + ALIGN - 1) & ~(size_t)(ALIGN - 1));
    if (a->buf == NULL)
        return MXOP_ENOMEM;
    a->cap = cap;
    a->allocator.alloc = arena_alloc;
    a->allocator.free = arena_free;
    a->allocator.allocator_data = a;
    return 0;
}

void mxop__pbarena_reset(mxop__pbarena_t *a)
{
    struct overflow_block *b = a->overflow;
    while (b != NULL) {
        struct overflow_block *next = b->next;
        free(b);
        b = next;
    }
    a->overflow = NULL;
    a->used = 0;
}

void mxop__pbarena_destroy(mxop__pbarena_t *a)
{
    if (a == NULL || a->buf == NULL)
        return;
    mxop__pbarena_reset(a);
    free(a->buf);
    a->buf = NULL;
    a->cap = 0;
}
