/*
 * wire/pbwalk.c - the walk of a protobuf message's wire form (pbwalk.h).
 */
#include "wire/pbwalk.h"

#include <stdbool.h>

#include "common/util.h"

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = x;
            return true;
        }
    }
    return false;
}

static int stop_at(mxop__pbwalk_t *w, int code, const char *path, uint32_t number, uint32_t depth)
{
    mxop__fmt(w->where, sizeof(w->where), "%s", path);
    w->where_number = number;
    w->where_depth = depth;
    return code;
}

static int walk(mxop__pbwalk_t *w, const ProtobufCMessageDescriptor *desc, const uint8_t *buf,
                size_t len, uint32_t depth, const char *path)
{
    if (depth > w->max_depth)
        return stop_at(w, MXOP__PBWALK_TOO_DEEP, path, 0, depth);
    const uint8_t *p = buf;
    const uint8_t *end = buf + len;
    while (p < end) {
        uint64_t key, v = 0;
        if (!read_varint(&p, end, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
            return stop_at(w, MXOP__PBWALK_BAD_KEY, path, 0, depth);
        mxop__pbwalk_at_t at = {.number = (uint32_t)(key >> 3), .depth = depth, .path = path};
        at.field = desc != NULL ? protobuf_c_message_descriptor_get_field(desc, at.number) : NULL;
        int rc = w->on_field != NULL ? w->on_field(w->ctx, &at) : 0;
        if (rc != 0)
            return rc;
        bool ok = true;
        switch (key & 7) {
        case 0: ok = read_varint(&p, end, &v); break;
        case 1:
            ok = end - p >= 8;
            p += ok ? 8 : 0;
            break;
        case 5:
            ok = end - p >= 4;
            p += ok ? 4 : 0;
            break;
        case 2:
            ok = read_varint(&p, end, &v) && v <= (uint64_t)(end - p);
            if (!ok)
                break;
            if (at.field != NULL && at.field->type == PROTOBUF_C_TYPE_MESSAGE) {
                char sub[160];
                mxop__fmt(sub, sizeof(sub), "%s.%s", path, at.field->name);
                rc = walk(w, at.field->descriptor, p, (size_t)v, depth + 1, sub);
            } else if (at.field != NULL && at.field->type == PROTOBUF_C_TYPE_STRING &&
                       w->on_string != NULL) {
                rc = w->on_string(w->ctx, &at, p, (size_t)v);
            }
            if (rc != 0)
                return rc;
            p += v;
            break;
        default: ok = false; break;
        }
        if (!ok)
            return stop_at(w, MXOP__PBWALK_BAD_FIELD, path, at.number, depth);
    }
    return 0;
}

int mxop__pbwalk(mxop__pbwalk_t *w, const ProtobufCMessageDescriptor *desc, const char *root,
                 const uint8_t *buf, size_t len)
{
    w->where[0] = '\0';
    w->where_number = 0;
    w->where_depth = 0;
    return walk(w, desc, buf, len, 1, root);
}
