/*
 * server/worker/runner.c - the Call handlers: Invoke, Infer, StateCreate, StateDestroy.
 *
 * A call is checked completely (checks.c) before any op code other than
 * its attribute check and inference runs.  The tensors, shapes and the
 * reply's arrays live in static storage sized for the largest call, so the
 * hot path allocates nothing.  While op code runs, the call is published
 * in the status page, so that the daemon can enforce its deadline and name
 * it if the worker dies.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "server/worker/cuda.h"
#include "server/worker/prefill.h"
#include "server/worker/worker.h"

static mxop_tensor_t in_t[MXOP__W_MAX_IN];
static mxop_tensor_t out_t[MXOP__W_MAX_OUT];
static mxop__fault_range_t ro_ranges[MXOP__W_MAX_IN];
static int32_t in_dt[MXOP__W_MAX_IN];
static mxop_shape_t in_sh[MXOP__W_MAX_IN];
static int32_t inf_dt[MXOP__W_MAX_OUT];
static mxop_shape_t inf_sh[MXOP__W_MAX_OUT];

/* The reply's storage, valid until the next call. */
static char res_msg[MXOP__W_MSG_MAX];
static int32_t res_dtypes[MXOP__W_MAX_OUT];
static Mxop__Shape res_shapes[MXOP__W_MAX_OUT];
static Mxop__Shape *res_shape_ptrs[MXOP__W_MAX_OUT];
static int64_t res_dims[MXOP__W_MAX_OUT][MXOP_MAX_DIMS];

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res_msg, sizeof(res_msg), fmt, ap);
    va_end(ap);
    return code;
}

static const mxop__worker_op_t *get_op(uint32_t index, int *rc)
{
    const mxop__worker_op_t *op = mxop__op_get(index);
    if (op == NULL)
        *rc = fail(MXOP_EUNKNOWN_OP, "no op with index %u in this session", index);
    return op;
}

/* ------------------------------------------------------------------------ */
/* Invoke */

/* Compares one tensor's dtype and shape with what inference says it must be. */
static int expect(const mxop_tensor_t *t, const char *what, const char *whose, int32_t dt,
                  const mxop_shape_t *sh)
{
    char a[32], b[32], sa[160], sb[160];
    if (dt >= 0 && t->dtype != dt)
        return fail(MXOP_EDTYPE, "%s is %s, %s %s", what, mxop__dtype_name(t->dtype, a, sizeof(a)),
                    whose, mxop__dtype_name(dt, b, sizeof(b)));
    if (sh->ndim >= 0) {
        mxop_shape_t have = {.ndim = t->ndim};
        memcpy(have.dims, t->shape, sizeof(have.dims));
        int same = have.ndim == sh->ndim;
        for (int i = 0; same && i < sh->ndim; i++)
            same = have.dims[i] == sh->dims[i];
        if (!same) {
            mxop__fmt_shape(sa, sizeof(sa), &have);
            mxop__fmt_shape(sb, sizeof(sb), sh);
            return fail(MXOP_ESHAPE, "%s has shape %s, %s %s", what, sa, whose, sb);
        }
    }
    return 0;
}

/* Whether a tensor has the dtype and shape inference gave (-1: anything). */
static int matches(const mxop_tensor_t *t, int32_t dt, const mxop_shape_t *sh)
{
    if (dt >= 0 && t->dtype != dt)
        return 0;
    if (sh->ndim < 0)
        return 1;
    if (t->ndim != sh->ndim)
        return 0;
    for (int i = 0; i < sh->ndim; i++)
        if (t->shape[i] != sh->dims[i])
            return 0;
    return 1;
}

static void tensor_shape(const mxop_tensor_t *t, mxop_shape_t *s)
{
    memset(s, 0, sizeof(*s));
    s->ndim = t->ndim;
    memcpy(s->dims, t->shape, (size_t)t->ndim * sizeof(int64_t));
}

/* Runs inference and checks the outputs (forward) or every tensor (backward) against it. */
static int check_types(const mxop__worker_op_t *op, int backward, int n_in, int n_out, int k)
{
    char what[96], whose[96];
    int no = op->def.num_outputs;
    const mxop_tensor_t *fwd_in = backward ? in_t + no : in_t;
    int n_fwd_in = backward ? k : n_in;
    int rc;

    for (int i = 0; i < n_fwd_in; i++) {
        in_dt[i] = fwd_in[i].dtype;
        tensor_shape(&fwd_in[i], &in_sh[i]);
    }
    rc = mxop__infer(op, n_fwd_in, in_dt, in_sh, no, inf_dt, inf_sh, res_msg, sizeof(res_msg));
    if (rc != 0)
        return rc;
    /* The names of tensors are formatted only for a message: a call that
     * passes its checks costs no snprintf. */
    if (!backward) {
        for (int j = 0; j < n_out; j++) {
            if (matches(&out_t[j], inf_dt[j], &inf_sh[j]))
                continue;
            mxop__fmt(whose, sizeof(whose), "op '%s' makes", op->name);
            mxop__fmt(what, sizeof(what), "output %d", j);
            return expect(&out_t[j], what, whose, inf_dt[j], &inf_sh[j]);
        }
        return 0;
    }
    for (int j = 0; j < no; j++) {
        /* A dynamic output's real shape is its forward's: only the dtype is known here. */
        if (j < 64 && ((op->def.dynamic_outputs >> j) & 1u))
            inf_sh[j].ndim = -1;
        if (!matches(&in_t[j], inf_dt[j], &inf_sh[j])) {
            mxop__fmt(whose, sizeof(whose), "op '%s' makes", op->name);
            mxop__fmt(what, sizeof(what), "input %d (gradient of output %d)", j, j);
            return expect(&in_t[j], what, whose, inf_dt[j], &inf_sh[j]);
        }
        if (!matches(&in_t[no + k + j], inf_dt[j], &inf_sh[j])) {
            mxop__fmt(whose, sizeof(whose), "op '%s' makes", op->name);
            mxop__fmt(what, sizeof(what), "input %d (forward output %d)", no + k + j, j);
            return expect(&in_t[no + k + j], what, whose, inf_dt[j], &inf_sh[j]);
        }
    }
    for (int i = 0; i < k; i++) {
        if (matches(&out_t[i], in_dt[i], &in_sh[i]))
            continue;
        mxop__fmt(what, sizeof(what), "output %d (gradient of input %d)", i, i);
        mxop__fmt(whose, sizeof(whose), "forward input %d (input %d) has", i, no + i);
        return expect(&out_t[i], what, whose, in_dt[i], &in_sh[i]);
    }
    return 0;
}

/*
 * After a forward of an op with dynamic outputs: every one must have its
 * shape, and the result carries the real shapes of all outputs.
 */
static int report_shapes(const mxop__worker_op_t *op, int n_out, Mxop__CallResult *res)
{
    for (int j = 0; j < n_out && j < 64; j++)
        if (((op->def.dynamic_outputs >> j) & 1u) && !((mxop__ctx.dyn_set >> j) & 1u))
            return fail(MXOP_EOP_FAILED,
                        "op '%s' failed: forward gave dynamic output %d no shape (host->"
                        "alloc_output)",
                        op->name, j);
    for (int j = 0; j < n_out; j++) {
        mxop__shape__init(&res_shapes[j]);
        memcpy(res_dims[j], out_t[j].shape, (size_t)out_t[j].ndim * sizeof(int64_t));
        res_shapes[j].n_dims = (size_t)out_t[j].ndim;
        res_shapes[j].dims = res_dims[j];
        res_shape_ptrs[j] = &res_shapes[j];
    }
    res->n_out_shapes = (size_t)n_out;
    res->out_shapes = res_shape_ptrs;
    return 0;
}

static int invoke(uint64_t call_id, const Mxop__Invoke *iv, const mxop__call_attrs_t *attrs,
                  Mxop__CallResult *res)
{
    int rc = 0;
    const mxop__worker_op_t *op = get_op(iv->op, &rc);
    if (op == NULL)
        return rc;
    const mxop_op_def_t *d = &op->def;

    void *state = NULL;
    if (iv->state != 0) {
        uint32_t sop;
        rc = mxop__state_find(iv->state, &sop, &state, res_msg, sizeof(res_msg));
        if (rc != 0)
            return rc;
        if (sop != op->index)
            return fail(MXOP_EINVAL, "state %llu belongs to op '%s', not to op '%s'",
                        (unsigned long long)iv->state, mxop__op_get(sop)->name, op->name);
    } else if (mxop__op_stateful(op)) {
        return fail(MXOP_EINVAL, "op '%s' is stateful: invoke it with a state from StateCreate",
                    op->name);
    }
    if (iv->backward && !mxop__op_has_backward(op))
        return fail(MXOP_ENOT_SUPPORTED, "op '%s' has no backward", op->name);

    int k = 0;
    rc = mxop__check_arity(op, iv->backward, iv->n_inputs, iv->n_outputs, 1, &k, res_msg,
                           sizeof(res_msg));
    if (rc != 0)
        return rc;
    int n_in = (int)iv->n_inputs, n_out = (int)iv->n_outputs;

    int n_ro = 0;
    for (int i = 0; i < n_in; i++) {
        /* Only a forward's declared mutated inputs are writable. */
        int rw = !iv->backward && i < 64 && ((d->mutated_inputs >> i) & 1u);
        const mxop__region_t *r;
        rc = mxop__check_desc(iv->inputs[i], "input", i, op, rw, &in_t[i], &r, res_msg,
                              sizeof(res_msg));
        if (rc != 0)
            return rc;
        in_t[i].req = MXOP_REQ_WRITE;
        if (!rw && !r->cuda) {
            size_t esize = mxop_dtype_size(in_t[i].dtype);
            ro_ranges[n_ro++] = (mxop__fault_range_t){(uintptr_t)in_t[i].data, in_t[i].size * esize,
                                                      (uintptr_t)r->ro, r->size, i};
        }
    }
    for (int j = 0; j < n_out; j++) {
        const mxop__region_t *r;
        rc = mxop__check_desc(iv->outputs[j], "output", j, op, 1, &out_t[j], &r, res_msg,
                              sizeof(res_msg));
        if (rc != 0)
            return rc;
        /* A new region's pages under this output, before the op writes them (prefill.c). */
        if (!r->cuda && r->rw != NULL)
            mxop__prefill_claim(r->rw, (size_t)((uint8_t *)out_t[j].data - r->rw),
                                out_t[j].size * mxop_dtype_size(out_t[j].dtype));
    }

    /* Device tensors take the op's GPU callbacks, on the worker's stream (devcall.c, cuda.c). */
    int32_t dev = -1;
    rc = mxop__call_device(n_in, in_t, n_out, out_t, &dev, res_msg, sizeof(res_msg));
    if (rc != 0)
        return rc;
    mxop__op_fn_t fn = NULL;
    mxop__state_fn_t sfn = NULL;
    const char *cb = mxop__pick_callback(op, iv->backward, dev, &fn, &sfn);
    if (fn == NULL && sfn == NULL)
        return mxop__no_callback(op, cb, dev, res_msg, sizeof(res_msg));

    rc = mxop__call_begin(op, call_id, iv->deadline_ms, attrs, iv->seed, n_in, in_t, res_msg,
                          sizeof(res_msg));
    if (rc != 0)
        return rc;
    rc = check_types(op, iv->backward, n_in, n_out, k);
    if (rc != 0)
        goto out;

    if (dev >= 0 && (rc = mxop__cuda_begin_call(dev, res_msg, sizeof(res_msg))) != 0)
        goto out;
    if (!iv->backward && d->dynamic_outputs != 0) {
        mxop__ctx.dyn_out = out_t;
        mxop__ctx.dyn_n = n_out;
        mxop__ctx.dyn_set = 0;
    }
    const mxop_tensor_t *lib_in;
    mxop_tensor_t *lib_out;
    mxop__tensor_view(op, n_in, in_t, n_out, out_t, &lib_in, &lib_out);
    mxop__fault_arm(op->name, n_ro, ro_ranges);
    mxop__status_callback(cb);
    rc = sfn != NULL ? sfn(&mxop__ctx, state, n_in, lib_in, n_out, lib_out)
                     : fn(&mxop__ctx, n_in, lib_in, n_out, lib_out);
    mxop__fault_disarm();
    if (rc != 0)
        rc = mxop__op_error(op, rc, cb, res_msg, sizeof(res_msg));
    else if (!iv->backward && d->dynamic_outputs != 0)
        rc = report_shapes(op, n_out, res);
    /* Outputs are complete when the result goes back: the stream is synchronised here. */
    if (dev >= 0)
        rc = mxop__cuda_end_call(op->name, rc, res_msg, sizeof(res_msg));

out:
    mxop__call_end();
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Infer, StateCreate */

/* Checks and converts the (dtype, shape) inputs of an Infer or a StateCreate. */
static int shape_inputs(const mxop__worker_op_t *op, size_t n_dtypes, const int32_t *dtypes,
                        size_t n_shapes, Mxop__Shape **shapes, const char *what)
{
    int k;
    if (n_dtypes != n_shapes)
        return fail(MXOP_EINVAL, "%s for op '%s' has %zu dtypes but %zu shapes", what, op->name,
                    n_dtypes, n_shapes);
    int rc = mxop__check_arity(op, 0, n_dtypes, 0, 0, &k, res_msg, sizeof(res_msg));
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n_dtypes; i++) {
        in_dt[i] = dtypes[i];
        rc = mxop__check_shape(dtypes[i], shapes[i], (int)i, &in_sh[i], res_msg, sizeof(res_msg));
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int infer(uint64_t call_id, const Mxop__Infer *inf, const mxop__call_attrs_t *attrs,
                 Mxop__CallResult *res)
{
    int rc = 0;
    const mxop__worker_op_t *op = get_op(inf->op, &rc);
    if (op == NULL)
        return rc;
    rc = shape_inputs(op, inf->n_in_dtypes, inf->in_dtypes, inf->n_in_shapes, inf->in_shapes,
                      "Infer");
    if (rc != 0)
        return rc;
    int n_in = (int)inf->n_in_dtypes, no = op->def.num_outputs;

    rc = mxop__call_begin(op, call_id, 0, attrs, 0, 0, NULL, res_msg, sizeof(res_msg));
    if (rc != 0)
        return rc;
    rc = mxop__infer(op, n_in, in_dt, in_sh, no, inf_dt, inf_sh, res_msg, sizeof(res_msg));
    if (rc != 0)
        goto out;
    for (int j = 0; j < no; j++) {
        if (inf_dt[j] < 0 || inf_sh[j].ndim < 0) {
            rc = fail(MXOP_ENOT_SUPPORTED,
                      "op '%s' has no inputs and no %s: output %d cannot be inferred", op->name,
                      inf_dt[j] < 0 ? "infer_type" : "infer_shape", j);
            goto out;
        }
        res_dtypes[j] = inf_dt[j];
        mxop__shape__init(&res_shapes[j]);
        memcpy(res_dims[j], inf_sh[j].dims, (size_t)inf_sh[j].ndim * sizeof(int64_t));
        res_shapes[j].n_dims = (size_t)inf_sh[j].ndim;
        res_shapes[j].dims = res_dims[j];
        res_shape_ptrs[j] = &res_shapes[j];
    }
    res->n_out_dtypes = (size_t)no;
    res->out_dtypes = res_dtypes;
    res->n_out_shapes = (size_t)no;
    res->out_shapes = res_shape_ptrs;

out:
    mxop__call_end();
    return rc;
}

static int state_create(uint64_t call_id, const Mxop__StateCreate *sc,
                        const mxop__call_attrs_t *attrs, Mxop__CallResult *res)
{
    int rc = 0;
    const mxop__worker_op_t *op = get_op(sc->op, &rc);
    if (op == NULL)
        return rc;
    if (!mxop__op_stateful(op))
        return fail(MXOP_ENOT_SUPPORTED, "op '%s' is not stateful (it has no state_create)",
                    op->name);
    rc = shape_inputs(op, sc->n_in_dtypes, sc->in_dtypes, sc->n_in_shapes, sc->in_shapes,
                      "StateCreate");
    if (rc != 0)
        return rc;
    /* Before the library makes one: a state over the quota would have to be destroyed again. */
    if ((rc = mxop__states_room(res_msg, sizeof(res_msg))) != 0)
        return rc;

    rc = mxop__call_begin(op, call_id, 0, attrs, 0, 0, NULL, res_msg, sizeof(res_msg));
    if (rc != 0)
        return rc;
    void *state = NULL;
    mxop__status_callback("state_create");
    rc = op->def.state_create(&mxop__ctx, (int)sc->n_in_dtypes, in_sh, in_dt, &state);
    if (rc != 0) {
        rc = mxop__op_error(op, rc, "state_create", res_msg, sizeof(res_msg));
        goto out;
    }
    uint64_t id = 0;
    rc = mxop__state_add(op->index, state, &id);
    if (rc != 0) {
        op->def.state_destroy(state);
        fail(rc, "op '%s': %s", op->name,
             rc == MXOP_ELIMIT ? "this worker has handed out all its state ids"
                               : "out of memory for the state table");
        goto out;
    }
    res->state = id;

out:
    mxop__call_end();
    return rc;
}

static int state_destroy(uint64_t call_id, const Mxop__StateDestroy *sd)
{
    uint32_t opi;
    void *state;
    int rc = mxop__state_find(sd->state, &opi, &state, res_msg, sizeof(res_msg));
    if (rc != 0)
        return rc;
    const mxop__worker_op_t *op = mxop__op_get(opi);
    mxop__status_begin(call_id, op->name, 0);
    mxop__status_callback("state_destroy");
    op->def.state_destroy(state);
    mxop__status_end();
    mxop__state_remove(sd->state);
    return 0;
}

/* ------------------------------------------------------------------------ */

/* The call's body to its handler, with its attributes read (call_attrs.c). */
static int dispatch(const Mxop__Call *call, const mxop__call_attrs_t *attrs, Mxop__CallResult *res)
{
    switch (call->body_case) {
    case MXOP__CALL__BODY_INVOKE: return invoke(call->id, call->invoke, attrs, res);
    case MXOP__CALL__BODY_INFER: return infer(call->id, call->infer, attrs, res);
    case MXOP__CALL__BODY_STATE_CREATE:
        return state_create(call->id, call->state_create, attrs, res);
    case MXOP__CALL__BODY_STATE_DESTROY: return state_destroy(call->id, call->state_destroy);
    default:
        return fail(MXOP_EPROTOCOL,
                    "call %llu carries no invoke, infer, state_create or state_destroy",
                    (unsigned long long)call->id);
    }
}

void mxop__run_call(const Mxop__Call *call, Mxop__CallResult *res)
{
    static mxop__call_attrs_t attrs;
    res_msg[0] = '\0';
    res->id = call->id;
    /* Before any other check: a NUL inside an attribute is refused whatever else is wrong. */
    int rc = mxop__call_attrs_read(call, &attrs, res_msg, sizeof(res_msg));
    if (rc == 0)
        rc = dispatch(call, &attrs, res);
    res->status = rc;
    if (rc != 0) {
        /* A failed call reports nothing but its error. */
        res->n_out_dtypes = 0;
        res->n_out_shapes = 0;
        res->state = 0;
        if (res_msg[0] == '\0')
            fail(rc, "call %llu failed", (unsigned long long)call->id);
    }
    res->message = rc != 0 ? res_msg : "";
}
