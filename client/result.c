/*
 * client/result.c - what a worker's answer may say before the client
 * believes it.
 *
 * The worker runs an op library the engine does not trust, and anything in
 * the worker's address space can write what the client reads back: the
 * bytes on the data channel, the mailbox's reply slot, the strings in a
 * result.  So every CallResult is checked here the same way, whichever
 * path brought it: its kind and its decoding, the call it names (only the
 * call in flight, or one given up on earlier), its status (0 or a known
 * MXOP_E* code), and its message, copied as printable UTF-8 of bounded
 * length, the op it names being the one called.  What the results of
 * particular calls carry (inferred shapes, dynamic output shapes, state
 * ids) is checked by invoke.c against what the call asked.
 */
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"
#include "shm/call_record.h"

int mxop__code_known(int code)
{
    switch (code) {
#define XX(name, num, msg) case num:
        MXOP_ERROR_MAP(XX)
#undef XX
        return 1;
    default: return 0;
    }
}

/* The length of the UTF-8 sequence at s (a printable character), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    /* Lines and tabs are kept (a library's multi-line message); other controls are not. */
    if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t')
        return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07u;
    } else {
        return 0; /* a control character, DEL, a continuation byte or no UTF-8 lead */
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0u) != 0x80u)
            return 0; /* also stops at the terminating NUL */
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    /* Overlong forms, surrogates, beyond U+10FFFF, and the C1 controls. */
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp < 0xa0))
        return 0;
    return n;
}

void mxop__text_clean(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    size_t at = 0;
    if (cap == 0)
        return;
    const unsigned char *s = (const unsigned char *)(src != NULL ? src : "");
    while (*s != '\0') {
        size_t n = utf8_len(s);
        /* A byte that is not a printable character is written as \xNN, never cut in two. */
        size_t out = n > 0 ? n : 4;
        if (at + out > cap - 1) {
            /* Cut: say so where there is room for the mark, never inside a character. */
            if (cap >= 4) {
                if (at + 3 > cap - 1) {
                    at = cap - 4;
                    while (at > 0 && ((unsigned char)dst[at] & 0xc0u) == 0x80u)
                        at--;
                }
                memcpy(dst + at, "...", 3);
                at += 3;
            }
            break;
        }
        if (n > 0) {
            memcpy(dst + at, s, n);
            s += n;
        } else {
            dst[at] = '\\';
            dst[at + 1] = 'x';
            dst[at + 2] = hex[*s >> 4];
            dst[at + 3] = hex[*s & 15];
            s++;
        }
        at += out;
    }
    dst[at] = '\0';
}

/* Whether the worker's message already begins by naming `op` ("op 'NAME'..."), as its own do. */
static int names_op(const char *msg, const mxop_op_t *op)
{
    size_t n = strlen(op->name);
    return strncmp(msg, "op '", 4) == 0 && strncmp(msg + 4, op->name, n) == 0 && msg[4 + n] == '\'';
}

/*
 * A result record (shm/call_record.h) decoded into a CallResult in c->pba,
 * as unpacking would have made it; NULL (with the reason in c->err) for a
 * record that is not one.
 */
static Mxop__CallResult *record_take(mxop_client_t *c, uint32_t len, const uint8_t *payload)
{
    ProtobufCAllocator *a = &c->pba.allocator;
    Mxop__CallResult *r = a->alloc(a->allocator_data, sizeof *r);
    size_t cap = len + 1u;
    char *text = a->alloc(a->allocator_data, cap);
    char why[160];
    if (r == NULL || text == NULL) {
        mxop__fail(c, MXOP_ENOMEM, "out of memory for a result from the worker");
        return NULL;
    }
    if (mxop__result_rec_decode(payload, len, r, text, cap, why, sizeof why) != 0) {
        mxop__fail(c, MXOP_EPROTOCOL, "%s", why);
        return NULL;
    }
    return r;
}

int mxop__result_take(mxop_client_t *c, const mxop_op_t *op, uint64_t id, uint16_t kind,
                      uint32_t len, const uint8_t *payload, Mxop__CallResult **res)
{
    Mxop__CallResult *r = NULL;
    mxop__pbarena_reset(&c->pba);
    if (kind == MXOP__KIND_RESULT_REC) {
        r = record_take(c, len, payload);
        if (r == NULL)
            return MXOP__RESULT_GARBAGE;
    } else if (kind == MXOP__KIND_CALL_RESULT) {
        r = mxop__call_result__unpack(&c->pba.allocator, len, payload);
        if (r == NULL) {
            mxop__fail(c, MXOP_EPROTOCOL, "a result frame of %u bytes that does not decode", len);
            return MXOP__RESULT_GARBAGE;
        }
    } else {
        mxop__fail(c, MXOP_EPROTOCOL, "a frame of kind %u where a call result belongs", kind);
        return MXOP__RESULT_GARBAGE;
    }
    /* From here on a record and a protobuf result are one struct, checked alike. */
    /*
     * Call ids only grow, and one call is in flight: a result naming an
     * earlier call is that of a call given up on (its deadline passed); one
     * naming a later call, or none, answers nothing this session asked.
     */
    if (r->id == 0 && r->status != 0) {
        /* The worker's answer to a frame it could not read as a call: it says why. */
        char text[MXOP__ERR_MAX / 2];
        mxop__text_clean(text, sizeof text, r->message);
        mxop__fail(c, MXOP_EPROTOCOL, "a result for no call, with status %d: %s", (int)r->status,
                   text);
        return MXOP__RESULT_GARBAGE;
    }
    if (r->id == 0 || r->id > id) {
        mxop__fail(c, MXOP_EPROTOCOL,
                   "a result for call %llu, while call %llu is the latest this session made",
                   (unsigned long long)r->id, (unsigned long long)id);
        return MXOP__RESULT_GARBAGE;
    }
    if (r->id != id)
        return MXOP__RESULT_STALE;
    *res = r;
    if (r->status == 0)
        return 0;

    /*
     * The detail: the op named (unless the worker's message names it as the
     * client would), what is wrong with the status, then the message, cleaned
     * into the room left so that a long one ends in "..." on a character.
     */
    char head[MXOP__ERR_MAX], text[MXOP__ERR_MAX];
    mxop__text_clean(text, sizeof text, r->message);
    int code = r->status;
    head[0] = '\0';
    if (op != NULL && !names_op(text, op))
        mxop__fmt(head, sizeof head, "op '%s' (%s): ", op->name, op->library);
    size_t at = strlen(head);
    if (!mxop__code_known(code)) {
        /* Not a code the engine could act on: said as what it is. */
        mxop__fmt(head + at, sizeof head - at,
                  "the worker answered with status %d, which is no MXOP_E* code%s", (int)code,
                  text[0] != '\0' ? ": " : "");
        code = MXOP_EPROTOCOL;
    } else if (text[0] == '\0') {
        mxop__fmt(head + at, sizeof head - at, "%s", mxop_strerror(code));
    }
    at = strlen(head);
    mxop__text_clean(text, sizeof text - at, r->message);
    return mxop__fail(c, code, "%s%s", head, text);
}
