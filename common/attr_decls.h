/*
 * common/attr_decls.h - deep copies of an OpInfo's declared attributes.
 *
 * The daemon keeps each op's OpInfo after the worker's load reply is freed,
 * and the client keeps the declarations for mxop_op_attr; both copy them
 * through these two functions, so that a new AttrDecl field needs one edit.
 */
#ifndef MXOP_COMMON_ATTR_DECLS_H
#define MXOP_COMMON_ATTR_DECLS_H

#include "common.pb-c.h"

/** dst->attrs = a deep copy of src->attrs.  MXOP_ENOMEM leaves dst with none. */
int mxop__attr_decls_copy(Mxop__OpInfo *dst, const Mxop__OpInfo *src);

/** Frees what mxop__attr_decls_copy made (and sets dst to none). */
void mxop__attr_decls_free(Mxop__OpInfo *dst);

#endif /* MXOP_COMMON_ATTR_DECLS_H */
