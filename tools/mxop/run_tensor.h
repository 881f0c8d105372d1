/*
 * Tensors for `mxop run` and `mxop verify`: dtype and shape syntax, seeded
 * random contents, checksums, element access as double, and .npy files.
 *
 * Shape syntax (the command line's SHAPE): dimensions joined by 'x', e.g.
 * "2x3"; "0x3" is empty; "" or "scalar" is 0-d.  Dtypes are the short
 * names of MXOP_DTYPE_MAP ("f32", "bf16", ...).
 *
 * .npy: format 1.0 written (1.0, 2.0 and 3.0 read), C order, little
 * endian.  numpy has no bfloat16, so a bf16 tensor is written as '<u2'
 * (its raw bits) and a '<u2' file is read as bf16 when bf16 is asked for.
 */
#ifndef MXOP_TOOLS_RUN_TENSOR_H
#define MXOP_TOOLS_RUN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "mxop/types.h"

/* The dtype named `name`, or -1. */
int mxop__run_dtype_parse(const char *name);

/* Parses "2x3", "", "scalar" into *shape; 0, or -1 on a malformed shape. */
int mxop__run_shape_parse(const char *text, mxop_shape_t *shape);

/* Elements of a shape (1 for 0-d). */
size_t mxop__run_numel(int32_t ndim, const int64_t *dims);

/* A splitmix64 stream: the same seed gives the same contents everywhere. */
uint64_t mxop__run_rand(uint64_t *state);

/*
 * Fills `n` elements of `dtype` at `data` from the stream: floats uniform
 * in [-1, 1), signed integers in [-8, 8), u8 in [0, 16), bool 0 or 1.
 */
void mxop__run_fill_random(void *data, int32_t dtype, size_t n, uint64_t *state);

/* Element i as a double (f16/bf16 converted; bool 0/1). */
double mxop__run_get(const void *data, int32_t dtype, size_t i);

/* Stores v (rounded or truncated to the dtype) as element i. */
void mxop__run_set(void *data, int32_t dtype, size_t i, double v);

/* FNV-1a 64 of `n` bytes. */
uint64_t mxop__run_fnv1a64(const void *data, size_t n);

/* The sum of the elements as doubles, in index order. */
double mxop__run_sum(const void *data, int32_t dtype, size_t n);

/*
 * Reads a .npy file: *dtype, *shape and a malloc'd *data (freed by the
 * caller) of *nbytes.  `want` is the dtype the caller asks for (-1: any),
 * so that a '<u2' file reads as bf16.  Returns 0, or -1 with a message in
 * err naming what was wrong.
 */
int mxop__npy_read(const char *path, int want, int32_t *dtype, mxop_shape_t *shape, void **data,
                   size_t *nbytes, char *err, size_t errlen);

/* Writes a .npy file; 0, or -1 with a message in err. */
int mxop__npy_write(const char *path, int32_t dtype, int32_t ndim, const int64_t *dims,
                    const void *data, size_t nbytes, char *err, size_t errlen);

#endif
