/*
 * common/abi_layout_hpp.cc - the public structs' layout as C++ sees it.
 *
 * A C++ op library (op.hpp) and a C++ engine share the structs with the C
 * worker and libmxop: this compiles the same table as common/abi_layout.c
 * with the C++ compiler, through op.hpp, so that the two languages cannot
 * disagree on a layout.  Compiled by `make all`; nothing here runs.
 */
#include <cstddef>
#include <type_traits>

#include "common/abi_layout.h"
#include "mxop/op.hpp"

/* In C++ a function named like its struct (mxop_stats) "hides" the struct's
 * implicit constructor: harmless for a C API, and not ours to rename. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#include "mxop/client.h"
#pragma GCC diagnostic pop

#if defined(__LP64__)
#define SIZE_OK(type, size, align)                                                                 \
    static_assert(sizeof(type) == (size), #type " changed size (see common/abi_layout.h)");        \
    static_assert(alignof(type) == (align), #type " changed alignment");
#define OFFSET_OK(type, member, off)                                                               \
    static_assert(offsetof(type, member) == (off), #type "." #member " moved");
MXOP__ABI_SIZES(SIZE_OK)
MXOP__ABI_OFFSETS(OFFSET_OK)
#endif

static_assert(std::is_standard_layout<mxop_tensor_t>::value &&
                  std::is_standard_layout<mxop_op_def_t>::value &&
                  std::is_standard_layout<mxop_host_t>::value,
              "the plugin ABI's structs are plain C structs in C++ too");
