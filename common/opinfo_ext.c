/*
 * common/opinfo_ext.c - copies of the OpInfo fields appended after the
 * first protocol; see opinfo_ext.h.
 */
#include <stdlib.h>
#include <string.h>

#include "common/opinfo_ext.h"
#include "mxop/errors.h"

void mxop__opinfo_ext_free(Mxop__OpInfo *dst)
{
    for (size_t i = 0; i < dst->n_attrs; i++) {
        if (dst->attrs[i] == NULL)
            continue;
        free(dst->attrs[i]->name);
        free(dst->attrs[i]->default_value);
        free(dst->attrs[i]->doc);
        free(dst->attrs[i]);
    }
    free(dst->attrs);
    dst->attrs = NULL;
    dst->n_attrs = 0;
}

static char *dup_or_empty(const char *s)
{
    return strdup(s != NULL ? s : "");
}

int mxop__opinfo_ext_copy(Mxop__OpInfo *dst, const Mxop__OpInfo *src)
{
    dst->flags = src->flags;
    dst->dynamic_outputs = src->dynamic_outputs;
    dst->attrs = NULL;
    dst->n_attrs = 0;
    if (src->n_attrs == 0)
        return 0;
    dst->attrs = calloc(src->n_attrs, sizeof(*dst->attrs));
    if (dst->attrs == NULL)
        return MXOP_ENOMEM;
    for (size_t i = 0; i < src->n_attrs; i++) {
        const Mxop__AttrDecl *s = src->attrs[i];
        Mxop__AttrDecl *d = calloc(1, sizeof(*d));
        dst->attrs[i] = d;
        dst->n_attrs = i + 1;
        if (d == NULL || s == NULL)
            goto fail;
        mxop__attr_decl__init(d);
        d->type = s->type;
        d->required = s->required;
        d->has_default = s->has_default;
        d->name = dup_or_empty(s->name);
        d->default_value = dup_or_empty(s->default_value);
        d->doc = dup_or_empty(s->doc);
        if (d->name == NULL || d->default_value == NULL || d->doc == NULL)
            goto fail;
    }
    return 0;
fail:
    mxop__opinfo_ext_free(dst);
    return MXOP_ENOMEM;
}
