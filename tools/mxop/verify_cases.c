/*
 * `mxop verify`: which cases an op accepts, and its attribute declarations.
 * See verify_checks.h.
 */
#include <stdio.h>
#include <string.h>

#include "tools/mxop/verify_checks.h"

/*
 * The shapes tried, every input alike: a matrix, a vector, 0-d, two empty
 * ones and a 3-d one; then pairs a matrix product accepts (also empty), for
 * ops of two inputs.
 */
typedef struct shape_set {
    int pair; /* only for ops of two inputs; else every input gets a[0] */
    mxop_shape_t a[2];
} shape_set_t;

static const shape_set_t shape_sets[] = {
    {0, {{2, {3, 4}}}},
    {0, {{1, {5}}}},
    {0, {{0, {0}}}},
    {0, {{1, {0}}}},
    {0, {{2, {0, 3}}}},
    {0, {{3, {2, 3, 4}}}},
    {1, {{2, {3, 4}}, {2, {4, 2}}}},
    {1, {{2, {0, 4}}, {2, {4, 2}}}},
    {1, {{2, {3, 0}}, {2, {0, 2}}}},
};
#define N_SETS (sizeof(shape_sets) / sizeof(shape_sets[0]))

static const char *type_name(int32_t t)
{
    switch (t) {
    case MXOP_ATTR_INT: return "int";
    case MXOP_ATTR_FLOAT: return "float";
    case MXOP_ATTR_BOOL: return "bool";
    case MXOP_ATTR_STRING: return "string";
    case MXOP_ATTR_INT_LIST: return "int list";
    case MXOP_ATTR_FLOAT_LIST: return "float list";
    default: return "unknown type";
    }
}

static const char *user_value(const mxop__verify_t *v, const char *key)
{
    for (int i = 0; i < v->n_user_attrs; i++)
        if (!strcmp(v->user_attrs[2 * i], key))
            return v->user_attrs[2 * i + 1];
    return NULL;
}

/*
 * A value for a required attribute the user did not give: an ordinary
 * value of its type.  Required floats get -0.5, 0.5, 1.5, ... in order of
 * declaration, so that a pair of bounds (lo, hi) comes out ordered.
 */
static void synthesise(mxop__verify_t *v, const mxop_attr_info_t *a, int k, char *out, size_t len)
{
    (void)v;
    switch (a->type) {
    case MXOP_ATTR_INT: snprintf(out, len, "%d", 1 + k); break;
    case MXOP_ATTR_FLOAT: snprintf(out, len, "%.1f", -0.5 + k); break;
    case MXOP_ATTR_BOOL: snprintf(out, len, "false"); break;
    case MXOP_ATTR_INT_LIST: snprintf(out, len, "1"); break;
    case MXOP_ATTR_FLOAT_LIST: snprintf(out, len, "0.5"); break;
    default: snprintf(out, len, "x"); break;
    }
}

static void build_attrs(mxop__verify_t *v)
{
    int n = 0, k = 0;
    for (int i = 0; i < v->n_user_attrs && n < 64; i++, n++) {
        v->attrs[2 * n] = v->user_attrs[2 * i];
        v->attrs[2 * n + 1] = v->user_attrs[2 * i + 1];
    }
    int na = mxop_op_attr_count(v->op);
    for (int i = 0; i < na && n < 64; i++) {
        mxop_attr_info_t a = {.struct_size = sizeof(a)};
        if (mxop_op_attr(v->op, i, &a) != 0 || !a.required || user_value(v, a.name))
            continue;
        synthesise(v, &a, k++, v->synth[n], sizeof(v->synth[n]));
        v->attrs[2 * n] = a.name;
        v->attrs[2 * n + 1] = v->synth[n];
        n++;
    }
    v->attrs[2 * n] = NULL;
    v->n_attrs = n;
}

static int n_inputs(const mxop__verify_t *v)
{
    if (v->info.num_inputs >= 0)
        return v->info.num_inputs;
    return v->info.min_inputs > 2 ? v->info.min_inputs : 2;
}

static void label(mxop__verify_case_t *k)
{
    size_t at = 0;
    k->label[0] = '\0';
    for (int i = 0; i < k->n_in && at < sizeof(k->label); i++) {
        at += (size_t)snprintf(k->label + at, sizeof(k->label) - at, "%s", i ? " " : "");
        for (int d = 0; d < k->in_sh[i].ndim && at < sizeof(k->label); d++)
            at += (size_t)snprintf(k->label + at, sizeof(k->label) - at, "%s%lld", d ? "x" : "",
                                   (long long)k->in_sh[i].dims[d]);
        if (k->in_sh[i].ndim == 0 && at < sizeof(k->label))
            at += (size_t)snprintf(k->label + at, sizeof(k->label) - at, "scalar");
        if (at < sizeof(k->label))
            at += (size_t)snprintf(k->label + at, sizeof(k->label) - at, ":%s",
                                   mxop_dtype_name(k->in_dt[i]));
    }
    if (k->n_in == 0)
        snprintf(k->label, sizeof(k->label), "no inputs");
}

/*
 * Whether an inference error is the op saying "not this case" (skipped),
 * rather than a hang, a crash or a lost worker (a failure).
 */
static int is_refusal(int rc)
{
    return rc == MXOP_ESHAPE || rc == MXOP_EDTYPE || rc == MXOP_EATTR || rc == MXOP_EARITY ||
           rc == MXOP_EINVAL || rc == MXOP_EOP_FAILED || rc == MXOP_ENOT_SUPPORTED;
}

/* Inference on one shape set and dtype assignment; 0 when accepted. */
static int try_case(mxop__verify_t *v, const shape_set_t *s, const int32_t *dt, int n_in,
                    mxop__verify_case_t *k)
{
    if (s->pair && n_in != 2)
        return -1;
    memset(k, 0, sizeof(*k));
    k->n_in = n_in;
    k->n_out = v->info.num_outputs;
    for (int i = 0; i < n_in; i++) {
        k->in_dt[i] = dt[i];
        k->in_sh[i] = s->a[s->pair ? i : 0];
    }
    int rc =
        mxop_infer(v->c, v->op, v->attrs, n_in, k->in_dt, k->in_sh, k->n_out, k->out_dt, k->out_sh);
    if (rc == 0)
        label(k);
    return rc;
}

/*
 * For each dtype of the first input, the first assignment inference
 * accepts on some shape: every input of that dtype, else the others all of
 * one other dtype (a mask, an index).  An inference or type refusal means
 * "not accepted", never a failure.
 */
void mxop__verify_find_cases(mxop__verify_t *v)
{
    build_attrs(v);
    int n_in = n_inputs(v);
    char acc_dt[128] = "", ref_dt[128] = "", acc_sh[512] = "", ref_sh[512] = "";
    int set_ok[N_SETS] = {0}, set_tried[N_SETS] = {0};
    v->n_cases = 0;
    if (n_in > MXOP__VERIFY_MAX_IN) {
        MXOP__VERIFY_RESULT(v, "shapes", MXOP__VERIFY_SKIP,
                            "the op needs %d inputs; at most %d are tried", n_in,
                            MXOP__VERIFY_MAX_IN);
        return;
    }
    int n_dt = n_in == 0 ? 1 : MXOP_DTYPE_COUNT;
    for (int d0 = 0; d0 < n_dt; d0++) {
        int found = 0;
        for (int other = -1; other < MXOP_DTYPE_COUNT && !found; other++) {
            if (other == d0 || (other >= 0 && n_in < 2))
                continue;
            int32_t dt[MXOP__VERIFY_MAX_IN];
            for (int i = 0; i < n_in; i++)
                dt[i] = i == 0 || other < 0 ? d0 : other;
            for (size_t s = 0; s < N_SETS; s++) {
                if (n_in == 0 && s > 0)
                    break;
                mxop__verify_case_t *k = &v->cases[v->n_cases];
                if (shape_sets[s].pair && n_in != 2)
                    continue;
                set_tried[s] = 1;
                int rc = try_case(v, &shape_sets[s], dt, n_in, k);
                if (rc != 0 && !is_refusal(rc)) {
                    /* A hang or a crash is no answer: stop here, or each would wait. */
                    label(k);
                    MXOP__VERIFY_RESULT(v, "infer", MXOP__VERIFY_FAIL,
                                        "inference on case %s answered %s: %s", k->label,
                                        mxop_err_name(rc), mxop_last_error(v->c));
                    v->n_cases = 0;
                    MXOP__VERIFY_RESULT(v, "shapes", MXOP__VERIFY_SKIP,
                                        "stopped: inference failed (see infer)");
                    MXOP__VERIFY_RESULT(v, "dtypes", MXOP__VERIFY_SKIP,
                                        "stopped: inference failed (see infer)");
                    return;
                }
                if (rc != 0)
                    continue;
                set_ok[s] = 1;
                found = 1;
                if (v->n_cases + 1 < MXOP__VERIFY_MAX_CASES)
                    v->n_cases++;
            }
        }
        if (n_in == 0)
            break;
        char *list = found ? acc_dt : ref_dt;
        size_t at = strlen(list);
        snprintf(list + at, sizeof(acc_dt) - at, "%s%s", at ? " " : "", mxop_dtype_name(d0));
    }
    for (size_t s = 0; s < N_SETS; s++) {
        if (!set_tried[s])
            continue;
        mxop__verify_case_t k = {.n_in = n_in};
        for (int i = 0; i < n_in; i++) {
            k.in_dt[i] = MXOP_F32;
            k.in_sh[i] = shape_sets[s].a[shape_sets[s].pair ? i : 0];
        }
        label(&k);
        /* The dtype is not part of a shape's name. */
        for (char *p = k.label; (p = strstr(p, ":f32")) != NULL;)
            memmove(p, p + 4, strlen(p + 4) + 1);
        char *list = set_ok[s] ? acc_sh : ref_sh;
        size_t at = strlen(list);
        snprintf(list + at, sizeof(acc_sh) - at, "%s(%s)", at ? " " : "", k.label);
    }
    if (n_in == 0) {
        MXOP__VERIFY_RESULT(v, "shapes", v->n_cases ? MXOP__VERIFY_PASS : MXOP__VERIFY_SKIP,
                            "the op takes no inputs%s",
                            v->n_cases ? "" : "; inference refused the call");
        MXOP__VERIFY_RESULT(v, "dtypes", MXOP__VERIFY_SKIP, "the op takes no inputs");
        return;
    }
    if (v->n_cases == 0) {
        MXOP__VERIFY_RESULT(v, "shapes", MXOP__VERIFY_SKIP,
                            "inference accepted none of the shapes and dtypes tried (%s)%s%s",
                            ref_sh, v->n_attrs ? "; give attributes with --attr K=V" : "", "");
        MXOP__VERIFY_RESULT(v, "dtypes", MXOP__VERIFY_SKIP, "no dtype accepted");
        return;
    }
    MXOP__VERIFY_RESULT(v, "shapes", MXOP__VERIFY_PASS, "accepted %s%s%s", acc_sh,
                        ref_sh[0] ? "; refused by inference (skipped): " : "", ref_sh);
    MXOP__VERIFY_RESULT(v, "dtypes", MXOP__VERIFY_PASS, "accepted %s%s%s", acc_dt,
                        ref_dt[0] ? "; refused: " : "", ref_dt);
}

/* Inference on the first case with `attrs`; the MXOP_E* code. */
static int infer_with(mxop__verify_t *v, const char *const *attrs)
{
    mxop__verify_case_t *k = &v->cases[0];
    int32_t odt[MXOP_MAX_TENSORS];
    mxop_shape_t osh[MXOP_MAX_TENSORS];
    return mxop_infer(v->c, v->op, attrs, k->n_in, k->in_dt, k->in_sh, k->n_out, odt, osh);
}

/* v->attrs with `key` set to `value` (value NULL: key left out). */
static void with_attr(const mxop__verify_t *v, const char *key, const char *value, const char **out)
{
    int n = 0, set = 0;
    for (int i = 0; i < v->n_attrs; i++) {
        if (!strcmp(v->attrs[2 * i], key)) {
            set = 1;
            if (!value)
                continue;
            out[2 * n] = key;
            out[2 * n + 1] = value;
        } else {
            out[2 * n] = v->attrs[2 * i];
            out[2 * n + 1] = v->attrs[2 * i + 1];
        }
        n++;
    }
    if (!set && value) {
        out[2 * n] = key;
        out[2 * n + 1] = value;
        n++;
    }
    out[2 * n] = NULL;
}

static const char *wrong_value(int32_t type)
{
    switch (type) {
    case MXOP_ATTR_BOOL: return "maybe";
    case MXOP_ATTR_STRING: return NULL; /* any string is a string */
    default: return "not-a-number";
    }
}

void mxop__verify_check_attrs(mxop__verify_t *v)
{
    const char *attrs[2 * 66 + 1];
    int na = mxop_op_attr_count(v->op), checked = 0;
    if (v->n_cases == 0) {
        MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_SKIP, "no case inference accepts");
        return;
    }
    for (int i = 0; i < na; i++) {
        mxop_attr_info_t a = {.struct_size = sizeof(a)};
        if (mxop_op_attr(v->op, i, &a) != 0)
            continue;
        int rc;
        if (a.default_value) {
            with_attr(v, a.name, a.default_value, attrs);
            rc = infer_with(v, attrs);
            if (rc != 0)
                MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_FAIL,
                                    "%s: its declared default '%s' is refused: %s: %s", a.name,
                                    a.default_value, mxop_err_name(rc), mxop_last_error(v->c));
            checked++;
        }
        const char *bad = wrong_value(a.type);
        if (bad) {
            with_attr(v, a.name, bad, attrs);
            rc = infer_with(v, attrs);
            if (rc != MXOP_EATTR)
                MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_FAIL,
                                    "%s (%s) = '%s' answered %s, not MXOP_EATTR", a.name,
                                    type_name(a.type), bad, rc ? mxop_err_name(rc) : "success");
            checked++;
        }
        if (a.required) {
            with_attr(v, a.name, NULL, attrs);
            rc = infer_with(v, attrs);
            if (rc != MXOP_EATTR)
                MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_FAIL,
                                    "required %s left out answered %s, not MXOP_EATTR", a.name,
                                    rc ? mxop_err_name(rc) : "success");
            checked++;
        }
    }
    if (na == 0) {
        MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_SKIP,
                            "the op declares no attributes (any key passes to it)");
        return;
    }
    with_attr(v, "mxop_verify_no_such_key", "1", attrs);
    int rc = infer_with(v, attrs);
    if (rc != MXOP_EATTR)
        MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_FAIL,
                            "unknown key 'mxop_verify_no_such_key' answered %s, not MXOP_EATTR",
                            rc ? mxop_err_name(rc) : "success");
    checked++;
    char given[256] = "";
    for (int i = 0, at = 0; i < v->n_attrs && at < (int)sizeof(given); i++)
        at += snprintf(given + at, sizeof(given) - (size_t)at, "%s%s=%s", i ? " " : "",
                       v->attrs[2 * i], v->attrs[2 * i + 1]);
    MXOP__VERIFY_RESULT(v, "attrs", MXOP__VERIFY_PASS,
                        "%d declared, %d checks (defaults, wrong types, unknown and missing "
                        "keys)%s%s",
                        na, checked, v->n_attrs ? "; calls use " : "", given);
}
