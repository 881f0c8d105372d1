/*
 * bench/jax/inproc_relu.c - relu as an in-process XLA FFI handler.
 *
 * The baseline of the JAX rows of `make bench`: the same op as relu.so,
 * but run by XLA in its own process, with no mxop in between.  What a
 * call of mxop.jax costs beyond it is mxop's (staging, the round trip to
 * the worker).  f32 only, one input, one output of the same shape.
 */
#include <string.h>

#include "xla/ffi/api/c_api.h"

XLA_FFI_Error *bench_relu_handler(XLA_FFI_CallFrame *frame);

static XLA_FFI_Error *fail(const XLA_FFI_Api *api, const char *msg)
{
    XLA_FFI_Error_Create_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    a.message = msg;
    a.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
    return api->XLA_FFI_Error_Create(&a);
}

XLA_FFI_Error *bench_relu_handler(XLA_FFI_CallFrame *frame)
{
    if (frame->extension_start != NULL &&
        frame->extension_start->type == XLA_FFI_Extension_Metadata) {
        XLA_FFI_Metadata_Extension *ext = (XLA_FFI_Metadata_Extension *)frame->extension_start;
        ext->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
        ext->metadata->api_version.extension_start = NULL;
        ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
        ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
        ext->metadata->traits = 0;
        return NULL;
    }
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE)
        return NULL;
    if (frame->args.size != 1 || frame->rets.size != 1)
        return fail(frame->api, "bench relu: one input and one output");
    const XLA_FFI_Buffer *x = frame->args.args[0];
    XLA_FFI_Buffer *y = frame->rets.rets[0];
    if (x->dtype != XLA_FFI_DataType_F32 || y->dtype != XLA_FFI_DataType_F32)
        return fail(frame->api, "bench relu: f32 only");
    size_t n = 1;
    for (int64_t d = 0; d < x->rank; d++)
        n *= (size_t)x->dims[d];
    const float *in = x->data;
    float *out = y->data;
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    return NULL;
}
