/*
 * The results of `mxop verify`: see verify_report.h.
 */
#include "tools/mxop/verify_report.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char op[64], check[32];
    int n[3];            /* cases passed, failed, skipped */
    char detail[3][640]; /* the last pass, the first failure, the first skip */
} entry_t;

struct mxop__verify_report {
    entry_t *e;
    size_t n, cap;
};

mxop__verify_report_t *mxop__verify_report_new(void)
{
    return calloc(1, sizeof(mxop__verify_report_t));
}

void mxop__verify_report_free(mxop__verify_report_t *r)
{
    if (r)
        free(r->e);
    free(r);
}

static entry_t *find(mxop__verify_report_t *r, const char *op, const char *check)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->e[i].op, op) && !strcmp(r->e[i].check, check))
            return &r->e[i];
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        entry_t *e = realloc(r->e, cap * sizeof(*e));
        if (!e)
            return NULL;
        r->e = e;
        r->cap = cap;
    }
    entry_t *e = &r->e[r->n++];
    memset(e, 0, sizeof(*e));
    snprintf(e->op, sizeof(e->op), "%s", op);
    snprintf(e->check, sizeof(e->check), "%s", check);
    return e;
}

void mxop__verify_expect(mxop__verify_report_t *r, const char *op, const char *check)
{
    find(r, op, check);
}

void mxop__verify_add(mxop__verify_report_t *r, const char *op, const char *check, int status,
                      const char *fmt, ...)
{
    entry_t *e = find(r, op, check);
    if (!e)
        return;
    /* Keep the first failure and skip reason, the last pass. */
    if (status == MXOP__VERIFY_PASS || e->n[status] == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->detail[status], sizeof(e->detail[status]), fmt, ap);
        va_end(ap);
    }
    e->n[status]++;
}

static int status_of(const entry_t *e)
{
    if (e->n[MXOP__VERIFY_FAIL])
        return MXOP__VERIFY_FAIL;
    return e->n[MXOP__VERIFY_PASS] ? MXOP__VERIFY_PASS : MXOP__VERIFY_SKIP;
}

static void json_string(FILE *to, const char *s)
{
    fputc('"', to);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(to, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(to, "\\u%04x", ch);
        else
            fputc(ch, to);
    }
    fputc('"', to);
}

/* The line's detail: the failure (and how many more), the pass or the skip reason. */
static void detail_of(const entry_t *e, char *buf, size_t len)
{
    int st = status_of(e);
    if (st == MXOP__VERIFY_FAIL && e->n[st] > 1)
        snprintf(buf, len, "%s (and %d more failing case%s)", e->detail[st], e->n[st] - 1,
                 e->n[st] > 2 ? "s" : "");
    else if (st == MXOP__VERIFY_SKIP && e->n[st] == 0)
        snprintf(buf, len, "not reached: no case got this far");
    else if (st == MXOP__VERIFY_PASS && e->n[MXOP__VERIFY_SKIP] > 0)
        snprintf(buf, len, "%s (%d case%s, %d skipped: %s)", e->detail[st], e->n[st],
                 e->n[st] == 1 ? "" : "s", e->n[MXOP__VERIFY_SKIP], e->detail[MXOP__VERIFY_SKIP]);
    else
        snprintf(buf, len, "%s", e->detail[st]);
}

int mxop__verify_print(const mxop__verify_report_t *r, FILE *to, const char *library, int json)
{
    static const char *const names[3] = {"PASS", "FAIL", "SKIP"};
    int count[3] = {0, 0, 0};
    char ops[64] = "", buf[1400];
    int n_ops = 0;
    if (json) {
        fprintf(to, "{\"library\": ");
        json_string(to, library);
        fprintf(to, ", \"results\": [");
    }
    for (size_t i = 0; i < r->n; i++) {
        const entry_t *e = &r->e[i];
        int st = status_of(e);
        count[st]++;
        if (strcmp(ops, e->op) != 0) {
            snprintf(ops, sizeof(ops), "%s", e->op);
            n_ops++;
        }
        detail_of(e, buf, sizeof(buf));
        if (!json) {
            fprintf(to, "%s %-20s %-13s %s\n", names[st], e->op, e->check, buf);
            continue;
        }
        fprintf(to, "%s{\"op\": ", i ? ", " : "");
        json_string(to, e->op);
        fprintf(to, ", \"check\": ");
        json_string(to, e->check);
        fprintf(to, ", \"status\": \"%s\", \"detail\": ", names[st]);
        json_string(to, buf);
        fprintf(to, ", \"cases\": {\"pass\": %d, \"fail\": %d, \"skip\": %d}}", e->n[0], e->n[1],
                e->n[2]);
    }
    if (json)
        fprintf(to, "], \"ops\": %d, \"passed\": %d, \"failed\": %d, \"skipped\": %d}\n", n_ops,
                count[0], count[1], count[2]);
    else
        fprintf(to, "summary: %s: %d op%s, %d checks: %d passed, %d failed, %d skipped\n", library,
                n_ops, n_ops == 1 ? "" : "s", count[0] + count[1] + count[2], count[0], count[1],
                count[2]);
    return count[MXOP__VERIFY_FAIL];
}
