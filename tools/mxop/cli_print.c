/*
 * tools/mxop/cli_print.c - how `mxop` shows durations, sizes, strings in
 * JSON, an op's signature (shared by `mxop ops` and `mxop status`) and a
 * library's version (`mxop load` and `mxop reload`).
 */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "mxop/types.h"
#include "tools/mxop/cli.h"

/* A JSON string literal; bytes past ASCII escaped as Latin-1 (`ascii`) or written as they are. */
static void json_str(FILE *f, const char *s, bool ascii)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s != NULL ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || (ascii && *p >= 0x7f))
            fprintf(f, "\\u%04x", (unsigned)*p); /* Latin-1 past ASCII: always valid */
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void mxop__cli_json_str(FILE *f, const char *s)
{
    json_str(f, s, true);
}

void mxop__json_str(FILE *f, const char *s)
{
    json_str(f, s, false);
}

const char *mxop__cli_dur(uint64_t ns, char *buf, size_t len)
{
    if (ns < 1000)
        snprintf(buf, len, "%" PRIu64 "ns", ns);
    else if (ns < 1000000)
        snprintf(buf, len, "%.1fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, len, "%.2fms", (double)ns / 1e6);
    else
        snprintf(buf, len, "%.2fs", (double)ns / 1e9);
    return buf;
}

const char *mxop__cli_bytes(uint64_t n, char *buf, size_t len)
{
    if (n < 1024)
        snprintf(buf, len, "%" PRIu64 "B", n);
    else if (n < (1u << 20))
        snprintf(buf, len, "%.1fKiB", (double)n / 1024.0);
    else if (n < (1u << 30))
        snprintf(buf, len, "%.1fMiB", (double)n / 1048576.0);
    else
        snprintf(buf, len, "%.1fGiB", (double)n / 1073741824.0);
    return buf;
}

const char *mxop__cli_attr_type(int32_t type)
{
    switch (type) {
    case MXOP_ATTR_INT: return "int";
    case MXOP_ATTR_FLOAT: return "float";
    case MXOP_ATTR_BOOL: return "bool";
    case MXOP_ATTR_STRING: return "string";
    case MXOP_ATTR_INT_LIST: return "int_list";
    case MXOP_ATTR_FLOAT_LIST: return "float_list";
    default: return "unknown";
    }
}

static void add_word(char *buf, size_t len, const char *w)
{
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, "%s%s", n ? "," : "", w);
}

const char *mxop__cli_op_flags(const Mxop__OpInfo *o, char *buf, size_t len)
{
    buf[0] = '\0';
    if (o->has_backward)
        add_word(buf, len, "backward");
    if (o->stateful)
        add_word(buf, len, "stateful");
    if (o->devices & 1u)
        add_word(buf, len, "cpu");
    if (o->devices & 2u)
        add_word(buf, len, "gpu");
    if (o->flags & MXOP_OP_STRIDED)
        add_word(buf, len, "strided");
    if (o->mutated_inputs != 0)
        add_word(buf, len, "mutates-inputs");
    if (o->dynamic_outputs != 0)
        add_word(buf, len, "dynamic-outputs");
    return buf;
}

/* A 64-bit mask as the list of its set bits: "0,2". */
static void mask_list(FILE *f, uint64_t m, int json)
{
    int first = 1;
    for (int i = 0; i < 64; i++) {
        if (!((m >> i) & 1u))
            continue;
        fprintf(f, "%s%d", first ? "" : (json ? "," : ","), i);
        first = 0;
    }
}

void mxop__cli_op_text(FILE *f, const Mxop__OpInfo *o)
{
    char flags[160];
    fprintf(f, "%s  (%s)\n", o->name, o->library);
    if (o->description != NULL && o->description[0])
        fprintf(f, "    %s\n", o->description);
    if (o->num_inputs < 0)
        fprintf(f, "    inputs: variadic, at least %d", (int)o->min_inputs);
    else
        fprintf(f, "    inputs: %d", (int)o->num_inputs);
    fprintf(f, "; outputs: %d\n", (int)o->num_outputs);
    fprintf(f, "    flags: %s\n", mxop__cli_op_flags(o, flags, sizeof(flags))[0] ? flags : "-");
    if (o->mutated_inputs != 0) {
        fprintf(f, "    mutated inputs: ");
        mask_list(f, o->mutated_inputs, 0);
        fputc('\n', f);
    }
    if (o->dynamic_outputs != 0) {
        fprintf(f, "    dynamic outputs: ");
        mask_list(f, o->dynamic_outputs, 0);
        fputc('\n', f);
    }
    if (o->n_attrs == 0)
        fprintf(f, "    attributes: none declared\n");
    for (size_t k = 0; k < o->n_attrs; k++) {
        const Mxop__AttrDecl *a = o->attrs[k];
        fprintf(f, "    attr %s: %s", a->name, mxop__cli_attr_type(a->type));
        if (a->required)
            fprintf(f, ", required");
        else if (a->has_default)
            fprintf(f, " = %s", a->default_value);
        else
            fprintf(f, ", optional");
        if (a->doc != NULL && a->doc[0])
            fprintf(f, "  -- %s", a->doc);
        fputc('\n', f);
    }
}

void mxop__cli_op_json(FILE *f, const Mxop__OpInfo *o)
{
    char flags[160];
    fprintf(f, "{\"name\":");
    mxop__cli_json_str(f, o->name);
    fprintf(f, ",\"library\":");
    mxop__cli_json_str(f, o->library);
    fprintf(f, ",\"description\":");
    mxop__cli_json_str(f, o->description);
    fprintf(f,
            ",\"index\":%u,\"num_inputs\":%d,\"min_inputs\":%d,\"variadic\":%s,"
            "\"num_outputs\":%d",
            (unsigned)o->index, (int)o->num_inputs, (int)o->min_inputs,
            o->num_inputs < 0 ? "true" : "false", (int)o->num_outputs);
    fprintf(f, ",\"has_backward\":%s,\"stateful\":%s,\"cpu\":%s,\"gpu\":%s,\"strided\":%s",
            o->has_backward ? "true" : "false", o->stateful ? "true" : "false",
            (o->devices & 1u) ? "true" : "false", (o->devices & 2u) ? "true" : "false",
            (o->flags & MXOP_OP_STRIDED) ? "true" : "false");
    fprintf(f, ",\"mutated_inputs\":[");
    mask_list(f, o->mutated_inputs, 1);
    fprintf(f, "],\"dynamic_outputs\":[");
    mask_list(f, o->dynamic_outputs, 1);
    fprintf(f, "],\"flags\":");
    mxop__cli_json_str(f, mxop__cli_op_flags(o, flags, sizeof(flags)));
    fprintf(f, ",\"attrs\":[");
    for (size_t k = 0; k < o->n_attrs; k++) {
        const Mxop__AttrDecl *a = o->attrs[k];
        fprintf(f, "%s{\"name\":", k ? "," : "");
        mxop__cli_json_str(f, a->name);
        fprintf(f, ",\"type\":\"%s\",\"required\":%s,\"default\":", mxop__cli_attr_type(a->type),
                a->required ? "true" : "false");
        if (a->has_default)
            mxop__cli_json_str(f, a->default_value);
        else
            fprintf(f, "null");
        fprintf(f, ",\"doc\":");
        mxop__cli_json_str(f, a->doc);
        fputc('}', f);
    }
    fprintf(f, "]}");
}

static void clean(char *s)
{
    for (unsigned char *p = (unsigned char *)s; p != NULL && *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
}

void mxop__cli_sanitize(ProtobufCMessage *m)
{
    if (m == NULL)
        return;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        char *base = (char *)m + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)((char *)m + f->quantifier_offset);
            void **v = *(void ***)base;
            for (size_t k = 0; v != NULL && k < n; k++) {
                if (f->type == PROTOBUF_C_TYPE_STRING)
                    clean(v[k]);
                else
                    mxop__cli_sanitize(v[k]);
            }
        } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            /* Only the member the case names is set. */
            if (*(uint32_t *)((char *)m + f->quantifier_offset) != f->id)
                continue;
            if (f->type == PROTOBUF_C_TYPE_STRING)
                clean(*(char **)base);
            else
                mxop__cli_sanitize(*(ProtobufCMessage **)base);
        } else if (f->type == PROTOBUF_C_TYPE_STRING) {
            clean(*(char **)base);
        } else {
            mxop__cli_sanitize(*(ProtobufCMessage **)base);
        }
    }
}

static void fmt_time(char *out, size_t n, int64_t ns)
{
    time_t t = (time_t)(ns / 1000000000LL);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        mxop__fmt(out, n, "%lld", (long long)t);
    else
        mxop__fmt(out + strlen(out), n - strlen(out), ".%03lldZ",
                  (long long)(ns % 1000000000LL / 1000000));
}

void mxop__print_libver(FILE *f, const Mxop__LibraryVersion *v, bool json, const char *indent)
{
    const char *sha = v->sha256 != NULL && v->sha256[0] ? v->sha256 : "";
    if (json) {
        fprintf(f, "{\"name\": ");
        mxop__json_str(f, v->name);
        fprintf(f, ", \"path\": ");
        mxop__json_str(f, v->path);
        fprintf(f,
                ", \"dev\": %llu, \"ino\": %llu, \"size\": %llu, \"mtime_ns\": %lld, "
                "\"sha256\": ",
                (unsigned long long)v->dev, (unsigned long long)v->ino, (unsigned long long)v->size,
                (long long)v->mtime_ns);
        mxop__json_str(f, sha);
        fprintf(f, ", \"loaded_at_ms\": %lld}", (long long)v->loaded_at_ms);
        return;
    }
    char mt[48], la[48];
    fmt_time(mt, sizeof(mt), v->mtime_ns);
    fmt_time(la, sizeof(la), v->loaded_at_ms * 1000000LL);
    fprintf(f, "%slibrary: %s\n", indent, v->name != NULL ? v->name : "");
    fprintf(f, "%spath:    %s\n", indent, v->path != NULL ? v->path : "");
    if (sha[0] == '\0') {
        fprintf(f, "%sversion: unknown (the daemon could not read the file)\n", indent);
        return;
    }
    fprintf(f, "%sdevice:  %llu\n%sinode:   %llu\n", indent, (unsigned long long)v->dev, indent,
            (unsigned long long)v->ino);
    fprintf(f, "%ssize:    %llu\n", indent, (unsigned long long)v->size);
    fprintf(f, "%smtime:   %s\n", indent, mt);
    fprintf(f, "%ssha256:  %s\n", indent, sha);
    fprintf(f, "%sloaded:  %s\n", indent, la);
}
