/*
 * python/mxop/_jaxffi.c - an mxop op as an XLA FFI handler (mxop.jax).
 *
 * One handler, "mxop_call", serves every op: jax.ffi.ffi_call passes it the
 * address of a call record (mxop_jaxffi_call_t, below) as the attribute
 * "mxop_call"; the record names the client, the op, the prebuilt
 * mxop_call_t (attributes, deadline) and whether this is the op's forward
 * or its backward.  mxop.jax builds one record per (op, attributes,
 * direction) at trace time and keeps it for the life of the process, so
 * the address baked into the compiled program stays valid.
 *
 * XLA's buffers travel as heap arrays (region MXOP_REGION_HEAP), as any
 * binding's: libmxop passes one that lies in memory it maps by reference
 * and stages the rest (XLA's own buffers: one copy each way).  Dtypes are
 * mxop's enum names (mxop/types.h); the switch below only says which XLA
 * element type each is.  Everything else (the call,
 * shapes and dtypes checked again, deadlines, a crashed worker replaced)
 * is libmxop's; a failure comes back to XLA as an FFI error whose message
 * names the op, libmxop's error name and its detail.
 *
 * Written against XLA's C API header (xla/ffi/api/c_api.h, shipped with
 * jaxlib: jax.ffi.include_dir()) and loaded with ctypes: no Python headers,
 * and no link to libmxop (the record carries libmxop's functions, from the
 * copy the package loaded), so that one libmxop serves the whole process.
 */
#include <stdio.h>
#include <string.h>

#include "mxop/client.h"
#include "xla/ffi/api/c_api.h"

/* The call record: mirrored by mxop.jax (_JaxCall); struct_size checks it. */
typedef struct mxop_jaxffi_call {
    uint32_t struct_size;
    int32_t backward;      /* 0: mxop_forward, 1: mxop_backward */
    mxop_client_t *client; /* NULL once the client is closed */
    const mxop_op_t *op;
    const mxop_call_t *call;
    const char *what; /* "op 'relu' (relu.so)", for messages */
    int (*forward)(mxop_client_t *, const mxop_op_t *, const mxop_call_t *, const mxop_array_t *,
                   int, mxop_array_t *, int);
    int (*backward_fn)(mxop_client_t *, const mxop_op_t *, const mxop_call_t *,
                       const mxop_array_t *, int, mxop_array_t *, int);
    const char *(*last_error)(const mxop_client_t *);
    const char *(*err_name)(int);
} mxop_jaxffi_call_t;

/* The record's size, for mxop.jax to check its mirror against. */
size_t mxop_jaxffi_call_size(void);
size_t mxop_jaxffi_call_size(void)
{
    return sizeof(mxop_jaxffi_call_t);
}

XLA_FFI_Error *mxop_jaxffi_handler(XLA_FFI_CallFrame *frame);

static XLA_FFI_Error *fail(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *msg)
{
    XLA_FFI_Error_Create_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    a.message = msg;
    a.errc = code;
    return api->XLA_FFI_Error_Create(&a);
}

/* XLA's element types as mxop's; -1 for one mxop has not. */
static int32_t mxop_dtype_of(XLA_FFI_DataType t)
{
    switch (t) {
    case XLA_FFI_DataType_F32: return MXOP_F32;
    case XLA_FFI_DataType_F64: return MXOP_F64;
    case XLA_FFI_DataType_F16: return MXOP_F16;
    case XLA_FFI_DataType_BF16: return MXOP_BF16;
    case XLA_FFI_DataType_S32: return MXOP_I32;
    case XLA_FFI_DataType_S64: return MXOP_I64;
    case XLA_FFI_DataType_U8: return MXOP_U8;
    case XLA_FFI_DataType_S8: return MXOP_I8;
    case XLA_FFI_DataType_PRED: return MXOP_BOOL;
    default: return -1;
    }
}

/* One XLA buffer as a heap array; 0, or a message in msg. */
static int to_array(const XLA_FFI_Buffer *b, mxop_array_t *a, const char *what, const char *kind,
                    int i, char *msg, size_t msg_len)
{
    memset(a, 0, sizeof *a);
    a->dtype = mxop_dtype_of(b->dtype);
    if (a->dtype < 0) {
        snprintf(msg, msg_len, "mxop %s: %s %d has XLA element type %d, which mxop has not", what,
                 kind, i, (int)b->dtype);
        return -1;
    }
    if (b->rank < 0 || b->rank > MXOP_MAX_DIMS) {
        snprintf(msg, msg_len, "mxop %s: %s %d has rank %lld (mxop takes at most %d)", what, kind,
                 i, (long long)b->rank, MXOP_MAX_DIMS);
        return -1;
    }
    size_t n = mxop_dtype_size(a->dtype);
    a->ndim = (int32_t)b->rank;
    for (int64_t d = 0; d < b->rank; d++) {
        a->shape[d] = b->dims[d];
        n *= (size_t)b->dims[d];
    }
    a->data = b->data;
    a->region = MXOP_REGION_HEAP;
    a->nbytes = n;
    return 0;
}

static XLA_FFI_Error *metadata(XLA_FFI_CallFrame *frame)
{
    XLA_FFI_Metadata_Extension *ext = (XLA_FFI_Metadata_Extension *)frame->extension_start;
    if (ext->extension_base.struct_size < XLA_FFI_Metadata_Extension_STRUCT_SIZE ||
        ext->metadata == NULL || ext->metadata->struct_size < XLA_FFI_Metadata_STRUCT_SIZE)
        return fail(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "mxop: XLA's metadata query is older than this handler's FFI headers");
    ext->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    ext->metadata->api_version.extension_start = NULL;
    ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    ext->metadata->traits = 0;
    return NULL;
}

/* The record named by the attribute "mxop_call", or NULL. */
static const mxop_jaxffi_call_t *record_of(const XLA_FFI_Attrs *attrs)
{
    for (int64_t i = 0; i < attrs->size; i++) {
        const XLA_FFI_ByteSpan *name = attrs->names[i];
        if (attrs->types[i] != XLA_FFI_AttrType_SCALAR || name->len != 9 ||
            memcmp(name->ptr, "mxop_call", 9) != 0)
            continue;
        const XLA_FFI_Scalar *s = attrs->attrs[i];
        if (s->dtype != XLA_FFI_DataType_S64 && s->dtype != XLA_FFI_DataType_U64)
            return NULL;
        uint64_t addr;
        memcpy(&addr, s->value, sizeof addr);
        return (const mxop_jaxffi_call_t *)(uintptr_t)addr;
    }
    return NULL;
}

static XLA_FFI_Error_Code xla_code(int rc)
{
    switch (rc) {
    case MXOP_EINVAL:
    case MXOP_EARITY:
    case MXOP_ESHAPE:
    case MXOP_EDTYPE:
    case MXOP_EATTR: return XLA_FFI_Error_Code_INVALID_ARGUMENT;
    case MXOP_ETIMEOUT: return XLA_FFI_Error_Code_DEADLINE_EXCEEDED;
    case MXOP_ENOT_SUPPORTED: return XLA_FFI_Error_Code_UNIMPLEMENTED;
    case MXOP_EWORKER_CRASHED:
    case MXOP_EDISCONNECTED: return XLA_FFI_Error_Code_UNAVAILABLE;
    default: return XLA_FFI_Error_Code_INTERNAL;
    }
}

XLA_FFI_Error *mxop_jaxffi_handler(XLA_FFI_CallFrame *frame)
{
    char msg[1024];
    if (frame->extension_start != NULL &&
        frame->extension_start->type == XLA_FFI_Extension_Metadata)
        return metadata(frame);
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE)
        return NULL;
    const mxop_jaxffi_call_t *r = record_of(&frame->attrs);
    if (r == NULL || r->struct_size != sizeof *r)
        return fail(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "mxop: the custom call has no valid 'mxop_call' record (call mxop ops "
                    "through mxop.jax; a serialized program cannot carry them)");
    if (r->client == NULL) {
        snprintf(msg, sizeof msg,
                 "mxop %s: its client is closed (a program compiled before "
                 "the close; call the op through a new client)",
                 r->what);
        return fail(frame->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, msg);
    }
    int n_in = (int)frame->args.size, n_out = (int)frame->rets.size;
    if (n_in > MXOP_MAX_TENSORS || n_out > MXOP_MAX_TENSORS) {
        snprintf(msg, sizeof msg, "mxop %s: %d inputs and %d outputs (at most %d each)", r->what,
                 n_in, n_out, MXOP_MAX_TENSORS);
        return fail(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    }
    mxop_array_t in[MXOP_MAX_TENSORS], out[MXOP_MAX_TENSORS];
    for (int i = 0; i < n_in; i++)
        if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER ||
            to_array(frame->args.args[i], &in[i], r->what, "input", i, msg, sizeof msg) < 0)
            return fail(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    for (int i = 0; i < n_out; i++)
        if (frame->rets.types[i] != XLA_FFI_RetType_BUFFER ||
            to_array(frame->rets.rets[i], &out[i], r->what, "output", i, msg, sizeof msg) < 0)
            return fail(frame->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    int rc = (r->backward ? r->backward_fn : r->forward)(r->client, r->op, r->call, in, n_in, out,
                                                         n_out);
    if (rc == 0)
        return NULL;
    const char *detail = r->last_error(r->client);
    if (detail == NULL || *detail == '\0')
        detail = "(no detail)";
    /* libmxop's detail names the op most of the time; it is not said twice. */
    if (strstr(detail, r->what) != NULL)
        snprintf(msg, sizeof msg, "mxop%s: %s: %s", r->backward ? " backward" : "", r->err_name(rc),
                 detail);
    else
        snprintf(msg, sizeof msg, "mxop %s%s: %s: %s", r->what, r->backward ? " backward" : "",
                 r->err_name(rc), detail);
    return fail(frame->api, xla_code(rc), msg);
}
