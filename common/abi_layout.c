/*
 * common/abi_layout.c - compile-time checks of the public structs' layout.
 *
 * Nothing here runs: the file is compiled into every binary so that a
 * change to a public struct's layout (common/abi_layout.h) fails the build.
 * Only LP64 targets are tabled; elsewhere the frozen parts are checked by
 * the relations that hold everywhere.
 */
#include <stdalign.h>
#include <stddef.h>

#include "common/abi_layout.h"
#include "mxop/client.h"
#include "mxop/op.h"

#if defined(__LP64__)
#define SIZE_OK(type, size, align)                                                                 \
    _Static_assert(sizeof(type) == (size),                                                         \
                   #type " changed size: a public struct may only grow "                           \
                         "at the end, and its row in abi_layout.h with it");                       \
    _Static_assert(alignof(type) == (align), #type " changed alignment");
#define OFFSET_OK(type, member, off)                                                               \
    _Static_assert(offsetof(type, member) == (off),                                                \
                   #type "." #member " moved: members are appended, never inserted or reordered");
MXOP__ABI_SIZES(SIZE_OK)
MXOP__ABI_OFFSETS(OFFSET_OK)
#endif

/* Everywhere: the versioned structs start with their size. */
_Static_assert(offsetof(mxop_op_def_t, struct_size) == 0, "struct_size leads mxop_op_def_t");
_Static_assert(offsetof(mxop_host_t, struct_size) == 0, "struct_size leads mxop_host_t");
_Static_assert(offsetof(mxop_plugin_info_t, struct_size) == 0,
               "struct_size leads mxop_plugin_info_t");
_Static_assert(offsetof(mxop_plugin_info_t, abi_version) == sizeof(uint32_t),
               "abi_version follows struct_size in mxop_plugin_info_t: a worker of any version "
               "reads it there");
