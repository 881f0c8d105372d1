/*
 * shm/desc.c - overflow-safe extent and bounds checks for tensor descriptors.
 */
#include "shm/desc.h"

#include <stdio.h>

#include "mxop/types.h"

int mxop__desc_span(int32_t dtype, int32_t ndim, const int64_t *shape, const int64_t *strides,
                    uint64_t *span, uint64_t *elems, char *err, size_t errlen)
{
    size_t esize = mxop_dtype_size(dtype);
    if (esize == 0) {
        snprintf(err, errlen, "unknown dtype %d", (int)dtype);
        return MXOP_EDTYPE;
    }
    if (ndim < 0 || ndim > MXOP_MAX_DIMS) {
        snprintf(err, errlen, "%d dimensions (at most %d)", (int)ndim, MXOP_MAX_DIMS);
        return MXOP_EINVAL;
    }
    uint64_t count = 1, last = 0; /* last: index of the furthest element */
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            snprintf(err, errlen, "dimension %d is negative (%lld)", i, (long long)shape[i]);
            return MXOP_EINVAL;
        }
        if (shape[i] == 0)
            empty = 1;
        if (__builtin_mul_overflow(count, (uint64_t)shape[i], &count))
            goto overflow;
        if (strides != NULL && shape[i] > 0) {
            if (strides[i] < 0) {
                snprintf(err, errlen, "stride %d is negative (%lld)", i, (long long)strides[i]);
                return MXOP_EINVAL;
            }
            uint64_t reach;
            if (__builtin_mul_overflow((uint64_t)(shape[i] - 1), (uint64_t)strides[i], &reach) ||
                __builtin_add_overflow(last, reach, &last))
                goto overflow;
        }
    }
    if (empty) {
        *span = 0;
        *elems = 0;
        return 0;
    }
    uint64_t n = strides != NULL ? last + 1 : count;
    if (__builtin_mul_overflow(n, (uint64_t)esize, span))
        goto overflow;
    *elems = count;
    return 0;

overflow:
    snprintf(err, errlen, "tensor size overflows 64 bits");
    return MXOP_EINVAL;
}

int mxop__desc_check_bounds(uint64_t offset, uint64_t span, size_t elem_size, uint64_t region_size,
                            char *err, size_t errlen)
{
    if (elem_size > 0 && offset % elem_size != 0) {
        snprintf(err, errlen, "offset %llu is not aligned to the element size %zu",
                 (unsigned long long)offset, elem_size);
        return MXOP_EBOUNDS;
    }
    uint64_t end;
    if (__builtin_add_overflow(offset, span, &end) || end > region_size || offset > region_size) {
        snprintf(err, errlen, "bytes [%llu, %llu) lie outside the region of %llu bytes",
                 (unsigned long long)offset, (unsigned long long)(offset + span),
                 (unsigned long long)region_size);
        return MXOP_EBOUNDS;
    }
    return 0;
}
