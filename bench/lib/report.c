/*
 * bench/lib/report.c - see report.h.
 */
#include "bench/lib/report.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#define MAX_ROWS 64

static mxb_row_t rows[MAX_ROWS];
static size_t n_rows;

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src != NULL ? src : "");
}

double mxb_row_ratio(const mxb_row_t *r)
{
    if (r->base_name[0] == '\0' || r->base_median <= 0 || r->n == 0)
        return 0;
    return r->median / r->base_median;
}

int mxb_row_met(const mxb_row_t *r)
{
    switch (r->target) {
    case MXB_RATIO_AT_MOST: return r->n > 0 && mxb_row_ratio(r) > 0 && mxb_row_ratio(r) <= r->limit;
    case MXB_RATIO_AT_LEAST: return r->n > 0 && mxb_row_ratio(r) >= r->limit;
    case MXB_TIME_AT_MOST: return r->n > 0 && r->median <= r->limit;
    default: return -1;
    }
}

mxb_row_t *mxb_report_value(const char *section, const char *name, int kind, size_t n,
                            double median, double p99, const char *base_name, size_t base_n,
                            double base_median, double base_p99)
{
    if (n_rows == MAX_ROWS)
        return NULL;
    mxb_row_t *r = &rows[n_rows++];
    memset(r, 0, sizeof(*r));
    copy_str(r->section, sizeof(r->section), section);
    copy_str(r->name, sizeof(r->name), name);
    r->kind = kind;
    r->n = n;
    r->median = median;
    r->p99 = p99;
    if (base_name != NULL) {
        copy_str(r->base_name, sizeof(r->base_name), base_name);
        r->base_n = base_n;
        r->base_median = base_median;
        r->base_p99 = base_p99;
    }
    return r;
}

mxb_row_t *mxb_report_add(const char *section, const char *name, mxb_samples_t *s,
                          const char *base_name, mxb_samples_t *base)
{
    size_t n = s != NULL ? s->n : 0;
    double med = s != NULL ? mxb_median(s) : 0, p99 = s != NULL ? mxb_p99(s) : 0;
    if (base == NULL)
        return mxb_report_value(section, name, MXB_TIME, n, med, p99, NULL, 0, 0, 0);
    return mxb_report_value(section, name, MXB_TIME, n, med, p99, base_name, base->n,
                            mxb_median(base), mxb_p99(base));
}

void mxb_row_target(mxb_row_t *r, int target, double limit)
{
    if (r == NULL)
        return;
    r->target = target;
    r->limit = limit;
}

void mxb_row_note(mxb_row_t *r, const char *fmt, ...)
{
    if (r == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof(r->note), fmt, ap);
    va_end(ap);
}

/* "41.2 us", "3.71 ms", "812 ns"; "n/a" for a row that was not measured. */
static const char *fmt_value(char *buf, size_t len, int kind, size_t n, double v)
{
    if (n == 0)
        snprintf(buf, len, "n/a");
    else if (kind == MXB_RATE)
        snprintf(buf, len, "%.0f/s", v);
    else if (v < 1e3)
        snprintf(buf, len, "%.0f ns", v);
    else if (v < 1e6)
        snprintf(buf, len, "%.1f us", v / 1e3);
    else if (v < 1e9)
        snprintf(buf, len, "%.2f ms", v / 1e6);
    else
        snprintf(buf, len, "%.2f s", v / 1e9);
    return buf;
}

static const char *fmt_target(char *buf, size_t len, const mxb_row_t *r)
{
    char v[24];
    switch (r->target) {
    case MXB_RATIO_AT_MOST: snprintf(buf, len, "<= %.2fx", r->limit); break;
    case MXB_RATIO_AT_LEAST: snprintf(buf, len, ">= %.2fx", r->limit); break;
    case MXB_TIME_AT_MOST:
        snprintf(buf, len, "<= %s", fmt_value(v, sizeof(v), MXB_TIME, 1, r->limit));
        break;
    default: snprintf(buf, len, "-"); break;
    }
    return buf;
}

static const char *met_word(const mxb_row_t *r)
{
    int m = mxb_row_met(r);
    return m < 0 ? "" : m ? "met" : "MISSED";
}

void mxb_report_print(FILE *f)
{
    char a[32], b[32], c[32], d[32], t[40], ratio[16];
    fprintf(f, "\n%-3s %-44s %6s %10s %10s | %-28s %6s %10s %10s | %7s %10s %s\n", "#", "benchmark",
            "n", "median", "p99", "baseline", "n", "median", "p99", "ratio", "target", "");
    for (int i = 0; i < 160; i++)
        fputc('-', f);
    fputc('\n', f);
    for (size_t i = 0; i < n_rows; i++) {
        const mxb_row_t *r = &rows[i];
        double q = mxb_row_ratio(r);
        if (q > 0)
            snprintf(ratio, sizeof(ratio), "%.2fx", q);
        else
            snprintf(ratio, sizeof(ratio), "-");
        fprintf(f, "%-3s %-44s %6zu %10s %10s | %-28s ", r->section, r->name, r->n,
                fmt_value(a, sizeof(a), r->kind, r->n, r->median),
                fmt_value(b, sizeof(b), r->kind, r->n, r->p99),
                r->base_name[0] ? r->base_name : "-");
        if (r->base_name[0])
            fprintf(f, "%6zu %10s %10s", r->base_n,
                    fmt_value(c, sizeof(c), r->kind, r->base_n, r->base_median),
                    fmt_value(d, sizeof(d), r->kind, r->base_n, r->base_p99));
        else
            fprintf(f, "%6s %10s %10s", "", "", "");
        fprintf(f, " | %7s %10s %s\n", ratio, fmt_target(t, sizeof(t), r), met_word(r));
        if (r->note[0])
            fprintf(f, "    %s\n", r->note);
    }

    int any = 0;
    for (size_t i = 0; i < n_rows; i++)
        any |= rows[i].target != MXB_NO_TARGET;
    if (any)
        fprintf(f, "\nTargets:\n");
    for (size_t i = 0; i < n_rows; i++) {
        const mxb_row_t *r = &rows[i];
        if (r->target == MXB_NO_TARGET)
            continue;
        if (r->target == MXB_RATIO_AT_MOST || r->target == MXB_RATIO_AT_LEAST)
            fprintf(f, "  %-7s %-44s %s, target %s\n", met_word(r), r->name,
                    r->n ? (snprintf(a, sizeof(a), "%.2fx", mxb_row_ratio(r)), a) : "n/a",
                    fmt_target(t, sizeof(t), r));
        else
            fprintf(f, "  %-7s %-44s %s, target %s\n", met_word(r), r->name,
                    fmt_value(a, sizeof(a), r->kind, r->n, r->median), fmt_target(t, sizeof(t), r));
    }
}

int mxb_report_missed(void)
{
    int n = 0;
    for (size_t i = 0; i < n_rows; i++)
        n += mxb_row_met(&rows[i]) == 0;
    return n;
}

/* CSV fields are quoted when they hold a comma or a quote. */
static void csv_str(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static const char *target_name(int t)
{
    return t == MXB_RATIO_AT_MOST    ? "ratio_at_most"
           : t == MXB_RATIO_AT_LEAST ? "ratio_at_least"
           : t == MXB_TIME_AT_MOST   ? "ns_at_most"
                                     : "";
}

static int write_csv(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -errno;
    fprintf(f, "section,name,unit,n,median,p99,baseline,baseline_n,baseline_median,baseline_p99,"
               "ratio,target,limit,met,note\n");
    for (size_t i = 0; i < n_rows; i++) {
        const mxb_row_t *r = &rows[i];
        int met = mxb_row_met(r);
        csv_str(f, r->section);
        fputc(',', f);
        csv_str(f, r->name);
        fprintf(f, ",%s,%zu,%.1f,%.1f,", r->kind == MXB_RATE ? "calls/s" : "ns", r->n, r->median,
                r->p99);
        csv_str(f, r->base_name);
        if (r->base_name[0])
            fprintf(f, ",%zu,%.1f,%.1f,", r->base_n, r->base_median, r->base_p99);
        else
            fprintf(f, ",,,,");
        if (mxb_row_ratio(r) > 0)
            fprintf(f, "%.4f", mxb_row_ratio(r));
        fprintf(f, ",%s,", target_name(r->target));
        if (r->target != MXB_NO_TARGET)
            fprintf(f, "%.4g", r->limit);
        fprintf(f, ",%s,", met < 0 ? "" : met ? "yes" : "no");
        csv_str(f, r->note);
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -errno;
}

static int write_json(const char *path, const char *machine)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -errno;
    fprintf(f, "{\n  \"machine\": ");
    json_str(f, machine);
    fprintf(f, ",\n  \"rows\": [\n");
    for (size_t i = 0; i < n_rows; i++) {
        const mxb_row_t *r = &rows[i];
        int met = mxb_row_met(r);
        fprintf(f, "    {\"section\": ");
        json_str(f, r->section);
        fprintf(f, ", \"name\": ");
        json_str(f, r->name);
        fprintf(f, ", \"unit\": \"%s\", \"n\": %zu, \"median\": %.1f, \"p99\": %.1f",
                r->kind == MXB_RATE ? "calls/s" : "ns", r->n, r->median, r->p99);
        if (r->base_name[0]) {
            fprintf(f, ", \"baseline\": ");
            json_str(f, r->base_name);
            fprintf(f, ", \"baseline_n\": %zu, \"baseline_median\": %.1f, \"baseline_p99\": %.1f",
                    r->base_n, r->base_median, r->base_p99);
            if (mxb_row_ratio(r) > 0)
                fprintf(f, ", \"ratio\": %.4f", mxb_row_ratio(r));
        }
        if (r->target != MXB_NO_TARGET)
            fprintf(f, ", \"target\": \"%s\", \"limit\": %.4g, \"met\": %s", target_name(r->target),
                    r->limit, met ? "true" : "false");
        if (r->note[0]) {
            fprintf(f, ", \"note\": ");
            json_str(f, r->note);
        }
        fprintf(f, "}%s\n", i + 1 < n_rows ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) == 0 ? 0 : -errno;
}

int mxb_report_write(const char *csv, const char *json, const char *machine)
{
    int rc = write_csv(csv);
    if (rc != 0) {
        fprintf(stderr, "bench: cannot write %s: %s\n", csv, strerror(-rc));
        return rc;
    }
    rc = write_json(json, machine);
    if (rc != 0)
        fprintf(stderr, "bench: cannot write %s: %s\n", json, strerror(-rc));
    return rc;
}
