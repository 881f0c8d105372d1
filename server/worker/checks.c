/*
 * server/worker/checks.c - everything a call is checked for before an op runs.
 *
 * Counts, descriptors (region, dtype, rank, strides, extent), and the
 * outputs' dtypes and shapes against the op's inference.  op.h promises an
 * op that all of this holds, so that an op needs to check only its
 * attributes; every refusal names the tensor and what was wrong with it.
 */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "mxop/client.h"
#include "shm/desc.h"
#include "server/worker/worker.h"

/* The names come from the one dtype table, MXOP_DTYPE_MAP (types.h). */
const char *mxop__dtype_name(int32_t dtype, char *buf, size_t len)
{
    if (mxop_dtype_size(dtype) != 0)
        return mxop_dtype_name(dtype);
    mxop__fmt(buf, len, "dtype %d", dtype);
    return buf;
}

int mxop__is_known_error(int code)
{
    switch (code) {
#define KNOWN(name, num, text) case num:
        MXOP_ERROR_MAP(KNOWN)
#undef KNOWN
        return 1;
    default: return 0;
    }
}

void mxop__fmt_shape(char *buf, size_t len, const mxop_shape_t *s)
{
    size_t at = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    at += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld", (long long)s->dims[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static const char *plural(long n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* ------------------------------------------------------------------------ */
/* Counts */

/* Whether n is an input count the op's forward accepts. */
static int inputs_ok(const mxop_op_def_t *d, long n)
{
    if (d->num_inputs >= 0)
        return n == d->num_inputs;
    return n >= d->min_inputs && n <= MXOP_MAX_TENSORS;
}

static void describe_inputs(const mxop_op_def_t *d, char *buf, size_t len)
{
    if (d->num_inputs >= 0)
        mxop__fmt(buf, len, "%d %s", d->num_inputs, plural(d->num_inputs, "input", "inputs"));
    else
        mxop__fmt(buf, len, "%d to %d inputs", d->min_inputs, MXOP_MAX_TENSORS);
}

int mxop__check_arity(const mxop__worker_op_t *op, int backward, size_t n_in, size_t n_out,
                      int check_out, int *k, char *msg, size_t msglen)
{
    const mxop_op_def_t *d = &op->def;
    /* What the op takes is formatted only for a refusal: a call that passes costs no snprintf. */
    char want[64];
    long nin = n_in > MXOP__W_MAX_IN ? MXOP__W_MAX_IN + 1 : (long)n_in;
    long nout = n_out > MXOP__W_MAX_OUT ? MXOP__W_MAX_OUT + 1 : (long)n_out;

    if (!backward) {
        if (!inputs_ok(d, nin)) {
            describe_inputs(d, want, sizeof(want));
            mxop__fmt(msg, msglen, "op '%s' takes %s, got %zu", op->name, want, n_in);
            return MXOP_EARITY;
        }
        if (check_out && nout != d->num_outputs) {
            mxop__fmt(msg, msglen, "op '%s' makes %d %s, got %zu", op->name, d->num_outputs,
                      plural(d->num_outputs, "output", "outputs"), n_out);
            return MXOP_EARITY;
        }
        return 0;
    }

    /* Backward: [output gradients, forward inputs, forward outputs]. */
    long no = d->num_outputs;
    long kk = nin - 2 * no;
    if (kk < 0 || !inputs_ok(d, kk)) {
        describe_inputs(d, want, sizeof(want));
        mxop__fmt(msg, msglen,
                  "backward of op '%s' takes %ld output %s, then its %s, then its %ld %s; got "
                  "%zu inputs",
                  op->name, no, plural(no, "gradient", "gradients"), want, no,
                  plural(no, "output", "outputs"), n_in);
        return MXOP_EARITY;
    }
    if (nout != kk) {
        mxop__fmt(msg, msglen, "backward of op '%s' makes %ld input %s, got %zu outputs", op->name,
                  kk, plural(kk, "gradient", "gradients"), n_out);
        return MXOP_EARITY;
    }
    *k = (int)kk;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Descriptors */

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        /* A zero dimension leaves no element to address: any stride will do. */
        if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s))
            s = 0;
    }
}

/* Strides that equal the contiguous ones where it matters (dimensions > 1). */
static int is_contiguous(int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t c[MXOP_MAX_DIMS];
    contiguous_strides(ndim, shape, c);
    for (int i = 0; i < ndim; i++)
        if (shape[i] > 1 && strides[i] != c[i])
            return 0;
    return 1;
}

int mxop__check_desc(const Mxop__TensorDesc *d, const char *role, int index,
                     const mxop__worker_op_t *op, int writable, mxop_tensor_t *t,
                     const mxop__region_t **reg, char *msg, size_t msglen)
{
    char why[256], nb[32];
    const mxop__region_t *r = mxop__region_find(d->region);
    if (r == NULL) {
        mxop__fmt(msg, msglen, "%s %d: region %u is not registered", role, index, d->region);
        return MXOP_EUNKNOWN_REGION;
    }
    if (writable && r->rw == NULL) {
        /* Scratch mode: the worker holds no writable view of the engine's regions. */
        mxop__fmt(msg, msglen,
                  "%s %d: region %u is read-only to this session's worker (it runs an untrusted "
                  "library: outputs must go through the client's scratch region)",
                  role, index, d->region);
        return MXOP_EREAD_ONLY;
    }
    if (d->dtype < 0 || d->dtype >= MXOP_DTYPE_COUNT) {
        mxop__fmt(msg, msglen, "%s %d: %s is not a known dtype", role, index,
                  mxop__dtype_name(d->dtype, nb, sizeof(nb)));
        return MXOP_EDTYPE;
    }
    if (d->n_shape > MXOP_MAX_DIMS) {
        mxop__fmt(msg, msglen, "%s %d has %zu dimensions, at most %d", role, index, d->n_shape,
                  MXOP_MAX_DIMS);
        return MXOP_EINVAL;
    }
    int ndim = (int)d->n_shape;
    for (int i = 0; i < ndim; i++) {
        if (d->shape[i] < 0) {
            mxop__fmt(msg, msglen, "%s %d: dimension %d is %lld", role, index, i,
                      (long long)d->shape[i]);
            return MXOP_EINVAL;
        }
    }
    const int64_t *strides = NULL;
    if (d->n_strides != 0) {
        if (d->n_strides != d->n_shape) {
            mxop__fmt(msg, msglen, "%s %d has %zu strides for %d dimensions", role, index,
                      d->n_strides, ndim);
            return MXOP_EINVAL;
        }
        if (!is_contiguous(ndim, d->shape, d->strides)) {
            if (!(op->def.flags & MXOP_OP_STRIDED)) {
                mxop__fmt(msg, msglen,
                          "%s %d is not contiguous, and op '%s' takes only contiguous tensors",
                          role, index, op->name);
                return MXOP_EINVAL;
            }
            strides = d->strides;
        }
    }
    if (d->req < MXOP_REQ_WRITE || d->req > MXOP_REQ_NULL) {
        mxop__fmt(msg, msglen, "%s %d: req %d is not write (0), add (1) or null (2)", role, index,
                  d->req);
        return MXOP_EINVAL;
    }

    uint64_t span = 0, elems = 0;
    int rc = mxop__desc_span(d->dtype, ndim, d->shape, strides, &span, &elems, why, sizeof(why));
    if (rc != 0) {
        mxop__fmt(msg, msglen, "%s %d: %s", role, index, why);
        return rc;
    }
    size_t esize = mxop_dtype_size(d->dtype);
    rc = mxop__desc_check_bounds(d->offset, span, esize, r->size, why, sizeof(why));
    if (rc != 0) {
        if (d->offset > r->size || span > r->size - d->offset) {
            unsigned long long end = d->offset + span < d->offset ? ~0ull : d->offset + span;
            mxop__fmt(msg, msglen, "%s %d: bytes [%llu, %llu) outside region %u of %zu bytes", role,
                      index, (unsigned long long)d->offset, end, d->region, r->size);
        } else {
            mxop__fmt(msg, msglen, "%s %d: %s", role, index, why);
        }
        return MXOP_EBOUNDS;
    }

    t->data = (writable ? r->rw : r->ro) + d->offset;
    t->dtype = d->dtype;
    t->ndim = ndim;
    memset(t->shape, 0, sizeof(t->shape));
    memset(t->strides, 0, sizeof(t->strides));
    if (ndim > 0)
        memcpy(t->shape, d->shape, (size_t)ndim * sizeof(int64_t));
    if (strides != NULL)
        memcpy(t->strides, strides, (size_t)ndim * sizeof(int64_t));
    else
        contiguous_strides(ndim, t->shape, t->strides);
    t->req = d->req;
    t->device = r->cuda ? r->device : -1;
    t->size = (size_t)elems;
    *reg = r;
    return 0;
}

int mxop__check_shape(int32_t dtype, const Mxop__Shape *s, int index, mxop_shape_t *out, char *msg,
                      size_t msglen)
{
    char nb[32];
    if (dtype < 0 || dtype >= MXOP_DTYPE_COUNT) {
        mxop__fmt(msg, msglen, "input %d: %s is not a known dtype", index,
                  mxop__dtype_name(dtype, nb, sizeof(nb)));
        return MXOP_EDTYPE;
    }
    if (s->n_dims > MXOP_MAX_DIMS) {
        mxop__fmt(msg, msglen, "input %d has %zu dimensions, at most %d", index, s->n_dims,
                  MXOP_MAX_DIMS);
        return MXOP_EINVAL;
    }
    memset(out, 0, sizeof(*out));
    out->ndim = (int32_t)s->n_dims;
    for (size_t i = 0; i < s->n_dims; i++) {
        if (s->dims[i] < 0) {
            mxop__fmt(msg, msglen, "input %d: dimension %zu is %lld", index, i,
                      (long long)s->dims[i]);
            return MXOP_EINVAL;
        }
        out->dims[i] = s->dims[i];
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Inference */

int mxop__op_error(const mxop__worker_op_t *op, int rc, const char *callback, char *msg,
                   size_t msglen)
{
    int known = rc < 0 && mxop__is_known_error(rc);
    if (mxop__ctx.has_msg)
        mxop__fmt(msg, msglen, "%s", mxop__ctx.msg);
    else if (known)
        mxop__fmt(msg, msglen, "op '%s' failed: %s returned %s (%s)", op->name, callback,
                  mxop_err_name(rc), mxop_strerror(rc));
    else
        mxop__fmt(msg, msglen, "op '%s' failed: %s returned %d", op->name, callback, rc);
    return known ? rc : MXOP_EOP_FAILED;
}

int mxop__infer(const mxop__worker_op_t *op, int n_in, const int32_t *dt, const mxop_shape_t *sh,
                int n_out, int32_t *odt, mxop_shape_t *osh, char *msg, size_t msglen)
{
    const mxop_op_def_t *d = &op->def;
    char a[32], b[32];
    int rc;

    for (int j = 0; j < n_out; j++)
        odt[j] = -1;
    if (d->infer_type != NULL) {
        mxop__status_callback("infer_type");
        rc = d->infer_type(&mxop__ctx, n_in, dt, n_out, odt);
        mxop__status_callback("");
        if (rc != 0)
            return mxop__op_error(op, rc, "infer_type", msg, msglen);
        mxop__ctx_clear_error();
        for (int j = 0; j < n_out; j++) {
            if (odt[j] < 0 || odt[j] >= MXOP_DTYPE_COUNT) {
                mxop__fmt(msg, msglen, "op '%s' failed: infer_type gave output %d %s", op->name, j,
                          odt[j] == -1 ? "no dtype" : mxop__dtype_name(odt[j], a, sizeof(a)));
                return MXOP_EOP_FAILED;
            }
        }
    } else if (n_in > 0) {
        for (int i = 1; i < n_in; i++) {
            if (dt[i] != dt[0]) {
                mxop__fmt(msg, msglen, "input %d is %s, op '%s' takes %s like input 0", i,
                          mxop__dtype_name(dt[i], a, sizeof(a)), op->name,
                          mxop__dtype_name(dt[0], b, sizeof(b)));
                return MXOP_EDTYPE;
            }
        }
        for (int j = 0; j < n_out; j++)
            odt[j] = dt[0];
    }

    for (int j = 0; j < n_out; j++) {
        memset(&osh[j], 0, sizeof(osh[j]));
        osh[j].ndim = -1;
    }
    if (d->infer_shape != NULL) {
        mxop__status_callback("infer_shape");
        rc = d->infer_shape(&mxop__ctx, n_in, sh, n_out, osh);
        mxop__status_callback("");
        if (rc != 0)
            return mxop__op_error(op, rc, "infer_shape", msg, msglen);
        mxop__ctx_clear_error();
        for (int j = 0; j < n_out; j++) {
            int bad = osh[j].ndim < 0 || osh[j].ndim > MXOP_MAX_DIMS;
            for (int i = 0; !bad && i < osh[j].ndim; i++)
                bad = osh[j].dims[i] < 0;
            if (bad) {
                mxop__fmt(msg, msglen, "op '%s' failed: infer_shape gave output %d no valid shape",
                          op->name, j);
                return MXOP_EOP_FAILED;
            }
        }
    } else if (n_in > 0) {
        for (int j = 0; j < n_out; j++)
            osh[j] = sh[0];
    }
    return 0;
}
