/*
 * tests/test_pbwalk.c - the walk of a protobuf message's wire form
 * (wire/pbwalk.c), which the daemon's request limits and NUL check stand
 * on: what it counts, where it stops, how it names the place.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "control.pb-c.h"
#include "wire/pbwalk.h"

static int count_fields(void *ctx, const mxop__pbwalk_at_t *at)
{
    (void)at;
    ++*(int *)ctx;
    return 0;
}

/* A LoadLibrary request, packed. */
static size_t pack_load(uint8_t *buf, const char *path)
{
    Mxop__Request req = MXOP__REQUEST__INIT;
    Mxop__LoadLibrary ll = MXOP__LOAD_LIBRARY__INIT;
    ll.path = (char *)path;
    req.id = 7;
    req.body_case = MXOP__REQUEST__BODY_LOAD_LIBRARY;
    req.load_library = &ll;
    return mxop__request__pack(&req, buf);
}

Test(pbwalk, counts_every_field_known_or_nested, .timeout = 10)
{
    uint8_t buf[128];
    size_t n = pack_load(buf, "relu.so");
    int fields = 0;
    mxop__pbwalk_t w = {.max_depth = 8, .on_field = count_fields, .ctx = &fields};
    cr_assert_eq(mxop__pbwalk(&w, &mxop__request__descriptor, "Request", buf, n), 0);
    cr_assert_eq(fields, 3, "id, load_library and its path: %d", fields);
}

Test(pbwalk, field_number_zero_is_a_bad_key_named_by_its_message, .timeout = 10)
{
    const uint8_t buf[] = {0x08, 0x01, 0x00};
    mxop__pbwalk_t w = {.max_depth = 8};
    cr_assert_eq(mxop__pbwalk(&w, &mxop__request__descriptor, "Request", buf, sizeof(buf)),
                 MXOP__PBWALK_BAD_KEY);
    cr_assert_str_eq(w.where, "Request");
}

Test(pbwalk, a_value_cut_short_names_its_field_number, .timeout = 10)
{
    /* Field 12 (load_library), length 5, one byte present. */
    const uint8_t buf[] = {0x62, 0x05, 0x0a};
    mxop__pbwalk_t w = {.max_depth = 8};
    cr_assert_eq(mxop__pbwalk(&w, &mxop__request__descriptor, "Request", buf, sizeof(buf)),
                 MXOP__PBWALK_BAD_FIELD);
    cr_assert_eq(w.where_number, 12);
}

Test(pbwalk, nesting_past_the_limit_stops_where_it_happens, .timeout = 10)
{
    uint8_t buf[128];
    size_t n = pack_load(buf, "relu.so");
    mxop__pbwalk_t w = {.max_depth = 1};
    cr_assert_eq(mxop__pbwalk(&w, &mxop__request__descriptor, "Request", buf, n),
                 MXOP__PBWALK_TOO_DEEP);
    cr_assert_str_eq(w.where, "Request.load_library");
    cr_assert_eq(w.where_depth, 2);
}

typedef struct nul_seen {
    char path[160];
    const char *field;
    size_t offset;
    size_t len;
} nul_seen_t;

static int note_nul(void *ctx, const mxop__pbwalk_at_t *at, const uint8_t *s, size_t len)
{
    nul_seen_t *seen = ctx;
    const uint8_t *nul = memchr(s, '\0', len);
    if (nul == NULL)
        return 0;
    snprintf(seen->path, sizeof(seen->path), "%s", at->path);
    seen->field = at->field->name;
    seen->offset = (size_t)(nul - s);
    seen->len = len;
    return -5;
}

Test(pbwalk, a_nul_inside_a_nested_string_names_its_message_and_field, .timeout = 10)
{
    uint8_t buf[256];
    size_t n = pack_load(buf, "abcXjunk.so");
    uint8_t *x = memmem(buf, n, "abcXjunk", 8);
    cr_assert(x != NULL);
    x[3] = '\0'; /* what protobuf-c would decode as "abc" */
    nul_seen_t seen = {0};
    mxop__pbwalk_t w = {.max_depth = 8, .on_string = note_nul, .ctx = &seen};
    cr_assert_eq(mxop__pbwalk(&w, &mxop__request__descriptor, "Request", buf, n), -5);
    cr_assert_str_eq(seen.path, "Request.load_library");
    cr_assert_str_eq(seen.field, "path");
    cr_assert_eq(seen.offset, 3);
    cr_assert_eq(seen.len, 11);
}
