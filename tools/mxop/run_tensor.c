/*
 * Tensors for `mxop run` and `mxop verify`: see run_tensor.h.
 */
#include "tools/mxop/run_tensor.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mxop__run_dtype_parse(const char *name)
{
#define PARSE_CASE(e, n, size, fw)                                                                 \
    if (!strcmp(name, n))                                                                          \
        return e;
    MXOP_DTYPE_MAP(PARSE_CASE)
#undef PARSE_CASE
    return -1;
}

int mxop__run_shape_parse(const char *text, mxop_shape_t *shape)
{
    memset(shape, 0, sizeof(*shape));
    if (text[0] == '\0' || !strcmp(text, "scalar"))
        return 0;
    const char *p = text;
    for (;;) {
        if (shape->ndim == MXOP_MAX_DIMS || *p < '0' || *p > '9')
            return -1;
        char *end;
        errno = 0;
        long long d = strtoll(p, &end, 10);
        if (errno != 0 || d < 0)
            return -1;
        shape->dims[shape->ndim++] = d;
        if (*end == '\0')
            return 0;
        if (*end != 'x')
            return -1;
        p = end + 1;
    }
}

size_t mxop__run_numel(int32_t ndim, const int64_t *dims)
{
    size_t n = 1;
    for (int32_t i = 0; i < ndim; i++)
        n *= (size_t)dims[i];
    return n;
}

uint64_t mxop__run_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mxop__run_fill_random(void *data, int32_t dtype, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mxop__run_rand(state);
        double u = (double)(r >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        switch (dtype) {
        case MXOP_F32:
        case MXOP_F64:
        case MXOP_F16:
        case MXOP_BF16: mxop__run_set(data, dtype, i, 2.0 * u - 1.0); break;
        case MXOP_U8: mxop__run_set(data, dtype, i, (double)(r % 16)); break;
        case MXOP_BOOL: mxop__run_set(data, dtype, i, (double)(r & 1)); break;
        default: mxop__run_set(data, dtype, i, (double)(int)(r % 16) - 8.0); break;
        }
    }
}

double mxop__run_get(const void *data, int32_t dtype, size_t i)
{
    switch (dtype) {
    case MXOP_F32: return ((const float *)data)[i];
    case MXOP_F64: return ((const double *)data)[i];
    case MXOP_F16: return mxop_f16_to_f32(((const uint16_t *)data)[i]);
    case MXOP_BF16: return mxop_bf16_to_f32(((const uint16_t *)data)[i]);
    case MXOP_I32: return ((const int32_t *)data)[i];
    case MXOP_I64: return (double)((const int64_t *)data)[i];
    case MXOP_U8: return ((const uint8_t *)data)[i];
    case MXOP_I8: return ((const int8_t *)data)[i];
    case MXOP_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return NAN;
    }
}

void mxop__run_set(void *data, int32_t dtype, size_t i, double v)
{
    switch (dtype) {
    case MXOP_F32: ((float *)data)[i] = (float)v; break;
    case MXOP_F64: ((double *)data)[i] = v; break;
    case MXOP_F16: ((uint16_t *)data)[i] = mxop_f32_to_f16((float)v); break;
    case MXOP_BF16: ((uint16_t *)data)[i] = mxop_f32_to_bf16((float)v); break;
    case MXOP_I32: ((int32_t *)data)[i] = (int32_t)v; break;
    case MXOP_I64: ((int64_t *)data)[i] = (int64_t)v; break;
    case MXOP_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case MXOP_I8: ((int8_t *)data)[i] = (int8_t)v; break;
    case MXOP_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    default: break;
    }
}

uint64_t mxop__run_fnv1a64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

double mxop__run_sum(const void *data, int32_t dtype, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += mxop__run_get(data, dtype, i);
    return s;
}

/* numpy's descr for each dtype; bf16 travels as its raw bits. */
static const char *npy_descr(int32_t dtype)
{
    switch (dtype) {
    case MXOP_F32: return "<f4";
    case MXOP_F64: return "<f8";
    case MXOP_F16: return "<f2";
    case MXOP_BF16: return "<u2";
    case MXOP_I32: return "<i4";
    case MXOP_I64: return "<i8";
    case MXOP_U8: return "|u1";
    case MXOP_I8: return "|i1";
    case MXOP_BOOL: return "|b1";
    default: return NULL;
    }
}

static int descr_dtype(const char *descr, int want)
{
    if (!strcmp(descr, "<u2") && want == MXOP_BF16)
        return MXOP_BF16;
    /* numpy writes one-byte types with '|'; accept '<' and '=' too. */
    char norm[8];
    snprintf(norm, sizeof(norm), "%.7s", descr);
    if ((norm[0] == '<' || norm[0] == '=') && norm[1] && (norm[2] == '1') && !norm[3])
        norm[0] = '|';
    if (norm[0] == '=')
        norm[0] = '<';
    for (int d = 0; d < MXOP_DTYPE_COUNT; d++)
        if (d != MXOP_BF16 && !strcmp(norm, npy_descr(d)))
            return d;
    return -1;
}

/* Finds 'key': in the header dict and returns the text after the colon. */
static const char *dict_value(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof(pat), "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p)
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_header(const char *hdr, int want, int32_t *dtype, mxop_shape_t *shape, char *err,
                        size_t errlen)
{
    const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order"),
               *s = dict_value(hdr, "shape");
    if (!d || !f || !s || (*d != '\'' && *d != '"') || *s != '(')
        return fail(err, errlen, "the header has no descr, fortran_order or shape");
    char descr[16];
    size_t n = 0;
    for (d++; *d && *d != '\'' && *d != '"' && n + 1 < sizeof(descr); d++)
        descr[n++] = *d;
    descr[n] = '\0';
    if (strncmp(f, "False", 5) != 0)
        return fail(err, errlen, "fortran_order is not False (only C order is read)");
    *dtype = descr_dtype(descr, want);
    if (*dtype < 0)
        return fail(err, errlen,
                    "dtype '%s' is not one of mxop's (little-endian f32 f64 f16 i32 i64 u8 i8 "
                    "bool; '<u2' for bf16)",
                    descr);
    memset(shape, 0, sizeof(*shape));
    for (s++;;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (*s == ')')
            return 0;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || shape->ndim == MXOP_MAX_DIMS)
            return fail(err, errlen, "the shape is malformed or has more than %d dimensions",
                        MXOP_MAX_DIMS);
        shape->dims[shape->ndim++] = v;
        s = end;
        if (*s == 'L') /* Python 2's longs */
            s++;
    }
}

int mxop__npy_read(const char *path, int want, int32_t *dtype, mxop_shape_t *shape, void **data,
                   size_t *nbytes, char *err, size_t errlen)
{
    *data = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return fail(err, errlen, "%s: %s", path, strerror(errno));
    unsigned char pre[12];
    char *hdr = NULL;
    int rc = -1;
    if (fread(pre, 1, 8, fp) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fail(err, errlen, "%s: not a .npy file (no \\x93NUMPY magic)", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, fp) != 2)
            goto short_read;
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, fp) != 4)
            goto short_read;
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        fail(err, errlen, "%s: .npy format version %d is not read", path, pre[6]);
        goto out;
    }
    if (hlen > (1u << 20)) {
        fail(err, errlen, "%s: header of %zu bytes is too long", path, hlen);
        goto out;
    }
    hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, fp) != hlen)
        goto short_read;
    hdr[hlen] = '\0';
    char why[160];
    if (parse_header(hdr, want, dtype, shape, why, sizeof(why)) != 0) {
        fail(err, errlen, "%s: %s", path, why);
        goto out;
    }
    *nbytes = mxop__run_numel(shape->ndim, shape->dims) * mxop_dtype_size(*dtype);
    *data = malloc(*nbytes ? *nbytes : 1);
    if (!*data || fread(*data, 1, *nbytes, fp) != *nbytes) {
        free(*data);
        *data = NULL;
        goto short_read;
    }
    rc = 0;
    goto out;
short_read:
    fail(err, errlen, "%s: the file ends before its header or data", path);
out:
    free(hdr);
    fclose(fp);
    return rc;
}

int mxop__npy_write(const char *path, int32_t dtype, int32_t ndim, const int64_t *dims,
                    const void *data, size_t nbytes, char *err, size_t errlen)
{
    char dict[256], shp[160] = "";
    size_t at = 0;
    for (int32_t i = 0; i < ndim; i++)
        at += (size_t)snprintf(shp + at, sizeof(shp) - at, "%lld,%s", (long long)dims[i],
                               i + 1 < ndim ? " " : "");
    if (ndim > 1) /* "(2, 3)" rather than "(2, 3,)"; a 1-tuple keeps its comma */
        shp[at - 1] = '\0';
    int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     npy_descr(dtype), shp);
    /* Magic, version, length, dict and padding to 64 bytes, ending in '\n'. */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return fail(err, errlen, "%s: %s", path, strerror(errno));
    size_t hlen = (size_t)n + pad + 1;
    unsigned char pre[10];
    memcpy(pre, "\x93NUMPY\x01\x00", 8);
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    int ok = fwrite(pre, 1, 10, fp) == 10 && fwrite(dict, 1, (size_t)n, fp) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', fp) != EOF;
    ok = ok && fputc('\n', fp) != EOF && fwrite(data, 1, nbytes, fp) == nbytes;
    if (fclose(fp) != 0)
        ok = 0;
    if (!ok)
        return fail(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return 0;
}
