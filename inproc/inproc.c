/*
 * inproc/inproc.c - the worker's op runtime inside another process
 * (include/mxop/inproc.h), for debugging an op library under gdb or a
 * sanitizer.
 *
 * The same loader, host table, attribute checks and inference as a worker,
 * driven by direct calls instead of the data channel.  It is linked into
 * build/lib/libmxop-inproc.a, never into the worker.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "mxop/inproc.h"
#include "server/worker/runtime.h"

static char last_msg[MXOP__W_MSG_MAX];

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    va_end(ap);
    return code;
}

const char *mxop_inproc_error(void)
{
    return last_msg;
}

int mxop_inproc_load(const char *path)
{
    uint32_t li;
    last_msg[0] = '\0';
    if (path == NULL)
        return fail(MXOP_EINVAL, "mxop_inproc_load: path is NULL");
    const char *base = strrchr(path, '/');
    return mxop__plugin_load(path, base != NULL ? base + 1 : path, -1, NULL, NULL, &li, last_msg,
                             sizeof(last_msg));
}

/* The {"k", "v", ..., NULL} list as the worker's call set-up takes it (borrowed). */
static int make_attrs(const char *const *attrs, mxop__call_attrs_t *out)
{
    out->n = 0;
    for (size_t i = 0; attrs != NULL && attrs[i] != NULL; i += 2) {
        if (attrs[i + 1] == NULL)
            return fail(MXOP_EINVAL, "attrs: key '%s' has no value", attrs[i]);
        if (out->n == MXOP__W_MAX_ATTRS)
            return fail(MXOP_EATTR, "attrs: more than %d attributes", MXOP__W_MAX_ATTRS);
        out->keys[out->n] = attrs[i];
        out->vals[out->n] = attrs[i + 1];
        out->n++;
    }
    return 0;
}

static const mxop__worker_op_t *find(const char *name)
{
    const mxop__worker_op_t *op = name != NULL ? mxop__op_find(name) : NULL;
    if (op == NULL)
        fail(MXOP_EUNKNOWN_OP, "no op '%s' loaded in this process", name ? name : "(NULL)");
    return op;
}

/* A caller's tensors with strides and sizes filled in when left zero. */
static int prepare(const char *role, int n, const mxop_tensor_t *src, mxop_tensor_t *dst,
                   int32_t *dt, mxop_shape_t *sh)
{
    for (int i = 0; i < n; i++) {
        dst[i] = src[i];
        if (dst[i].ndim < 0 || dst[i].ndim > MXOP_MAX_DIMS || mxop_dtype_size(dst[i].dtype) == 0)
            return fail(MXOP_EINVAL, "%s %d: bad dtype %d or ndim %d", role, i, dst[i].dtype,
                        dst[i].ndim);
        int zero = 1;
        size_t elems = 1;
        for (int d = 0; d < dst[i].ndim; d++) {
            zero &= dst[i].strides[d] == 0;
            elems *= (size_t)dst[i].shape[d];
        }
        int64_t s = 1;
        for (int d = dst[i].ndim - 1; zero && d >= 0; d--) {
            dst[i].strides[d] = s;
            s *= dst[i].shape[d] > 0 ? dst[i].shape[d] : 1;
        }
        dst[i].size = elems;
        dst[i].device = -1;
        dt[i] = dst[i].dtype;
        memset(&sh[i], 0, sizeof(sh[i]));
        sh[i].ndim = dst[i].ndim;
        memcpy(sh[i].dims, dst[i].shape, sizeof(sh[i].dims));
    }
    return 0;
}

/*
 * The start of a call in process: the attributes in the worker's form (in
 * *store, the caller's, which must outlive the call), then
 * mxop__call_begin, with no status page to publish to.
 */
static int begin(const mxop__worker_op_t *op, const char *const *attrs, mxop__call_attrs_t *store)
{
    int rc = make_attrs(attrs, store);
    if (rc != 0)
        return rc;
    return mxop__call_begin(op, 0, 0, store, 0, 0, NULL, last_msg, sizeof(last_msg));
}

int mxop_inproc_call(const char *name, int backward, const char *const *attrs, int n_in,
                     const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    static mxop_tensor_t tin[MXOP__W_MAX_IN], tout[MXOP__W_MAX_OUT];
    static int32_t dt[MXOP__W_MAX_IN], odt[MXOP__W_MAX_OUT];
    static mxop_shape_t sh[MXOP__W_MAX_IN], osh[MXOP__W_MAX_OUT];
    mxop__call_attrs_t store;
    int k = 0;
    last_msg[0] = '\0';
    const mxop__worker_op_t *op = find(name);
    if (op == NULL)
        return MXOP_EUNKNOWN_OP;
    if (n_in < 0 || n_out < 0 || (n_in > 0 && in == NULL) || (n_out > 0 && out == NULL))
        return fail(MXOP_EINVAL, "bad tensor counts or NULL tensors");
    int rc = mxop__check_arity(op, backward, (size_t)n_in, (size_t)n_out, 1, &k, last_msg,
                               sizeof(last_msg));
    if (rc != 0)
        return rc;
    if (op->def.state_create != NULL)
        return fail(MXOP_ENOT_SUPPORTED, "op '%s' is stateful: not supported in process", op->name);
    int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *) =
        backward ? op->def.backward : op->def.forward;
    if (fn == NULL)
        return fail(MXOP_ENOT_SUPPORTED, "op '%s' has no %s on the host", op->name,
                    backward ? "backward" : "forward");
    if ((rc = prepare("input", n_in, in, tin, dt, sh)) != 0 ||
        (rc = prepare("output", n_out, out, tout, odt, osh)) != 0)
        return rc;
    if ((rc = begin(op, attrs, &store)) != 0)
        return rc;
    /* Forward outputs must be what inference says; backward's match the forward inputs. */
    int32_t want_dt[MXOP__W_MAX_OUT];
    mxop_shape_t want_sh[MXOP__W_MAX_OUT];
    int fwd_in = backward ? k : n_in;
    const int32_t *fdt = backward ? dt + op->def.num_outputs : dt;
    const mxop_shape_t *fsh = backward ? sh + op->def.num_outputs : sh;
    if (!backward) {
        rc = mxop__infer(op, fwd_in, fdt, fsh, n_out, want_dt, want_sh, last_msg, sizeof(last_msg));
        if (rc != 0)
            goto out;
    } else {
        for (int j = 0; j < n_out; j++) {
            want_dt[j] = fdt[j];
            want_sh[j] = fsh[j];
        }
    }
    for (int j = 0; j < n_out; j++) {
        char a[64], b[64];
        if (odt[j] != want_dt[j] || osh[j].ndim != want_sh[j].ndim ||
            memcmp(osh[j].dims, want_sh[j].dims, sizeof(int64_t) * (size_t)osh[j].ndim) != 0) {
            rc = fail(odt[j] != want_dt[j] ? MXOP_EDTYPE : MXOP_ESHAPE,
                      "output %d is %s %s, op '%s' makes %s %s", j, mxop_dtype_name(odt[j]),
                      mxop_shape_format(a, sizeof(a), osh[j].ndim, osh[j].dims), op->name,
                      mxop_dtype_name(want_dt[j]),
                      mxop_shape_format(b, sizeof(b), want_sh[j].ndim, want_sh[j].dims));
            goto out;
        }
    }
    /* The caller's arrays are the worker's layout; the library gets its own (op.h, rule 4). */
    const mxop_tensor_t *lib_in;
    mxop_tensor_t *lib_out;
    mxop__tensor_view(op, n_in, tin, n_out, tout, &lib_in, &lib_out);
    rc = fn(&mxop__ctx, n_in, lib_in, n_out, lib_out);
    if (rc != 0)
        rc = mxop__op_error(op, rc, backward ? "backward" : "forward", last_msg, sizeof(last_msg));
out:
    mxop__call_end();
    return rc;
}

int mxop_inproc_infer(const char *name, const char *const *attrs, int n_in,
                      const int32_t *in_dtypes, const mxop_shape_t *in_shapes, int n_out,
                      int32_t *out_dtypes, mxop_shape_t *out_shapes)
{
    mxop__call_attrs_t store;
    int k;
    last_msg[0] = '\0';
    const mxop__worker_op_t *op = find(name);
    if (op == NULL)
        return MXOP_EUNKNOWN_OP;
    int rc =
        mxop__check_arity(op, 0, (size_t)n_in, (size_t)n_out, 1, &k, last_msg, sizeof(last_msg));
    if (rc != 0)
        return rc;
    if ((rc = begin(op, attrs, &store)) != 0)
        return rc;
    rc = mxop__infer(op, n_in, in_dtypes, in_shapes, n_out, out_dtypes, out_shapes, last_msg,
                     sizeof(last_msg));
    mxop__call_end();
    return rc;
}
