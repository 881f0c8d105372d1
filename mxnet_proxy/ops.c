/*
 * mxnet_proxy/ops.c - each mxop op as an MXNet op: the op table and every
 * callback MXNet makes, translated into libmxop calls.
 *
 * MXNet identifies an op's callback only by the function pointer it got
 * from _opRegGet and passes back to _opCall*: here that pointer is the
 * address of one byte of the op's record (tag[kind]), never called, from
 * which the record is found again.  The ABI allows it: MXNet stores the
 * pointers, compares them with NULL and hands them back, nothing more.
 *
 * Tensors are MXNet's CPU memory, passed to libmxop as heap arrays: the
 * client stages them through its shared-memory arena (one copy each way).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxnet_proxy/proxy.h"

static mxop__px_op_t *ops;
static int n_ops;

int mxop__px_ops_count(void)
{
    return n_ops;
}

/* At exit: MXNet has no op of the proxy's left to call. */
static void ops_free(void)
{
    free(ops);
    ops = NULL;
    n_ops = 0;
}

mxop__px_op_t *mxop__px_op_at(int i)
{
    return i >= 0 && i < n_ops ? &ops[i] : NULL;
}

mxop__px_fn mxop__px_fn_of(mxop__px_op_t *o, enum mxop__px_kind kind)
{
    void *p = &o->tag[kind];
    mxop__px_fn f;
    memcpy(&f, &p, sizeof(f));
    return f;
}

mxop__px_op_t *mxop__px_op_of(mxop__px_fn fn, enum mxop__px_kind kind)
{
    void *p;
    memcpy(&p, &fn, sizeof(p));
    for (int i = 0; i < n_ops; i++)
        if (p == (void *)&ops[i].tag[kind])
            return &ops[i];
    mxop__px_fail("mxop proxy: MXNet passed a callback this library did not hand out");
    return NULL;
}

int mxop__px_ops_build(mxop_client_t *c)
{
    if (ops != NULL)
        return 0;
    int n = mxop_op_count(c);
    mxop__px_op_t *t = calloc((size_t)(n > 0 ? n : 1), sizeof(*t));
    if (t == NULL)
        return mxop__px_fail("mxop proxy: out of memory"), -1;
    for (int i = 0; i < n; i++) {
        mxop__px_op_t *o = &t[i];
        mxop_op_info_t info;
        o->op = mxop_op_at(c, i);
        if (o->op == NULL || mxop_op_info(o->op, &info) != 0) {
            free(t);
            return mxop__px_fail("mxop proxy: op %d cannot be read", i), -1;
        }
        if ((size_t)snprintf(o->name, sizeof(o->name), "%s%s", mxop__px_config_prefix(),
                             info.name) >= sizeof(o->name)) {
            free(t);
            return mxop__px_fail("mxop proxy: op name '%s%s' is too long", mxop__px_config_prefix(),
                                 info.name),
                   -1;
        }
        o->library = info.library;
        o->num_in = info.num_inputs;
        o->min_in = info.min_inputs;
        o->num_out = info.num_outputs;
        o->mutated = info.mutated_inputs;
        o->has_backward = info.has_backward;
        o->stateful = info.stateful;
    }
    /* The callbacks point into the table: only now that it stays where it is. */
    for (int i = 0; i < n; i++) {
        t[i].fwd[0] = mxop__px_fn_of(&t[i], MXOP__PX_FWD);
        t[i].bwd[0] = mxop__px_fn_of(&t[i], MXOP__PX_BWD);
        t[i].create[0] = mxop__px_fn_of(&t[i], MXOP__PX_CREATE);
    }
    ops = t;
    n_ops = n;
    static int registered;
    if (!registered++)
        atexit(ops_free);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Attributes */

/* MXNet's attributes as mxop's {"k", "v", ..., NULL}; MXNet's own hidden ones ("__...") are left
 * out. */
typedef struct attrs {
    const char **kv;
    const char *small[2 * 16 + 1];
} attrs_t;

static int attrs_make(attrs_t *a, const char *const *keys, const char *const *vals, int num)
{
    a->kv = num <= 16 ? a->small : malloc(sizeof(char *) * (size_t)(2 * num + 1));
    if (a->kv == NULL)
        return mxop__px_fail("mxop proxy: out of memory"), -1;
    int j = 0;
    for (int i = 0; i < num; i++) {
        if (strncmp(keys[i], "__", 2) == 0)
            continue;
        a->kv[j++] = keys[i];
        a->kv[j++] = vals[i];
    }
    a->kv[j] = NULL;
    return 0;
}

static void attrs_free(attrs_t *a)
{
    if (a->kv != a->small)
        free(a->kv);
}

/* The op's input count: its own, else the "num_args" attribute, else its minimum. */
static int inputs_of(const mxop__px_op_t *o, const char *const *keys, const char *const *vals,
                     int num)
{
    if (o->num_in >= 0)
        return o->num_in;
    for (int i = 0; i < num; i++)
        if (strcmp(keys[i], "num_args") == 0)
            return atoi(vals[i]);
    return o->min_in;
}

/* Records "op 'x' (lib): <libmxop's detail> [CODE]" and returns MXOP__MX_FAIL. */
static int fail_call(mxop_client_t *c, const mxop__px_op_t *o, const char *what, int rc)
{
    return mxop__px_fail("mxop op '%s' (%s) %s failed: %s [%s]", o->name, o->library, what,
                         mxop_last_error(c), mxop_err_name(rc));
}

int mxop__px_parse_attrs(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                         int *num_in, int *num_out)
{
    mxop__px_op_t *o = mxop__px_op_of(fn, MXOP__PX_PARSE);
    if (o == NULL)
        return MXOP__MX_FAIL;
    *num_in = inputs_of(o, keys, vals, num);
    *num_out = o->num_out;
    return MXOP__MX_OK;
}

int mxop__px_mutate_inputs(mxop__px_fn fn, int **indices, int *size)
{
    mxop__px_op_t *o = mxop__px_op_of(fn, MXOP__PX_MUTATE);
    /* MXNet frees the array with _opCallFree, even an empty one. */
    *indices = malloc(sizeof(int) * 64);
    *size = 0;
    if (o == NULL || *indices == NULL)
        return MXOP__MX_FAIL;
    for (int i = 0; i < 64; i++)
        if (o->mutated & (1ull << i))
            (*indices)[(*size)++] = i;
    return MXOP__MX_OK;
}

int mxop__px_infer_stype(mxop__px_fn fn, int *instypes, int num_in, int *outstypes, int num_out)
{
    mxop__px_op_t *o = mxop__px_op_of(fn, MXOP__PX_STYPE);
    if (o == NULL)
        return MXOP__MX_FAIL;
    for (int i = 0; i < num_in; i++)
        if (instypes[i] != MXOP__MX_DENSE)
            return mxop__px_fail(
                "mxop op '%s': input %d has %s storage; mxop ops take dense tensors "
                "only",
                o->name, i, instypes[i] == MXOP__MX_CSR ? "CSR" : "row_sparse");
    for (int j = 0; j < num_out; j++)
        outstypes[j] = MXOP__MX_DENSE;
    return MXOP__MX_OK;
}

/* ------------------------------------------------------------------------ */
/* Inference: MXNet asks for types and shapes apart, mxop_infer for both */

/* mxop_infer under the lock; the output dtypes and shapes in odt / osh. */
static int infer(const mxop__px_op_t *o, const attrs_t *a, int n_in, const int32_t *dt,
                 const mxop_shape_t *sh, int32_t *odt, mxop_shape_t *osh, mxop_client_t **cp)
{
    mxop_client_t *c = mxop__px_client_lock();
    if (c == NULL)
        return MXOP_EDISCONNECTED;
    int rc = mxop_infer(c, o->op, a->kv, n_in, dt, sh, o->num_out, odt, osh);
    if (rc != 0)
        fail_call(c, o, "inference", rc);
    mxop__px_client_unlock();
    *cp = c;
    return rc;
}

int mxop__px_infer_type(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                        int *intypes, int num_in, int *outtypes, int num_out)
{
    mxop__px_op_t *o = mxop__px_op_of(fn, MXOP__PX_TYPE);
    if (o == NULL)
        return MXOP__MX_FAIL;
    if (num_in > MXOP_MAX_TENSORS || num_out != o->num_out)
        return mxop__px_fail("mxop op '%s': %d inputs and %d outputs, the op has %d outputs",
                             o->name, num_in, num_out, o->num_out);
    /* An input type MXNet does not know yet (-1) is taken to be the first known one's. */
    int known = -1;
    for (int i = 0; i < num_in && known < 0; i++)
        if (intypes[i] >= 0)
            known = intypes[i];
    int32_t dt[MXOP_MAX_TENSORS];
    for (int i = 0; i < num_in; i++) {
        if (intypes[i] < 0)
            intypes[i] = known >= 0 ? known : MXOP__MX_F32;
        if (intypes[i] > MXOP__MX_I64)
            return mxop__px_fail(
                "mxop op '%s': input %d has MXNet dtype %d, which lib_api and mxop "
                "ops cannot take",
                o->name, i, intypes[i]);
        dt[i] = mxop__mx_to_dtype(intypes[i]);
    }
    /* Without the shapes of the last InferShape of this op, outputs take input 0's type. */
    if (!o->have_shapes || o->cache_n != num_in) {
        for (int j = 0; j < num_out; j++)
            outtypes[j] = num_in > 0 ? intypes[0] : MXOP__MX_F32;
        memcpy(o->cache_dtypes, dt, sizeof(dt[0]) * (size_t)num_in);
        o->cache_n = num_in;
        o->have_dtypes = 1;
        o->have_shapes = 0;
        return MXOP__MX_OK;
    }
    attrs_t a;
    if (attrs_make(&a, keys, vals, num) != 0)
        return MXOP__MX_FAIL;
    int32_t odt[MXOP_MAX_TENSORS];
    mxop_shape_t osh[MXOP_MAX_TENSORS];
    mxop_client_t *c;
    int rc = infer(o, &a, num_in, dt, o->cache_shapes, odt, osh, &c);
    attrs_free(&a);
    if (rc == MXOP_EDTYPE || rc == MXOP_EATTR || rc == MXOP_EDISCONNECTED)
        return MXOP__MX_FAIL;
    mxop__px_msgs_clear();
    for (int j = 0; j < num_out; j++) {
        int t = rc == 0 ? mxop__mx_of_dtype(odt[j]) : (num_in > 0 ? intypes[0] : MXOP__MX_F32);
        if (t < 0)
            return mxop__px_fail("mxop op '%s': output %d would be a dtype MXNet's lib_api lacks",
                                 o->name, j);
        outtypes[j] = t;
    }
    memcpy(o->cache_dtypes, dt, sizeof(dt[0]) * (size_t)num_in);
    o->have_dtypes = 1;
    return MXOP__MX_OK;
}

/* The dtypes tried for a shape inference with no known types: mxop checks both at once. */
static const int32_t guesses[] = {MXOP_F32, MXOP_F64, MXOP_F16, MXOP_I32,
                                  MXOP_I64, MXOP_U8,  MXOP_I8};

int mxop__px_infer_shape(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                         unsigned int **inshapes, int *indims, int num_in,
                         unsigned int ***mod_inshapes, int **mod_indims, unsigned int ***outshapes,
                         int **outdims, int num_out)
{
    mxop__px_op_t *o = mxop__px_op_of(fn, MXOP__PX_SHAPE);
    if (o == NULL)
        return MXOP__MX_FAIL;
    if (num_in > MXOP_MAX_TENSORS || num_out != o->num_out)
        return mxop__px_fail("mxop op '%s': %d inputs and %d outputs, the op has %d outputs",
                             o->name, num_in, num_out, o->num_out);
    mxop_shape_t sh[MXOP_MAX_TENSORS];
    for (int i = 0; i < num_in; i++) {
        if (indims[i] < 0 || indims[i] > MXOP_MAX_DIMS)
            return mxop__px_fail("mxop op '%s': input %d has %d dimensions (mxop: at most %d)",
                                 o->name, i, indims[i], MXOP_MAX_DIMS);
        memset(&sh[i], 0, sizeof(sh[i]));
        sh[i].ndim = indims[i];
        for (int d = 0; d < indims[i]; d++)
            sh[i].dims[d] = inshapes[i][d];
    }
    attrs_t a;
    if (attrs_make(&a, keys, vals, num) != 0)
        return MXOP__MX_FAIL;
    int32_t dt[MXOP_MAX_TENSORS], odt[MXOP_MAX_TENSORS];
    mxop_shape_t osh[MXOP_MAX_TENSORS];
    int have = o->have_dtypes && o->cache_n == num_in;
    int rc = MXOP_EDTYPE;
    mxop_client_t *c;
    for (size_t g = 0; rc == MXOP_EDTYPE && g <= sizeof(guesses) / sizeof(guesses[0]); g++) {
        if (g == 0 && !have)
            continue;
        for (int i = 0; i < num_in; i++)
            dt[i] = g == 0 ? o->cache_dtypes[i] : guesses[g - 1];
        mxop__px_msgs_clear();
        rc = infer(o, &a, num_in, dt, sh, odt, osh, &c);
    }
    attrs_free(&a);
    if (rc != 0)
        return MXOP__MX_FAIL;
    mxop__px_msgs_clear();
    memcpy(o->cache_shapes, sh, sizeof(sh[0]) * (size_t)num_in);
    memcpy(o->cache_dtypes, dt, sizeof(dt[0]) * (size_t)num_in);
    o->cache_n = num_in;
    o->have_shapes = o->have_dtypes = 1;

    /* MXNet frees each array with _opCallFree. */
    size_t nin = (size_t)(num_in > 0 ? num_in : 1), nout = (size_t)(num_out > 0 ? num_out : 1);
    *mod_inshapes = calloc(nin, sizeof(unsigned int *));
    *mod_indims = calloc(nin, sizeof(int));
    *outshapes = calloc(nout, sizeof(unsigned int *));
    *outdims = calloc(nout, sizeof(int));
    if (*mod_inshapes == NULL || *mod_indims == NULL || *outshapes == NULL || *outdims == NULL)
        return mxop__px_fail("mxop proxy: out of memory");
    for (int i = 0; i < num_in; i++) {
        (*mod_indims)[i] = indims[i];
        (*mod_inshapes)[i] = malloc(sizeof(unsigned int) * (size_t)(indims[i] + 1));
        if ((*mod_inshapes)[i] == NULL)
            return mxop__px_fail("mxop proxy: out of memory");
        memcpy((*mod_inshapes)[i], inshapes[i], sizeof(unsigned int) * (size_t)indims[i]);
    }
    for (int j = 0; j < num_out; j++) {
        (*outdims)[j] = osh[j].ndim;
        (*outshapes)[j] = malloc(sizeof(unsigned int) * (size_t)(osh[j].ndim + 1));
        if ((*outshapes)[j] == NULL)
            return mxop__px_fail("mxop proxy: out of memory");
        for (int d = 0; d < osh[j].ndim; d++) {
            if (osh[j].dims[d] > (int64_t)UINT32_MAX)
                return mxop__px_fail("mxop op '%s': output %d dimension %d is %lld, more than "
                                     "MXNet's InferShape can take",
                                     o->name, j, d, (long long)osh[j].dims[d]);
            (*outshapes)[j][d] = (unsigned int)osh[j].dims[d];
        }
    }
    return MXOP__MX_OK;
}

/* ------------------------------------------------------------------------ */
/* Compute */

/* MXNet's tensors as mxop heap arrays (the client stages them). */
static int arrays(const mxop__px_op_t *o, const char *what, int n, const int64_t **shapes,
                  int *dims, void **data, int *types, const char **dev, int *stypes,
                  mxop_array_t *out)
{
    if (n > MXOP_MAX_TENSORS)
        return mxop__px_fail("mxop op '%s': %d %ss, mxop takes at most %d", o->name, n, what,
                             MXOP_MAX_TENSORS);
    for (int i = 0; i < n; i++) {
        if (dev[i] == NULL || strcmp(dev[i], "cpu") != 0)
            return mxop__px_fail("mxop op '%s': %s %d is on %s; the proxy takes cpu tensors only",
                                 o->name, what, i, dev[i] != NULL ? dev[i] : "?");
        if (stypes[i] != MXOP__MX_DENSE)
            return mxop__px_fail("mxop op '%s': %s %d has sparse storage; mxop ops take dense "
                                 "tensors only",
                                 o->name, what, i);
        if (types[i] < 0 || types[i] > MXOP__MX_I64)
            return mxop__px_fail(
                "mxop op '%s': %s %d has MXNet dtype %d, which mxop ops cannot take", o->name, what,
                i, types[i]);
        if (dims[i] < 0 || dims[i] > MXOP_MAX_DIMS)
            return mxop__px_fail("mxop op '%s': %s %d has %d dimensions (mxop: at most %d)",
                                 o->name, what, i, dims[i], MXOP_MAX_DIMS);
        mxop_array_t *a = &out[i];
        memset(a, 0, sizeof(*a));
        a->data = data[i];
        a->dtype = mxop__mx_to_dtype(types[i]);
        a->ndim = dims[i];
        a->region = MXOP_REGION_HEAP;
        size_t elems = 1;
        for (int d = 0; d < dims[i]; d++) {
            a->shape[d] = shapes[i][d];
            elems *= (size_t)shapes[i][d];
        }
        static const size_t size_of[7] = {4, 8, 2, 1, 4, 1, 8};
        a->nbytes = elems * size_of[types[i]];
    }
    return 0;
}

/* A forward or backward call; `state` 0 for a stateless op. */
static int run(mxop__px_op_t *o, int backward, uint64_t *state, const char *const *kv,
               mxop_array_t *in, int n_in, mxop_array_t *out, int n_out, uint64_t seed,
               int (*recreate)(mxop_client_t *, void *), void *st)
{
    mxop_client_t *c = mxop__px_client_lock();
    if (c == NULL)
        return MXOP__MX_FAIL;
    mxop_call_t call;
    memset(&call, 0, sizeof(call));
    call.struct_size = sizeof(call);
    call.attrs = kv;
    call.seed = seed;
    call.state = state != NULL ? *state : 0;
    mxop__px_shared_map(c, in, n_in);
    mxop__px_shared_map(c, out, n_out);
    int rc = backward ? mxop_backward(c, o->op, &call, in, n_in, out, n_out)
                      : mxop_forward(c, o->op, &call, in, n_in, out, n_out);
    if (rc == MXOP_ESTATE_LOST && recreate != NULL && recreate(c, st) == 0) {
        /*
         * The state died with an earlier worker (that call failed, naming the
         * crash); this call never ran: it runs on a new instance.
         */
        call.state = *state;
        rc = backward ? mxop_backward(c, o->op, &call, in, n_in, out, n_out)
                      : mxop_forward(c, o->op, &call, in, n_in, out, n_out);
    }
    if (rc != 0)
        fail_call(c, o, backward ? "backward" : "forward", rc);
    mxop__px_client_unlock();
    return rc == 0 ? MXOP__MX_OK : MXOP__MX_FAIL;
}

int mxop__px_compute(mxop__px_op_t *o, int backward, const char *const *keys,
                     const char *const *vals, int num, const int64_t **inshapes, int *indims,
                     void **indata, int *intypes, const char **indev, int *instypes, int num_in,
                     const int64_t **outshapes, int *outdims, void **outdata, int *outtypes,
                     const char **outdev, int *outstypes, int num_out, void *rng_cpu)
{
    mxop_array_t in[MXOP_MAX_TENSORS], out[MXOP_MAX_TENSORS];
    if (arrays(o, "input", num_in, inshapes, indims, indata, intypes, indev, instypes, in) != 0 ||
        arrays(o, "output", num_out, outshapes, outdims, outdata, outtypes, outdev, outstypes,
               out) != 0)
        return MXOP__MX_FAIL;
    attrs_t a;
    if (attrs_make(&a, keys, vals, num) != 0)
        return MXOP__MX_FAIL;
    int rc = run(o, backward, NULL, a.kv, in, num_in, out, num_out, mxop__px_seed_from(rng_cpu),
                 NULL, NULL);
    attrs_free(&a);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Stateful ops */

/* What CreateOpState returns: MXNet's view of it first (abi.h), then the proxy's. */
typedef struct mxop__px_state {
    mxop__px_stateful_head_t head;
    mxop__px_op_t *op;
    uint64_t id;
    int n_in;
    int32_t dtypes[MXOP_MAX_TENSORS];
    mxop_shape_t shapes[MXOP_MAX_TENSORS];
    char **kv; /* the attributes, kept for each call and for a re-creation */
} mxop__px_state_t;

static const void *const no_vtable[4];

/* Creates the mxop instance; the caller holds the client lock. */
static int state_make(mxop_client_t *c, mxop__px_state_t *s)
{
    int rc = mxop_state_create(c, s->op->op, (const char *const *)s->kv, s->n_in, s->dtypes,
                               s->shapes, &s->id);
    if (rc != 0)
        fail_call(c, s->op, "state creation", rc);
    return rc;
}

static int state_remake(mxop_client_t *c, void *p)
{
    return state_make(c, p);
}

static void state_free(mxop__px_state_t *s)
{
    if (s->kv != NULL)
        for (char **p = s->kv; *p != NULL; p++)
            free(*p);
    free(s->kv);
    free(s);
}

int mxop__px_state_create(mxop__px_fn fn, const char *const *keys, const char *const *vals, int num,
                          const char *dev_type, unsigned int **inshapes, int *indims, int num_in,
                          const int *intypes, void **state_op)
{
    *state_op = NULL;
    mxop__px_op_t *o = mxop__px_op_of(fn, MXOP__PX_CREATE);
    if (o == NULL)
        return MXOP__MX_FAIL;
    if (dev_type == NULL || strcmp(dev_type, "cpu") != 0)
        return mxop__px_fail("mxop op '%s': a state for %s; the proxy makes cpu states only",
                             o->name, dev_type != NULL ? dev_type : "?");
    if (num_in > MXOP_MAX_TENSORS)
        return mxop__px_fail("mxop op '%s': %d inputs, mxop takes at most %d", o->name, num_in,
                             MXOP_MAX_TENSORS);
    mxop__px_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return mxop__px_fail("mxop proxy: out of memory");
    s->head.vptr = no_vtable;
    s->head.created = 1; /* not a C++ object made by new: MXNet only reads the flag */
    s->op = o;
    s->n_in = num_in;
    for (int i = 0; i < num_in; i++) {
        if (intypes[i] < 0 || intypes[i] > MXOP__MX_I64 || indims[i] < 0 ||
            indims[i] > MXOP_MAX_DIMS) {
            state_free(s);
            return mxop__px_fail("mxop op '%s': input %d (%s, %d dimensions) cannot make a state",
                                 o->name, i, mxop__mx_dtype_name(intypes[i]), indims[i]);
        }
        s->dtypes[i] = mxop__mx_to_dtype(intypes[i]);
        s->shapes[i].ndim = indims[i];
        for (int d = 0; d < indims[i]; d++)
            s->shapes[i].dims[d] = inshapes[i][d];
    }
    s->kv = calloc((size_t)(2 * num + 1), sizeof(char *));
    int j = 0;
    for (int i = 0; s->kv != NULL && i < num; i++) {
        if (strncmp(keys[i], "__", 2) == 0)
            continue;
        s->kv[j] = strdup(keys[i]);
        s->kv[j + 1] = strdup(vals[i]);
        if (s->kv[j] == NULL || s->kv[j + 1] == NULL) {
            state_free(s);
            return mxop__px_fail("mxop proxy: out of memory");
        }
        j += 2;
    }
    if (s->kv == NULL) {
        state_free(s);
        return mxop__px_fail("mxop proxy: out of memory");
    }
    mxop_client_t *c = mxop__px_client_lock();
    int rc = c != NULL ? state_make(c, s) : MXOP_EDISCONNECTED;
    if (c != NULL)
        mxop__px_client_unlock();
    if (rc != 0) {
        state_free(s);
        return MXOP__MX_FAIL;
    }
    *state_op = s;
    return MXOP__MX_OK;
}

int mxop__px_state_compute(int is_forward, void *state_op, const int64_t **inshapes, int *indims,
                           void **indata, int *intypes, const char **indev, int *instypes,
                           int num_in, const int64_t **outshapes, int *outdims, void **outdata,
                           int *outtypes, const char **outdev, int *outstypes, int num_out,
                           void *rng_cpu)
{
    mxop__px_state_t *s = state_op;
    if (s == NULL)
        return mxop__px_fail("mxop proxy: no state");
    mxop_array_t in[MXOP_MAX_TENSORS], out[MXOP_MAX_TENSORS];
    if (arrays(s->op, "input", num_in, inshapes, indims, indata, intypes, indev, instypes, in) !=
            0 ||
        arrays(s->op, "output", num_out, outshapes, outdims, outdata, outtypes, outdev, outstypes,
               out) != 0)
        return MXOP__MX_FAIL;
    return run(s->op, !is_forward, &s->id, (const char *const *)s->kv, in, num_in, out, num_out,
               mxop__px_seed_from(rng_cpu), state_remake, s);
}

void mxop__px_state_destroy(void *state_op)
{
    mxop__px_state_t *s = state_op;
    if (s == NULL)
        return;
    mxop_client_t *c = mxop__px_client_lock();
    if (c != NULL) {
        /* Lost with a crashed worker, or the session ended: nothing left to destroy. */
        (void)mxop_state_destroy(c, s->id);
        mxop__px_client_unlock();
    }
    mxop__px_msgs_clear();
    state_free(s);
}
