/*
 * shm/desc.h - tensor descriptor checks.
 *
 * Every (region, offset, dtype, shape, strides) that arrives in the worker is
 * checked here, with overflow-safe arithmetic and no syscalls, before an op
 * sees a pointer.
 */
#ifndef MXOP_SHM_DESC_H
#define MXOP_SHM_DESC_H

#include <stddef.h>
#include <stdint.h>

/**
 * Computes the bytes a tensor spans from its first element: for contiguous
 * (strides NULL) the product of shape times the element size; for strided,
 * 1 + sum((shape[i]-1) * strides[i]) elements (negative strides refused).
 * A tensor with a zero dimension spans 0 bytes.
 * Returns 0, or MXOP_EINVAL / MXOP_EDTYPE with a reason in err.
 */
int mxop__desc_span(int32_t dtype, int32_t ndim, const int64_t *shape, const int64_t *strides,
                    uint64_t *span, uint64_t *elems, char *err, size_t errlen);

/**
 * Checks a tensor of `span` bytes at `offset` against a region of
 * `region_size` bytes, and that `offset` is aligned to the element size.
 * Returns 0 or MXOP_EBOUNDS with a reason in err.
 */
int mxop__desc_check_bounds(uint64_t offset, uint64_t span, size_t elem_size, uint64_t region_size,
                            char *err, size_t errlen);

#endif /* MXOP_SHM_DESC_H */
