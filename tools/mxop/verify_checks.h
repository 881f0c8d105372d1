/*
 * The checks of `mxop verify`, on one op at a time.
 *
 * verify_cases.c finds the cases an op accepts (inputs of several shapes,
 * including empty and 0-d, and of every dtype; what inference refuses is
 * skipped, not failed) and checks the attribute declarations;
 * verify_checks.c runs each case: forward against inference and poison,
 * writes past each output (canaries), inputs, aliasing, repeatability in a warm and a fresh worker,
 * backward against central differences, req add and null, and stateful instances.
 */
#ifndef MXOP_TOOLS_VERIFY_CHECKS_H
#define MXOP_TOOLS_VERIFY_CHECKS_H

#include "mxop/client.h"
#include "tools/mxop/run_session.h"
#include "tools/mxop/verify_report.h"

/* The most inputs a case gives a (variadic) op; more are never tried. */
#define MXOP__VERIFY_MAX_IN 16
#define MXOP__VERIFY_MAX_CASES 64

/* One case: the inputs' dtypes and shapes and what inference gives. */
typedef struct mxop__verify_case {
    int n_in, n_out;
    int32_t in_dt[MXOP__VERIFY_MAX_IN], out_dt[MXOP_MAX_TENSORS];
    mxop_shape_t in_sh[MXOP__VERIFY_MAX_IN], out_sh[MXOP_MAX_TENSORS];
    char label[256]; /* "3x4:f32 3x4:u8", the `mxop run --input` syntax */
} mxop__verify_case_t;

typedef struct mxop__verify {
    const mxop__run_daemon_t *daemon;
    mxop_client_t *c; /* the warm session: every op's cases run here */
    mxop__verify_report_t *rep;
    uint64_t seed;
    int32_t timeout_ms; /* every call's deadline */
    int halted;         /* a call of this op timed out: its further cases are skipped */
    /* --attr K=V given by the user, NULL-terminated pairs. */
    const char *const *user_attrs;
    int n_user_attrs;

    /* The op under test. */
    const mxop_op_t *op;
    const char *name;
    mxop_op_info_v2_t info;
    /* The call's attributes: the user's plus values for required ones. */
    const char *attrs[2 * 64 + 1];
    char synth[64][32];
    int n_attrs;
    mxop__verify_case_t cases[MXOP__VERIFY_MAX_CASES];
    int n_cases;
} mxop__verify_t;

/* Records a result for the op under test. */
#define MXOP__VERIFY_RESULT(v, check, status, ...)                                                 \
    mxop__verify_add((v)->rep, (v)->name, check, status, __VA_ARGS__)

/* Fills v->attrs and v->cases for v->op; reports "shapes" and "dtypes". */
void mxop__verify_find_cases(mxop__verify_t *v);

/* The "attrs" check: defaults accepted, wrong types, unknown and missing keys refused. */
void mxop__verify_check_attrs(mxop__verify_t *v);

/* Runs every case of v->op; the per-case checks. */
void mxop__verify_run_cases(mxop__verify_t *v);

/* The "state" check: create/use/destroy cycles of a stateful op. */
void mxop__verify_check_state(mxop__verify_t *v);

#endif
