/*
 * server/worker/attrs.c - declared attributes: copied at registration,
 * checked before every call, and the one parser of attribute values.
 *
 * An op that declares its attributes (mxop_op_def_t.attrs, ABI version 2)
 * gets every call's attributes checked here before any of its callbacks
 * runs, so that a misspelt keyword is refused instead of silently ignored.
 * The same parsers serve the host's typed readers (host.c), so that a value
 * the check accepts is always one the reader can read.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "server/worker/worker.h"

/* A declaration's strings longer than these are refused at registration. */
#define ATTR_NAME_MAX 63
#define ATTR_TEXT_MAX 1024

/* ------------------------------------------------------------------------ */
/* Parsing values. */

/* strtoll and strtod skip leading blanks; a strict parse must not. */
static int starts_badly(const char *v)
{
    return v[0] == '\0' || isspace((unsigned char)v[0]);
}

int mxop__attr_parse_int(const char *v, int64_t *out, const char **why)
{
    char *end = NULL;
    errno = 0;
    long long x = starts_badly(v) ? 0 : strtoll(v, &end, 10);
    if (starts_badly(v) || *end != '\0') {
        *why = "is not an integer";
        return MXOP_EATTR;
    }
    if (errno == ERANGE) {
        *why = "is out of range for a 64-bit integer";
        return MXOP_EATTR;
    }
    *out = (int64_t)x;
    return 0;
}

int mxop__attr_parse_float(const char *v, double *out, const char **why)
{
    char *end = NULL;
    errno = 0;
    double x = starts_badly(v) ? 0 : strtod(v, &end);
    if (starts_badly(v) || *end != '\0') {
        *why = "is not a number";
        return MXOP_EATTR;
    }
    /* Underflow (a tiny value rounded) is fine; overflow is not a value. */
    if (errno == ERANGE && isinf(x)) {
        *why = "is out of range";
        return MXOP_EATTR;
    }
    /* strtod reads "nan", "inf" and "infinity"; a float attribute is a
     * finite number (op.h, the op author's guide), so no op has to check. */
    if (!isfinite(x)) {
        *why = "is not a finite number";
        return MXOP_EATTR;
    }
    *out = x;
    return 0;
}

int mxop__attr_parse_bool(const char *v, int *out, const char **why)
{
    /* Case-insensitive, so that Python's str(True) passes too. */
    if (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0) {
        *out = 1;
        return 0;
    }
    if (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0) {
        *out = 0;
        return 0;
    }
    *why = "is not a boolean (1, 0, true or false)";
    return MXOP_EATTR;
}

int mxop__attr_parse_list(const char *v, int floats, int64_t *iv, double *dv, int cap, int *n,
                          const char **why)
{
    char buf[ATTR_TEXT_MAX + 1];
    size_t len = strlen(v);
    *n = 0;
    if (len > ATTR_TEXT_MAX) {
        *why = "is too long for a list";
        return MXOP_EATTR;
    }
    memcpy(buf, v, len + 1);

    /* One pair of brackets or parentheses around the list is allowed. */
    char *s = buf;
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    if ((*s == '(' && e > s && e[-1] == ')') || (*s == '[' && e > s && e[-1] == ']')) {
        s++;
        *--e = '\0';
    }
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '\0')
        return 0;

    for (;;) {
        char *comma = strchr(s, ',');
        if (comma != NULL)
            *comma = '\0';
        char *t = s;
        while (isspace((unsigned char)*t))
            t++;
        char *te = t + strlen(t);
        while (te > t && isspace((unsigned char)te[-1]))
            *--te = '\0';
        /* A trailing comma, as in Python's (3,), ends the list. */
        if (*t == '\0' && comma == NULL && *n > 0)
            return 0;
        if (*n >= cap) {
            *why = "has more entries than the op can take";
            return MXOP_EATTR;
        }
        int rc = floats ? mxop__attr_parse_float(t, &dv[*n], why)
                        : mxop__attr_parse_int(t, &iv[*n], why);
        if (rc != 0) {
            if (!floats)
                *why = "is not a list of integers";
            else if (strcmp(*why, "is not a finite number") == 0)
                *why = "is not a list of finite numbers";
            else
                *why = "is not a list of numbers";
            return rc;
        }
        (*n)++;
        if (comma == NULL)
            return 0;
        s = comma + 1;
    }
}

const char *mxop__attr_type_name(int32_t type)
{
    switch (type) {
    case MXOP_ATTR_INT: return "int";
    case MXOP_ATTR_FLOAT: return "float";
    case MXOP_ATTR_BOOL: return "bool";
    case MXOP_ATTR_STRING: return "string";
    case MXOP_ATTR_INT_LIST: return "int list";
    case MXOP_ATTR_FLOAT_LIST: return "float list";
    default: return NULL;
    }
}

/* Whether `v` parses as `type`; *why says why not. */
static int check_value(int32_t type, const char *v, const char **why)
{
    int64_t i;
    double d;
    int b, n;
    static int64_t iv[MXOP__W_MAX_LIST];
    static double dv[MXOP__W_MAX_LIST];
    switch (type) {
    case MXOP_ATTR_INT: return mxop__attr_parse_int(v, &i, why);
    case MXOP_ATTR_FLOAT: return mxop__attr_parse_float(v, &d, why);
    case MXOP_ATTR_BOOL: return mxop__attr_parse_bool(v, &b, why);
    case MXOP_ATTR_STRING: return 0;
    case MXOP_ATTR_INT_LIST: return mxop__attr_parse_list(v, 0, iv, dv, MXOP__W_MAX_LIST, &n, why);
    case MXOP_ATTR_FLOAT_LIST:
        return mxop__attr_parse_list(v, 1, iv, dv, MXOP__W_MAX_LIST, &n, why);
    default: *why = "has an unknown type"; return MXOP_EATTR;
    }
}

/* ------------------------------------------------------------------------ */
/* Registration. */

static int valid_attr_name(const char *s)
{
    size_t len = strnlen(s, ATTR_NAME_MAX + 1);
    if (len == 0 || len > ATTR_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return 0;
    return 1;
}

static char *dup_text(const char *s)
{
    return strndup(s != NULL ? s : "", ATTR_TEXT_MAX);
}

void mxop__attrs_free(mxop__worker_op_t *op)
{
    for (int i = 0; i < op->n_decls; i++) {
        free((char *)op->decls[i].name);
        free((char *)op->decls[i].default_value);
        free((char *)op->decls[i].doc);
    }
    free(op->decls);
    free(op->pb_decls);
    free(op->pb_ptrs);
    op->decls = NULL;
    op->pb_decls = NULL;
    op->pb_ptrs = NULL;
    op->n_decls = 0;
    op->def.attrs = NULL;
    op->def.num_attrs = 0;
}

/* Builds the wire form of the declarations, pointing into op->decls. */
static int make_wire(mxop__worker_op_t *op)
{
    int n = op->n_decls;
    op->pb_decls = calloc((size_t)n, sizeof(*op->pb_decls));
    op->pb_ptrs = calloc((size_t)n, sizeof(*op->pb_ptrs));
    if (op->pb_decls == NULL || op->pb_ptrs == NULL)
        return MXOP_ENOMEM;
    for (int i = 0; i < n; i++) {
        const mxop_attr_decl_t *d = &op->decls[i];
        Mxop__AttrDecl *p = &op->pb_decls[i];
        mxop__attr_decl__init(p);
        p->name = (char *)d->name;
        p->type = d->type;
        p->required = d->required != 0;
        p->has_default = d->default_value != NULL;
        p->default_value = (char *)(d->default_value != NULL ? d->default_value : "");
        p->doc = (char *)d->doc;
        op->pb_ptrs[i] = p;
    }
    return 0;
}

int mxop__attrs_copy(mxop__worker_op_t *op, char *msg, size_t msglen)
{
    const mxop_attr_decl_t *src = op->def.attrs;
    int32_t n = op->def.num_attrs;
    op->def.attrs = NULL;
    op->def.num_attrs = 0;
    op->decls = NULL;
    op->pb_decls = NULL;
    op->pb_ptrs = NULL;
    op->n_decls = 0;
    if (n == 0)
        return 0;
    if (n < 0 || n > MXOP__W_MAX_ATTRS) {
        mxop__fmt(msg, msglen, "op '%s': num_attrs %d is outside [0, %d]", op->name, n,
                  MXOP__W_MAX_ATTRS);
        return MXOP_EINVAL;
    }
    if (src == NULL) {
        mxop__fmt(msg, msglen, "op '%s': num_attrs is %d but attrs is NULL", op->name, n);
        return MXOP_EINVAL;
    }

    /* Check everything before copying anything, so that failures need no cleanup. */
    for (int i = 0; i < n; i++) {
        const mxop_attr_decl_t *d = &src[i];
        const char *why = NULL;
        if (d->name == NULL || !valid_attr_name(d->name)) {
            mxop__fmt(msg, msglen,
                      "op '%s': attribute %d has %s name (it needs 1 to %d of [A-Za-z0-9_])",
                      op->name, i, d->name == NULL ? "a NULL" : "an invalid", ATTR_NAME_MAX);
            return MXOP_EINVAL;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(src[j].name, d->name) == 0) {
                mxop__fmt(msg, msglen, "op '%s': attribute '%s' is declared twice", op->name,
                          d->name);
                return MXOP_EINVAL;
            }
        }
        if (mxop__attr_type_name(d->type) == NULL) {
            mxop__fmt(msg, msglen,
                      "op '%s': attribute '%s' has type %d, not one of enum mxop_attr_type (1 to "
                      "6)",
                      op->name, d->name, d->type);
            return MXOP_EINVAL;
        }
        if (d->required && d->default_value != NULL) {
            mxop__fmt(msg, msglen,
                      "op '%s': attribute '%s' is required and has a default; it may be only one",
                      op->name, d->name);
            return MXOP_EINVAL;
        }
        if (d->default_value != NULL && check_value(d->type, d->default_value, &why) != 0) {
            mxop__fmt(msg, msglen, "op '%s': the default of attribute '%s' ('%.200s') %s for a %s",
                      op->name, d->name, d->default_value, why, mxop__attr_type_name(d->type));
            return MXOP_EINVAL;
        }
    }

    op->decls = calloc((size_t)n, sizeof(*op->decls));
    if (op->decls == NULL)
        goto nomem;
    for (int i = 0; i < n; i++) {
        mxop_attr_decl_t *d = &op->decls[i];
        d->type = src[i].type;
        d->required = src[i].required ? 1 : 0;
        d->name = dup_text(src[i].name);
        d->doc = dup_text(src[i].doc);
        d->default_value = src[i].default_value != NULL ? dup_text(src[i].default_value) : NULL;
        op->n_decls = i + 1;
        if (d->name == NULL || d->doc == NULL ||
            (src[i].default_value != NULL && d->default_value == NULL))
            goto nomem;
    }
    if (make_wire(op) != 0)
        goto nomem;
    op->def.attrs = op->decls;
    op->def.num_attrs = n;
    return 0;

nomem:
    mxop__attrs_free(op);
    mxop__fmt(msg, msglen, "out of memory copying the attributes of op '%s'", op->name);
    return MXOP_ENOMEM;
}

/* ------------------------------------------------------------------------ */
/* Calls. */

const mxop_attr_decl_t *mxop__attr_decl_find(const mxop__worker_op_t *op, const char *key)
{
    if (op == NULL || key == NULL)
        return NULL;
    for (int i = 0; i < op->n_decls; i++)
        if (strcmp(op->decls[i].name, key) == 0)
            return &op->decls[i];
    return NULL;
}

/* "axis (int, default -1), alpha (float, required)" into buf. */
static void describe_decls(const mxop__worker_op_t *op, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < op->n_decls && at < len; i++) {
        const mxop_attr_decl_t *d = &op->decls[i];
        if (d->default_value != NULL)
            mxop__fmt(buf + at, len - at, "%s%s (%s, default '%.40s')", i ? ", " : "", d->name,
                      mxop__attr_type_name(d->type), d->default_value);
        else
            mxop__fmt(buf + at, len - at, "%s%s (%s%s)", i ? ", " : "", d->name,
                      mxop__attr_type_name(d->type), d->required ? ", required" : "");
        at += strlen(buf + at);
    }
}

int mxop__attrs_validate(const mxop__worker_op_t *op, int n, const char *const *keys,
                         const char *const *vals, char *msg, size_t msglen)
{
    if (op->n_decls == 0)
        return 0;
    /* The list of known attributes is formatted only for a message. */
    char known[600];
    for (int i = 0; i < n; i++) {
        const mxop_attr_decl_t *d = mxop__attr_decl_find(op, keys[i]);
        const char *why = NULL;
        if (d == NULL) {
            describe_decls(op, known, sizeof(known));
            mxop__fmt(msg, msglen, "op '%s' has no attribute '%.100s'; it knows: %s", op->name,
                      keys[i], known);
            return MXOP_EATTR;
        }
        if (check_value(d->type, vals[i], &why) != 0) {
            describe_decls(op, known, sizeof(known));
            mxop__fmt(msg, msglen,
                      "op '%s': attribute '%s' = '%.100s' %s (declared %s); it knows: %s", op->name,
                      d->name, vals[i], why, mxop__attr_type_name(d->type), known);
            return MXOP_EATTR;
        }
    }
    for (int k = 0; k < op->n_decls; k++) {
        const mxop_attr_decl_t *d = &op->decls[k];
        if (!d->required)
            continue;
        int given = 0;
        for (int i = 0; i < n && !given; i++)
            given = strcmp(keys[i], d->name) == 0;
        if (!given) {
            describe_decls(op, known, sizeof(known));
            mxop__fmt(msg, msglen, "op '%s': required attribute '%s' (%s) is missing; it knows: %s",
                      op->name, d->name, mxop__attr_type_name(d->type), known);
            return MXOP_EATTR;
        }
    }
    return 0;
}
