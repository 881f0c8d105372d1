/*
 * tests/plugins/hostile_scan.c - a library that looks for its caller's
 * secrets in everything its worker can read.
 *
 *   scan   1 input, 1 output (f32, the same shape, at least 1 element).
 *          Attribute "secret": 64 hex digits, a 32-byte pattern.  During
 *          the call it walks every readable mapping of its own process
 *          (/proc/self/maps) and counts the occurrences of the pattern.
 *          out[0] = the count, or -1 when the mappings cannot be listed
 *          (so that a test sees a scan that did not happen).  The pattern
 *          lives only in one buffer of its own (skipped); the attribute
 *          travels as hex text, which never matches it.  Returns 0.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_scan", "1.0");

#define SECRET_LEN 32
/* Larger mappings are address space reserved, not memory (a sanitizer's shadow). */
#define SCAN_MAX ((uintptr_t)1 << 30)

static const mxop_host_t *host;

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/*
 * Occurrences of pat in [a, b), but not at the pattern's own buffer.  A
 * plain loop, not memmem, and not instrumented: under AddressSanitizer a
 * read of memory it poisons (its redzones) would end the worker.
 */
__attribute__((no_sanitize_address, noinline)) static long
count_in(const unsigned char *a, const unsigned char *b, const unsigned char *pat)
{
    long n = 0;
    for (const unsigned char *p = a; b - p >= SECRET_LEN; p++) {
        if (*p != pat[0])
            continue;
        int k = 1;
        while (k < SECRET_LEN && p[k] == pat[k])
            k++;
        if (k == SECRET_LEN && (const unsigned char *)p != pat)
            n++;
    }
    return n;
}

static long scan(const unsigned char *pat)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    char line[512];
    long n = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        uintptr_t a, b;
        char perms[8];
        int pos = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %*s %n", &a, &b, perms, &pos) < 3)
            continue;
        const char *name = pos > 0 ? line + pos : "";
        /* Kernel pages that are not memory (reading some of them faults). */
        if (perms[0] != 'r' || b - a > SCAN_MAX || strncmp(name, "[vvar", 5) == 0 ||
            strncmp(name, "[vsyscall", 9) == 0)
            continue;
        n += count_in((const unsigned char *)a, (const unsigned char *)b, pat);
    }
    fclose(f);
    return n;
}

static int scan_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
{
    const char *hex = host->attr_get(ctx, "secret");
    if (hex == NULL || strlen(hex) != 2 * SECRET_LEN || out[0].size < 1)
        return host->set_error(ctx, MXOP_EATTR, "scan: needs secret=<64 hex digits>");
    unsigned char *pat = malloc(SECRET_LEN);
    if (pat == NULL)
        return host->set_error(ctx, MXOP_EOP_FAILED, "scan: out of memory");
    for (int i = 0; i < SECRET_LEN; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(pat);
            return host->set_error(ctx, MXOP_EATTR, "scan: secret is not hex");
        }
        pat[i] = (unsigned char)(hi << 4 | lo);
    }
    long n = scan(pat);
    /* The one copy is wiped, so that the next scan does not find it here. */
    memset(pat, 0, SECRET_LEN);
    __asm__ __volatile__("" : : "r"(pat) : "memory");
    free(pat);
    ((float *)out[0].data)[0] = (float)n;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "scan",
        .description = "counts a secret pattern in every readable mapping of the worker",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = scan_forward,
    };
    return host->register_op(ctx, &def);
}
