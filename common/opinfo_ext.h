/*
 * common/opinfo_ext.h - deep copies of an OpInfo's declared attributes.
 *
 * The daemon keeps each op's OpInfo after the worker's load reply is freed,
 * and the client keeps the declarations for mxop_op_attr; both copy them
 * through these two functions, so that a new AttrDecl field needs one edit.
 */
#ifndef MXOP_COMMON_OPINFO_EXT_H
#define MXOP_COMMON_OPINFO_EXT_H

#include "common.pb-c.h"

/**
 * Copies src's appended fields into dst: flags, dynamic_outputs, and a
 * deep copy of attrs.
 * MXOP_ENOMEM leaves dst with no attrs.
 */
int mxop__opinfo_ext_copy(Mxop__OpInfo *dst, const Mxop__OpInfo *src);

/** Frees what mxop__opinfo_ext_copy made (and sets dst to none). */
void mxop__opinfo_ext_free(Mxop__OpInfo *dst);

#endif /* MXOP_COMMON_OPINFO_EXT_H */
