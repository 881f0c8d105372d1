/*
 * server/worker/mxnet/call.c - the mxop callbacks of an MXNet op: mxop's
 * call translated into MXNet's C ABI.
 *
 * Each callback finds its MXNet op through the call's op index, turns the
 * call's attributes into the key/value arrays MXNet passes, and the tensors
 * into MXNet's parallel arrays (shapes, data, dtypes, ids, devices).  The
 * worker has already checked counts, regions, dtypes and shapes against the
 * op's inference (which is the library's own InferType / InferShape), so a
 * library's forward never sees tensors its inference did not accept.
 *
 * MXNet's FCompute takes no write/add request: the library always writes.
 * An output asked for with "add" is computed into workspace and added; one
 * asked for with "null" is computed into workspace and dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "server/worker/mxnet/mxnet.h"
#include "server/worker/worker.h"

#define H (&mxop__host)

/* The MXNet op of the call in flight and its library. */
static const mxop__mx_op_t *cur(mxop__mx_lib_t **l)
{
    const mxop__mx_op_t *mo = mxop__ctx.op != NULL ? mxop__mx_op_get(mxop__ctx.op->index) : NULL;
    *l = mo != NULL ? mxop__mx_lib_get(mo->lib) : NULL;
    return *l != NULL ? mo : NULL;
}

static const char *op_name(void)
{
    return mxop__ctx.op != NULL ? mxop__ctx.op->name : "?";
}

/* The call's attributes as MXNet's parallel key/value arrays. */
typedef struct attrs {
    const char *keys[MXOP__W_MAX_ATTRS + 1];
    const char *vals[MXOP__W_MAX_ATTRS + 1];
    int n;
} attrs_t;

static void get_attrs(mxop_ctx_t *ctx, attrs_t *a)
{
    a->n = H->attr_count(ctx);
    if (a->n > MXOP__W_MAX_ATTRS)
        a->n = MXOP__W_MAX_ATTRS;
    for (int i = 0; i < a->n; i++) {
        a->keys[i] = H->attr_key(ctx, i);
        a->vals[i] = H->attr_value(ctx, i);
    }
    a->keys[a->n] = a->vals[a->n] = NULL;
}

/* ParseAttrs with the call's attributes; checks the counts when n_in >= 0. */
static int parse(mxop_ctx_t *ctx, const mxop__mx_op_t *mo, mxop__mx_lib_t *l, const attrs_t *a,
                 int n_in, int n_out)
{
    int nin = -1, nout = -1;
    if (l->abi.parse_attrs(mo->parse, a->keys, a->vals, a->n, &nin, &nout) != MXOP__MX_OK)
        return mxop__mx_fail(ctx, mo->lib, MXOP_EATTR,
                             "the library's ParseAttrs refused the attributes without a message");
    mxop__mx_skip_msgs(mo->lib);
    if (n_in >= 0 && nin != n_in)
        return H->set_error(ctx, MXOP_EARITY,
                            "op '%s' takes %d inputs with these attributes, got %d", op_name(), nin,
                            n_in);
    if (n_out >= 0 && nout != n_out)
        return H->set_error(ctx, MXOP_EARITY,
                            "op '%s' makes %d outputs with these attributes, mxop declared %d "
                            "when it loaded the library",
                            op_name(), nout, n_out);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Inference */

static int mx_infer_type(mxop_ctx_t *ctx, int n_in, const int32_t *in, int n_out, int32_t *out)
{
    mxop__mx_lib_t *l;
    const mxop__mx_op_t *mo = cur(&l);
    if (mo == NULL)
        return H->set_error(ctx, MXOP_EINVAL, "op '%s' is not an MXNet op", op_name());
    attrs_t a;
    get_attrs(ctx, &a);
    int rc = parse(ctx, mo, l, &a, n_in, n_out);
    if (rc != 0)
        return rc;

    int it[MXOP__W_MAX_IN], ot[MXOP__W_MAX_OUT];
    for (int i = 0; i < n_in; i++) {
        it[i] = mxop__mx_of_dtype(in[i]);
        if (it[i] < 0) {
            char b[32];
            return H->set_error(ctx, MXOP_EDTYPE,
                                "op '%s': input %d is %s, which MXNet's lib_api has no dtype for",
                                op_name(), i, mxop__dtype_name(in[i], b, sizeof(b)));
        }
    }

    /* Sparse storage: an op whose outputs are not dense for dense inputs is refused. */
    if (mo->stype != NULL) {
        int is[MXOP__W_MAX_IN], os[MXOP__W_MAX_OUT];
        for (int i = 0; i < n_in; i++)
            is[i] = MXOP__MX_DENSE;
        for (int j = 0; j < n_out; j++)
            os[j] = -1;
        if (l->abi.infer_stype(mo->stype, a.keys, a.vals, a.n, is, n_in, os, n_out) != MXOP__MX_OK)
            return mxop__mx_fail_why(ctx, mo->lib, MXOP_ENOT_SUPPORTED,
                                     "its InferSType refused dense inputs: the op needs sparse "
                                     "storage (row_sparse or CSR), which mxop does not support");
        mxop__mx_skip_msgs(mo->lib);
        for (int j = 0; j < n_out; j++) {
            if (os[j] != MXOP__MX_DENSE && os[j] != -1)
                return H->set_error(ctx, MXOP_ENOT_SUPPORTED,
                                    "op '%s': output %d has %s storage; mxop supports dense "
                                    "tensors only (sparse storage is not supported)",
                                    op_name(), j, os[j] == MXOP__MX_CSR ? "CSR" : "row_sparse");
        }
    }

    for (int j = 0; j < n_out; j++)
        ot[j] = -1;
    if (mo->type == NULL) {
        for (int j = 0; j < n_out; j++)
            ot[j] = n_in > 0 ? it[0] : MXOP__MX_F32;
    } else {
        if (l->abi.infer_type(mo->type, a.keys, a.vals, a.n, it, n_in, ot, n_out) != MXOP__MX_OK)
            return mxop__mx_fail(ctx, mo->lib, MXOP_EDTYPE,
                                 "the library's InferType failed without a message");
        mxop__mx_skip_msgs(mo->lib);
    }
    for (int j = 0; j < n_out; j++) {
        if (ot[j] < 0 || ot[j] > MXOP__MX_I64)
            return H->set_error(ctx, MXOP_EDTYPE, "op '%s': InferType gave output %d dtype %d",
                                op_name(), j, ot[j]);
        out[j] = mxop__mx_to_dtype(ot[j]);
    }
    return 0;
}

static int mx_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                          mxop_shape_t *out)
{
    mxop__mx_lib_t *l;
    const mxop__mx_op_t *mo = cur(&l);
    if (mo == NULL)
        return H->set_error(ctx, MXOP_EINVAL, "op '%s' is not an MXNet op", op_name());
    if (mo->shape == NULL) {
        for (int j = 0; j < n_out && n_in > 0; j++)
            out[j] = in[0];
        return 0;
    }
    attrs_t a;
    get_attrs(ctx, &a);
    unsigned int dims[MXOP__W_MAX_IN][MXOP_MAX_DIMS];
    unsigned int *ish[MXOP__W_MAX_IN];
    int idim[MXOP__W_MAX_IN];
    for (int i = 0; i < n_in; i++) {
        for (int d = 0; d < in[i].ndim; d++) {
            if (in[i].dims[d] > (int64_t)0xffffffffu)
                return H->set_error(ctx, MXOP_ESHAPE,
                                    "op '%s': input %d dimension %d is %lld, more than MXNet's "
                                    "InferShape can describe (32 bits)",
                                    op_name(), i, d, (long long)in[i].dims[d]);
            dims[i][d] = (unsigned int)in[i].dims[d];
        }
        ish[i] = dims[i];
        idim[i] = in[i].ndim;
    }
    unsigned int **mod_in = NULL, **osh = NULL;
    int *mod_dims = NULL, *odims = NULL;
    if (l->abi.infer_shape(mo->shape, a.keys, a.vals, a.n, ish, idim, n_in, &mod_in, &mod_dims,
                           &osh, &odims, n_out) != MXOP__MX_OK)
        return mxop__mx_fail(ctx, mo->lib, MXOP_ESHAPE,
                             "the library's InferShape failed without a message");
    mxop__mx_skip_msgs(mo->lib);
    int rc = 0;
    for (int j = 0; j < n_out; j++) {
        if (odims[j] < 0 || odims[j] > MXOP_MAX_DIMS) {
            rc = H->set_error(ctx, MXOP_ESHAPE, "op '%s': InferShape gave output %d %d dimensions",
                              op_name(), j, odims[j]);
            break;
        }
        memset(&out[j], 0, sizeof(out[j]));
        out[j].ndim = odims[j];
        for (int d = 0; d < odims[j]; d++)
            out[j].dims[d] = osh[j][d];
    }
    /* The library malloc'ed every array on success; it frees them itself. */
    for (int i = 0; i < n_in; i++)
        l->abi.free_(mod_in[i]);
    for (int j = 0; j < n_out; j++)
        l->abi.free_(osh[j]);
    l->abi.free_(mod_in);
    l->abi.free_(mod_dims);
    l->abi.free_(osh);
    l->abi.free_(odims);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Compute */

/* The ABI's CPU allocator: the call's workspace (the library never frees it). */
static void *cpu_alloc(void *ctx, int size)
{
    return size < 0 ? NULL : H->workspace((mxop_ctx_t *)ctx, (size_t)size);
}

static void *gpu_alloc(void *ctx, int size)
{
    return size < 0 ? NULL : H->gpu_workspace((mxop_ctx_t *)ctx, (size_t)size);
}

/* Everything one FCompute / FStatefulCompute call takes, built from the tensors. */
typedef struct frame {
    const int64_t *ish[MXOP__W_MAX_IN], *osh[MXOP__W_MAX_OUT];
    int idim[MXOP__W_MAX_IN], odim[MXOP__W_MAX_OUT];
    void *idata[MXOP__W_MAX_IN], *odata[MXOP__W_MAX_OUT];
    int itype[MXOP__W_MAX_IN], otype[MXOP__W_MAX_OUT];
    size_t iid[MXOP__W_MAX_IN], oid[MXOP__W_MAX_OUT];
    const char *idev[MXOP__W_MAX_IN], *odev[MXOP__W_MAX_OUT];
    int idevid[MXOP__W_MAX_IN], odevid[MXOP__W_MAX_OUT];
    int istype[MXOP__W_MAX_IN], ostype[MXOP__W_MAX_OUT];
    void *iidx[MXOP__W_MAX_IN], *oidx[MXOP__W_MAX_OUT];
    void *iptr[MXOP__W_MAX_IN], *optr[MXOP__W_MAX_OUT];
    int64_t iidx_sh[MXOP__W_MAX_IN], oidx_sh[MXOP__W_MAX_OUT];
    int64_t iptr_sh[MXOP__W_MAX_IN], optr_sh[MXOP__W_MAX_OUT];
    void *rng_cpu;
} frame_t;

/* out += tmp for an output asked for with req "add". */
static int add_into(mxop_ctx_t *ctx, const mxop_tensor_t *t, const void *tmp, int gpu)
{
    size_t n = t->size;
    if (gpu)
        return H->set_error(ctx, MXOP_ENOT_SUPPORTED,
                            "op '%s': req \"add\" on a device output is not supported for MXNet "
                            "ops (MXNet's FCompute always writes)",
                            op_name());
    switch (t->dtype) {
#define ADD(T)                                                                                     \
    for (size_t i = 0; i < n; i++)                                                                 \
        ((T *)t->data)[i] += ((const T *)tmp)[i];                                                  \
    return 0;
    case MXOP_F32: ADD(float)
    case MXOP_F64: ADD(double)
    case MXOP_I32: ADD(int32_t)
    case MXOP_I64: ADD(int64_t)
    case MXOP_U8: ADD(uint8_t)
    case MXOP_I8: ADD(int8_t)
#undef ADD
    default:
        return H->set_error(ctx, MXOP_ENOT_SUPPORTED,
                            "op '%s': req \"add\" is not supported for f16 outputs of MXNet ops",
                            op_name());
    }
}

static int build(mxop_ctx_t *ctx, frame_t *f, int n_in, const mxop_tensor_t *in, int n_out,
                 mxop_tensor_t *out, int gpu)
{
    memset(f, 0, sizeof(*f));
    const char *dev = gpu ? "gpu" : "cpu";
    for (int i = 0; i < n_in; i++) {
        f->ish[i] = in[i].shape;
        f->idim[i] = in[i].ndim;
        f->idata[i] = in[i].data;
        f->itype[i] = mxop__mx_of_dtype(in[i].dtype);
        f->idev[i] = dev;
        f->idevid[i] = in[i].device < 0 ? 0 : in[i].device;
    }
    for (int j = 0; j < n_out; j++) {
        f->osh[j] = out[j].shape;
        f->odim[j] = out[j].ndim;
        f->otype[j] = mxop__mx_of_dtype(out[j].dtype);
        f->odev[j] = dev;
        f->odevid[j] = out[j].device < 0 ? 0 : out[j].device;
        f->odata[j] = out[j].data;
        if (out[j].req != MXOP_REQ_WRITE) {
            size_t bytes = out[j].size * mxop_dtype_size(out[j].dtype);
            void *tmp = gpu ? H->gpu_workspace(ctx, bytes ? bytes : 1)
                            : H->workspace(ctx, bytes ? bytes : 1);
            if (tmp == NULL)
                return H->set_error(ctx, MXOP_ENOMEM,
                                    "op '%s': no workspace for output %d (req add/null)", op_name(),
                                    j);
            f->odata[j] = tmp;
        }
    }
    if (!gpu) {
        const mxop__mx_op_t *mo = mxop__mx_op_get(mxop__ctx.op->index);
        int reseed = mo == NULL || mo->rng != MXOP__MX_RNG_NONE;
        f->rng_cpu = mxop__mx_cpu_rand_states(H->rng_seed(ctx), reseed);
        if (f->rng_cpu == NULL)
            return H->set_error(ctx, MXOP_ENOMEM, "op '%s': no memory for the random states",
                                op_name());
    }
    return 0;
}

static int finish(mxop_ctx_t *ctx, frame_t *f, int n_out, mxop_tensor_t *out, int gpu)
{
    if (!gpu && mxop__ctx.op != NULL)
        mxop__mx_note_rng(mxop__ctx.op->index, mxop__mx_rand_used());
    for (int j = 0; j < n_out; j++) {
        if (out[j].req == MXOP_REQ_ADD) {
            int rc = add_into(ctx, &out[j], f->odata[j], gpu);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

#define FRAME_ARGS(f, n_in, n_out, gpu)                                                            \
    (f).ish, (f).idim, (f).idata, (f).itype, (f).iid, (f).idev, (f).idevid, (n_in), (f).osh,       \
        (f).odim, (f).odata, (f).otype, (f).oid, (f).odev, (f).odevid, (n_out), cpu_alloc, ctx,    \
        gpu_alloc, ctx, (gpu) ? H->cuda_stream(ctx) : NULL, NULL, NULL, (f).istype, (f).ostype,    \
        (f).iidx, (f).oidx, (f).iptr, (f).optr, (f).iidx_sh, (f).oidx_sh, (f).iptr_sh,             \
        (f).optr_sh, (f).rng_cpu, NULL

static int compute(mxop_ctx_t *ctx, int backward, int gpu, int n_in, const mxop_tensor_t *in,
                   int n_out, mxop_tensor_t *out)
{
    mxop__mx_lib_t *l;
    const mxop__mx_op_t *mo = cur(&l);
    if (mo == NULL)
        return H->set_error(ctx, MXOP_EINVAL, "op '%s' is not an MXNet op", op_name());
    mxop__mx_fn fn =
        backward ? (gpu ? mo->bwd_gpu : mo->bwd_cpu) : (gpu ? mo->fwd_gpu : mo->fwd_cpu);
    if (fn == NULL)
        return H->set_error(ctx, MXOP_ENOT_SUPPORTED, "op '%s' has no %s %s", op_name(),
                            gpu ? "gpu" : "cpu", backward ? "backward" : "forward");
    attrs_t a;
    get_attrs(ctx, &a);
    frame_t *f = H->workspace(ctx, sizeof(frame_t));
    if (f == NULL)
        return H->set_error(ctx, MXOP_ENOMEM, "op '%s': no workspace", op_name());
    int rc = build(ctx, f, n_in, in, n_out, out, gpu);
    if (rc != 0)
        return rc;
    if (l->abi.fcompute(fn, a.keys, a.vals, a.n, FRAME_ARGS(*f, n_in, n_out, gpu)) != MXOP__MX_OK)
        return mxop__mx_fail(ctx, mo->lib, MXOP_EOP_FAILED,
                             backward ? "its backward failed without a message"
                                      : "its forward failed without a message");
    mxop__mx_skip_msgs(mo->lib);
    return finish(ctx, f, n_out, out, gpu);
}

static int mx_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                      mxop_tensor_t *out)
{
    return compute(ctx, 0, 0, n_in, in, n_out, out);
}
static int mx_backward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out)
{
    return compute(ctx, 1, 0, n_in, in, n_out, out);
}
static int mx_forward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    return compute(ctx, 0, 1, n_in, in, n_out, out);
}
static int mx_backward_gpu(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                           mxop_tensor_t *out)
{
    return compute(ctx, 1, 1, n_in, in, n_out, out);
}

/* ------------------------------------------------------------------------ */
/* Stateful ops */

/* What mxop keeps as the op's state: the library's CustomStatefulOp and where it lives. */
typedef struct mx_state {
    uint32_t lib;
    int gpu;
    void *op; /* the library's CustomStatefulOp* */
} mx_state_t;

static int mx_state_create(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *shapes,
                           const int32_t *dtypes, void **state)
{
    mxop__mx_lib_t *l;
    const mxop__mx_op_t *mo = cur(&l);
    if (mo == NULL)
        return H->set_error(ctx, MXOP_EINVAL, "op '%s' is not an MXNet op", op_name());
    attrs_t a;
    get_attrs(ctx, &a);
    int rc = parse(ctx, mo, l, &a, n_in, -1);
    if (rc != 0)
        return rc;
    int gpu = mo->create_cpu == NULL;
    unsigned int dims[MXOP__W_MAX_IN][MXOP_MAX_DIMS];
    unsigned int *ish[MXOP__W_MAX_IN];
    int idim[MXOP__W_MAX_IN], it[MXOP__W_MAX_IN];
    for (int i = 0; i < n_in; i++) {
        it[i] = mxop__mx_of_dtype(dtypes[i]);
        if (it[i] < 0)
            return H->set_error(ctx, MXOP_EDTYPE,
                                "op '%s': input %d has a dtype MXNet's lib_api does not have",
                                op_name(), i);
        for (int d = 0; d < shapes[i].ndim; d++)
            dims[i][d] = (unsigned int)shapes[i].dims[d];
        ish[i] = dims[i];
        idim[i] = shapes[i].ndim;
    }
    mx_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return H->set_error(ctx, MXOP_ENOMEM, "op '%s': out of memory", op_name());
    s->lib = mo->lib;
    s->gpu = gpu;
    if (l->abi.create_state(gpu ? mo->create_gpu : mo->create_cpu, a.keys, a.vals, a.n,
                            gpu ? "gpu" : "cpu", 0, ish, idim, n_in, it, &s->op) != MXOP__MX_OK ||
        s->op == NULL) {
        free(s);
        return mxop__mx_fail(ctx, mo->lib, MXOP_EOP_FAILED,
                             "its CreateOpState failed without a message");
    }
    mxop__mx_skip_msgs(mo->lib);
    *state = s;
    return 0;
}

static int stateful(mxop_ctx_t *ctx, void *state, int is_forward, int gpu, int n_in,
                    const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    mx_state_t *s = state;
    mxop__mx_lib_t *l = mxop__mx_lib_get(s->lib);
    if (s->gpu != gpu)
        return H->set_error(ctx, MXOP_ENOT_SUPPORTED,
                            "op '%s': its state was made for %s tensors, the call has %s ones",
                            op_name(), s->gpu ? "gpu" : "cpu", gpu ? "gpu" : "cpu");
    frame_t *f = H->workspace(ctx, sizeof(frame_t));
    if (f == NULL)
        return H->set_error(ctx, MXOP_ENOMEM, "op '%s': no workspace", op_name());
    int rc = build(ctx, f, n_in, in, n_out, out, gpu);
    if (rc != 0)
        return rc;
    if (l->abi.fstateful(is_forward, s->op, FRAME_ARGS(*f, n_in, n_out, gpu)) != MXOP__MX_OK)
        return mxop__mx_fail(ctx, s->lib, MXOP_EOP_FAILED,
                             is_forward ? "its stateful forward failed without a message"
                                        : "its stateful backward failed without a message");
    mxop__mx_skip_msgs(s->lib);
    return finish(ctx, f, n_out, out, gpu);
}

static int mx_state_forward(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                            int n_out, mxop_tensor_t *out)
{
    return stateful(ctx, state, 1, 0, n_in, in, n_out, out);
}
static int mx_state_backward(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                             int n_out, mxop_tensor_t *out)
{
    return stateful(ctx, state, 0, 0, n_in, in, n_out, out);
}
static int mx_state_forward_gpu(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                                int n_out, mxop_tensor_t *out)
{
    return stateful(ctx, state, 1, 1, n_in, in, n_out, out);
}
static int mx_state_backward_gpu(mxop_ctx_t *ctx, void *state, int n_in, const mxop_tensor_t *in,
                                 int n_out, mxop_tensor_t *out)
{
    return stateful(ctx, state, 0, 1, n_in, in, n_out, out);
}

static void mx_state_destroy(void *state)
{
    mx_state_t *s = state;
    mxop__mx_lib_t *l = mxop__mx_lib_get(s->lib);
    if (l != NULL)
        l->abi.destroy_state(s->op);
    free(s);
}

void mxop__mx_fill_def(const mxop__mx_op_t *mo, mxop_op_def_t *def)
{
    def->infer_type = mx_infer_type;
    def->infer_shape = mx_infer_shape;
    if (mo->create_cpu != NULL || mo->create_gpu != NULL) {
        def->state_create = mx_state_create;
        def->state_destroy = mx_state_destroy;
        if (mo->create_cpu != NULL) {
            def->state_forward = mx_state_forward;
            def->state_backward = mx_state_backward;
        } else {
            def->state_forward_gpu = mx_state_forward_gpu;
            def->state_backward_gpu = mx_state_backward_gpu;
        }
        return;
    }
    if (mo->fwd_cpu != NULL)
        def->forward = mx_forward;
    if (mo->bwd_cpu != NULL)
        def->backward = mx_backward;
    if (mo->fwd_gpu != NULL)
        def->forward_gpu = mx_forward_gpu;
    if (mo->bwd_gpu != NULL)
        def->backward_gpu = mx_backward_gpu;
}
