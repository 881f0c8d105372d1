/*
 * client/op_table.c - the session's op table, and the list of libraries
 * loaded (library.c loads them; a reconnection and the pool's siblings
 * load them again from the list).
 *
 * The table is indexed by OpInfo.index and only grows: an op handle is a
 * pointer to one entry, updated in place when a new OpList arrives, so
 * handles the engine holds stay valid until mxop_close.
 */
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/opinfo_ext.h"
#include "common/util.h"

/* A sanity bound on op indices from the daemon, far above any real session. */
#define MAX_OP_INDEX 65536

/* Replaces *dst with a copy of src, unless they are equal (so strings the
 * engine borrowed through mxop_op_info stay valid as long as they can). */
static int set_str(char **dst, const char *src)
{
    if (src == NULL)
        src = "";
    if (*dst != NULL && strcmp(*dst, src) == 0)
        return 0;
    char *s = strdup(src);
    if (s == NULL)
        return MXOP_ENOMEM;
    free(*dst);
    *dst = s;
    return 0;
}

int mxop__ops_update(mxop_client_t *c, const Mxop__OpList *list)
{
    size_t n = list != NULL ? list->n_ops : 0;
    size_t need = 0;

    for (size_t i = 0; i < n; i++) {
        if (list->ops[i] == NULL || list->ops[i]->index >= MAX_OP_INDEX)
            return mxop__fail(c, MXOP_EPROTOCOL, "mxop-serverd sent an op with a bad index");
        if (list->ops[i]->index + 1 > need)
            need = list->ops[i]->index + 1;
    }
    if (need > c->capops) {
        mxop_op_t **a = realloc(c->ops, need * sizeof *a);
        if (a == NULL)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory growing the op table");
        c->ops = a;
        c->capops = need;
    }
    for (size_t i = c->nops; i < need; i++) {
        c->ops[i] = calloc(1, sizeof *c->ops[i]);
        if (c->ops[i] == NULL)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory growing the op table");
        c->ops[i]->client = c;
        c->ops[i]->index = (uint32_t)i;
        c->nops = i + 1;
    }

    for (size_t i = 0; i < c->nops; i++)
        c->ops[i]->present = 0;
    for (size_t i = 0; i < n; i++) {
        const Mxop__OpInfo *in = list->ops[i];
        mxop_op_t *op = c->ops[in->index];
        if (set_str(&op->name, in->name) < 0 || set_str(&op->description, in->description) < 0 ||
            set_str(&op->library, in->library) < 0)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory copying the op table");
        op->num_inputs = in->num_inputs;
        op->min_inputs = in->min_inputs;
        op->num_outputs = in->num_outputs;
        op->mutated_inputs = in->mutated_inputs;
        op->has_backward = in->has_backward ? 1 : 0;
        op->stateful = in->stateful ? 1 : 0;
        /* A reloaded library may declare differently: the newest list wins. */
        mxop__opinfo_ext_free(&op->decls);
        if (mxop__opinfo_ext_copy(&op->decls, in) != 0)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory copying the op table");
        op->present = 1;
    }
    return 0;
}

void mxop__ops_free(mxop_client_t *c)
{
    for (size_t i = 0; i < c->nops; i++) {
        free(c->ops[i]->name);
        free(c->ops[i]->description);
        free(c->ops[i]->library);
        mxop__opinfo_ext_free(&c->ops[i]->decls);
        free(c->ops[i]);
    }
    free(c->ops);
    c->ops = NULL;
    c->nops = c->capops = 0;
    for (size_t i = 0; i < c->nlibs; i++)
        free(c->libs[i]);
    free(c->libs);
    c->libs = NULL;
    c->nlibs = c->caplibs = 0;
}

void mxop__library_note(mxop_client_t *c, const char *name)
{
    for (size_t i = 0; i < c->nlibs; i++)
        if (strcmp(c->libs[i], name) == 0)
            return; /* loaded again: a no-op, or a reload the siblings see by themselves */
    char *s = strdup(name);
    if (s == NULL)
        return; /* not remembered: a reconnection says its ops are gone, siblings lack it */
    pthread_mutex_lock(&c->libs_lock);
    if (c->nlibs == c->caplibs) {
        size_t cap = c->caplibs ? 2 * c->caplibs : 8;
        char **a = realloc(c->libs, cap * sizeof *a);
        if (a == NULL) {
            pthread_mutex_unlock(&c->libs_lock);
            free(s);
            return;
        }
        c->libs = a;
        c->caplibs = cap;
    }
    c->libs[c->nlibs++] = s;
    pthread_mutex_unlock(&c->libs_lock);
}

size_t mxop__library_count(mxop_client_t *c)
{
    return c->nlibs;
}

const char *mxop__library_at(mxop_client_t *c, size_t i)
{
    return i < c->nlibs ? c->libs[i] : NULL;
}

int mxop__library_copy(mxop_client_t *c, size_t i, char *buf, size_t len)
{
    pthread_mutex_lock(&c->libs_lock);
    int have = i < c->nlibs;
    if (have) {
        strncpy(buf, c->libs[i], len - 1);
        buf[len - 1] = '\0';
    }
    pthread_mutex_unlock(&c->libs_lock);
    return have;
}

int mxop_op_find(mxop_client_t *c, const char *name, const mxop_op_t **op)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    if (op != NULL)
        *op = NULL;
    if (name == NULL || op == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_op_find: %s is NULL", name == NULL ? "name" : "op");
        goto out;
    }
    for (size_t i = 0; i < c->nops; i++) {
        if (c->ops[i]->present && strcmp(c->ops[i]->name, name) == 0) {
            *op = c->ops[i];
            rc = 0;
            goto out;
        }
    }

    /* Name what there is: the usual mistake is a library not loaded. */
    char list[MXOP__ERR_MAX];
    size_t len = 0;
    list[0] = '\0';
    for (size_t i = 0; i < c->nops && len < sizeof list; i++) {
        if (!c->ops[i]->present)
            continue;
        mxop__fmt(list + len, sizeof list - len, "%s%s", len ? ", " : "", c->ops[i]->name);
        len += strlen(list + len);
    }
    rc = mxop__fail(c, MXOP_EUNKNOWN_OP, "no op '%s' loaded in this session; loaded: %s", name,
                    len ? list : "(none)");
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_op_count(mxop_client_t *c)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int n = 0;
    for (size_t i = 0; i < c->nops; i++)
        n += c->ops[i]->present;
    pthread_mutex_unlock(&c->lock);
    return n;
}

const mxop_op_t *mxop_op_at(mxop_client_t *c, int i)
{
    if (c == NULL || i < 0)
        return NULL;
    pthread_mutex_lock(&c->lock);
    const mxop_op_t *op = NULL;
    for (size_t k = 0; k < c->nops; k++) {
        if (!c->ops[k]->present)
            continue;
        if (i-- == 0) {
            op = c->ops[k];
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return op;
}

int mxop_op_info(const mxop_op_t *op, mxop_op_info_t *info)
{
    if (op == NULL || info == NULL)
        return MXOP_EINVAL;
    info->name = op->name != NULL ? op->name : "";
    info->description = op->description != NULL ? op->description : "";
    info->library = op->library != NULL ? op->library : "";
    info->num_inputs = op->num_inputs;
    info->min_inputs = op->min_inputs;
    info->num_outputs = op->num_outputs;
    info->mutated_inputs = op->mutated_inputs;
    info->has_backward = op->has_backward;
    info->stateful = op->stateful;
    return 0;
}

int mxop_op_attr_count(const mxop_op_t *op)
{
    if (op == NULL)
        return MXOP_EINVAL;
    return (int)op->decls.n_attrs;
}

int mxop_op_attr(const mxop_op_t *op, int i, mxop_attr_info_t *info)
{
    if (op == NULL || info == NULL || info->struct_size == 0)
        return MXOP_EINVAL;
    if (i < 0 || (size_t)i >= op->decls.n_attrs)
        return MXOP_EINVAL;
    const Mxop__AttrDecl *d = op->decls.attrs[i];
    mxop_attr_info_t out;
    memset(&out, 0, sizeof(out));
    out.struct_size = info->struct_size < sizeof(out) ? info->struct_size : (uint32_t)sizeof(out);
    out.name = d->name;
    out.type = d->type;
    out.required = d->required ? 1 : 0;
    out.default_value = d->has_default ? d->default_value : NULL;
    out.doc = d->doc;
    /* Write only what the caller's struct has room for. */
    memcpy(info, &out, out.struct_size);
    return 0;
}

uint32_t mxop_op_flags(const mxop_op_t *op)
{
    return op != NULL ? op->decls.flags : 0;
}

uint64_t mxop_op_dynamic_outputs(const mxop_op_t *op)
{
    return op != NULL ? op->decls.dynamic_outputs : 0;
}

int mxop_op_info_v2(const mxop_op_t *op, mxop_op_info_v2_t *info)
{
    if (op == NULL || info == NULL || info->struct_size == 0)
        return MXOP_EINVAL;
    mxop_op_info_v2_t v;
    memset(&v, 0, sizeof(v));
    v.struct_size = info->struct_size < sizeof(v) ? info->struct_size : (uint32_t)sizeof(v);
    v.name = op->name != NULL ? op->name : "";
    v.description = op->description != NULL ? op->description : "";
    v.library = op->library != NULL ? op->library : "";
    v.num_inputs = op->num_inputs;
    v.min_inputs = op->min_inputs;
    v.num_outputs = op->num_outputs;
    v.mutated_inputs = op->mutated_inputs;
    v.has_backward = op->has_backward;
    v.stateful = op->stateful;
    v.flags = op->decls.flags;
    v.num_attrs = (int32_t)op->decls.n_attrs;
    v.dynamic_outputs = op->decls.dynamic_outputs;
    memcpy(info, &v, v.struct_size);
    return 0;
}
