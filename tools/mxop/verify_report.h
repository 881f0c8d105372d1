/*
 * The results of `mxop verify`: one line per op and check, PASS, FAIL or
 * SKIP with a reason, folded over the cases (shapes and dtypes) a check
 * ran on: a check fails when any case failed (the first failure is
 * shown), passes when a case passed and none failed, else is skipped.
 */
#ifndef MXOP_TOOLS_VERIFY_REPORT_H
#define MXOP_TOOLS_VERIFY_REPORT_H

#include <stdio.h>

enum { MXOP__VERIFY_PASS = 0, MXOP__VERIFY_FAIL = 1, MXOP__VERIFY_SKIP = 2 };

typedef struct mxop__verify_report mxop__verify_report_t;

mxop__verify_report_t *mxop__verify_report_new(void);
void mxop__verify_report_free(mxop__verify_report_t *r);

/* Adds the line (op, check) now, so that lines keep this order; no result yet. */
void mxop__verify_expect(mxop__verify_report_t *r, const char *op, const char *check);

/* Records one case's result of a check; the detail is formatted like printf. */
__attribute__((format(printf, 5, 6))) void mxop__verify_add(mxop__verify_report_t *r,
                                                            const char *op, const char *check,
                                                            int status, const char *fmt, ...);

/* Prints the lines and the summary (text or one JSON object); returns the failed count. */
int mxop__verify_print(const mxop__verify_report_t *r, FILE *to, const char *library, int json);

#endif
