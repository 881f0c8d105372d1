/*
 * `mxop verify`: the checks that run an op's cases.  See verify_checks.h.
 */
#include "tools/mxop/verify_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mxop/run_tensor.h"

/* gradcheck's tolerances (torch.autograd.gradcheck). */
#define FD_EPS 1e-6
#define FD_ATOL 1e-5
#define FD_RTOL 1e-3
/* Inputs with more elements than this get no finite differences (2 calls per element). */
#define FD_MAX_ELEMS 64

#define POISON_A 0xA5 /* a pattern no float op writes by chance */
#define POISON_B 0xFF /* a NaN in every float dtype */

#define PASS MXOP__VERIFY_PASS
#define FAIL MXOP__VERIFY_FAIL
#define SKIP MXOP__VERIFY_SKIP
#define RESULT MXOP__VERIFY_RESULT

/*
 * "bounds": every output (and gradient buffer) sits between two canaries
 * of GUARD bytes in one arena array; a canary byte that changed during a
 * call is a write past the output's end (or before its start).  Canaries
 * rather than guard pages: they give the output and the exact bytes, and
 * a write that runs on past them into unmapped memory still leaves its
 * first bytes in them for the report when the worker dies of it.
 */
#define GUARD 16384

/*
 * The detail of the last failed call: kept here, because destroying the
 * call's instance afterwards is a call of its own.
 */
static char call_err[1024];
/* Set when the last forward() failed in mxop_state_create, not in forward. */
static int state_refused;

static void keep_error(mxop_client_t *c, int rc)
{
    if (rc != 0)
        snprintf(call_err, sizeof(call_err), "%s", mxop_last_error(c));
}

static const char *detail(mxop_client_t *c)
{
    return call_err[0] ? call_err : mxop_last_error(c);
}

/* An array between two canaries: `raw` holds GUARD bytes, the array's span, GUARD bytes. */
typedef struct guarded {
    mxop_array_t raw;
    size_t bytes; /* the array's own bytes */
    size_t span;  /* bytes rounded up to the arena's 64 */
} guarded_t;

/* The first write out of bounds a case's calls made. */
typedef struct overrun {
    const char *what;                           /* "output", "gradient of input"; NULL: none seen */
    const char *call;                           /* "forward", "backward" */
    int index, rc;                              /* the array's index; the call's result */
    size_t nbytes;                              /* the array's own bytes */
    size_t n_after, after_first, after_last;    /* changed bytes past the end, offsets from it */
    size_t n_before, before_first, before_last; /* before the start, distances to it */
} overrun_t;

/* One session's arrays for a case. */
typedef struct bufs {
    mxop_client_t *c;
    const mxop_op_t *op;
    mxop_array_t in[MXOP__VERIFY_MAX_IN];
    mxop_array_t out[MXOP_MAX_TENSORS], out_tmpl[MXOP_MAX_TENSORS];
    guarded_t out_g[MXOP_MAX_TENSORS];
    /* The gradient buffers while grad_checks runs (raw.data NULL otherwise). */
    guarded_t dx_g[MXOP__VERIFY_MAX_IN];
    int n_in, n_out;
    overrun_t over;
} bufs_t;

static unsigned char canary(size_t i)
{
    /* Position-dependent, so that no constant an op writes matches it all. */
    return (unsigned char)(0x6B ^ (i * 13u) ^ (i >> 8));
}

static void guarded_free(mxop_client_t *c, guarded_t *g)
{
    mxop_array_free(c, &g->raw);
    memset(g, 0, sizeof(*g));
}

/* Allocates `view` (dtype, shape) between two canaries of GUARD bytes. */
static int guarded_alloc(mxop_client_t *c, int32_t dt, int32_t ndim, const int64_t *dims,
                         guarded_t *g, mxop_array_t *view)
{
    memset(g, 0, sizeof(*g));
    g->bytes = mxop__run_numel(ndim, dims) * mxop_dtype_size(dt);
    g->span = (g->bytes + 63) & ~(size_t)63;
    int64_t n = (int64_t)(GUARD + g->span + GUARD);
    int rc = mxop_array_alloc(c, MXOP_U8, 1, &n, &g->raw);
    if (rc == 0)
        rc = mxop_array_view(c, g->raw.region, g->raw.offset + GUARD, dt, ndim, dims, view);
    if (rc != 0)
        guarded_free(c, g);
    return rc;
}

static void guard_arm(const guarded_t *g)
{
    unsigned char *p = g->raw.data;
    if (p == NULL)
        return;
    for (size_t i = 0; i < GUARD; i++)
        p[i] = canary(i);
    for (size_t i = GUARD + g->bytes; i < g->raw.nbytes; i++)
        p[i] = canary(i);
}

/*
 * Records in b->over (when it holds nothing yet) a canary byte of `g` that
 * changed during `call`.  The bytes between the array's end and its 64-byte
 * round-up are canaries too.
 */
static void guard_check(bufs_t *b, const guarded_t *g, const char *what, int index,
                        const char *call, int rc)
{
    const unsigned char *p = g->raw.data;
    if (p == NULL || b->over.what != NULL)
        return;
    overrun_t o = {.what = what, .call = call, .index = index, .rc = rc, .nbytes = g->bytes};
    size_t end = GUARD + g->bytes;
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != canary(i)) {
            if (o.n_before++ == 0)
                o.before_first = GUARD - i;
            o.before_last = GUARD - i;
        }
    for (size_t i = end; i < g->raw.nbytes; i++) {
        if (p[i] != canary(i)) {
            if (o.n_after++ == 0)
                o.after_first = i - end;
            o.after_last = i - end;
        }
    }
    if (o.n_before || o.n_after)
        b->over = o;
}

/* The "bounds" line of a case, from b->over. */
static void report_bounds(mxop__verify_t *v, const mxop__verify_case_t *k, const bufs_t *b)
{
    const overrun_t *o = &b->over;
    if (o->what == NULL) {
        RESULT(v, "bounds", PASS,
               "no write past any output or gradient buffer (canaries of %d bytes on each side)",
               GUARD);
        return;
    }
    /* The extent first: a byte the op wrote may happen to equal its canary byte. */
    char after[160] = "", before[160] = "", failed[160] = "";
    if (o->n_after)
        snprintf(after, sizeof(after), "past its end: bytes +%zu to +%zu after it changed",
                 o->after_first, o->after_last);
    if (o->n_before)
        snprintf(before, sizeof(before), "%sbefore its start: bytes -%zu to -%zu changed",
                 o->n_after ? "; and " : "", o->before_first, o->before_last);
    if (o->rc != 0)
        snprintf(failed, sizeof(failed), "; the call then failed: %s", mxop_err_name(o->rc));
    RESULT(v, "bounds", FAIL, "%s %d (%zu bytes): %s wrote %s%s (canaries of %d bytes)%s (case %s)",
           o->what, o->index, o->nbytes, o->call, after, before, GUARD, failed, k->label);
}

static int is_float(int32_t dt)
{
    return dt == MXOP_F32 || dt == MXOP_F64 || dt == MXOP_F16 || dt == MXOP_BF16;
}

static size_t numel(const mxop_array_t *a)
{
    return mxop__run_numel(a->ndim, a->shape);
}

static void bufs_free(bufs_t *b)
{
    for (int i = 0; i < b->n_in; i++)
        mxop_array_free(b->c, &b->in[i]);
    for (int i = 0; i < b->n_out; i++)
        guarded_free(b->c, &b->out_g[i]);
    memset(b->in, 0, sizeof(b->in));
    memset(b->out_tmpl, 0, sizeof(b->out_tmpl));
    b->n_in = b->n_out = 0;
}

/* Allocates a case's arrays in b->c; inputs random from `rng`. */
static int bufs_alloc(bufs_t *b, const mxop__verify_case_t *k, uint64_t rng)
{
    int rc = 0;
    for (int i = 0; i < k->n_in && rc == 0; i++) {
        rc = mxop_array_alloc(b->c, k->in_dt[i], k->in_sh[i].ndim, k->in_sh[i].dims, &b->in[i]);
        if (rc == 0) {
            b->n_in++;
            mxop__run_fill_random(b->in[i].data, k->in_dt[i], numel(&b->in[i]), &rng);
        }
    }
    for (int i = 0; i < k->n_out && rc == 0; i++) {
        rc = guarded_alloc(b->c, k->out_dt[i], k->out_sh[i].ndim, k->out_sh[i].dims, &b->out_g[i],
                           &b->out_tmpl[i]);
        if (rc == 0)
            b->n_out++;
    }
    if (rc != 0)
        bufs_free(b);
    return rc;
}

/*
 * One forward call with outputs poisoned by `poison` (-1: left as they
 * are).  A stateful op gets a fresh instance, created and destroyed around
 * the call, so that every call starts from the same state.
 */
static int forward(mxop__verify_t *v, bufs_t *b, int poison)
{
    for (int i = 0; i < b->n_out; i++) {
        b->out[i] = b->out_tmpl[i];
        if (poison >= 0 && b->out[i].nbytes)
            memset(b->out[i].data, poison, b->out[i].nbytes);
        guard_arm(&b->out_g[i]);
    }
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = v->attrs, .seed = v->seed};
    int rc;
    call_err[0] = '\0';
    state_refused = 0;
    if (v->info.stateful) {
        int32_t dt[MXOP__VERIFY_MAX_IN];
        mxop_shape_t sh[MXOP__VERIFY_MAX_IN];
        for (int i = 0; i < b->n_in; i++) {
            dt[i] = b->in[i].dtype;
            sh[i].ndim = b->in[i].ndim;
            memcpy(sh[i].dims, b->in[i].shape, sizeof(sh[i].dims));
        }
        rc = mxop_state_create(b->c, b->op, v->attrs, b->n_in, dt, sh, &call.state);
        if (rc != 0) {
            keep_error(b->c, rc);
            state_refused = 1;
            return rc;
        }
    }
    rc = mxop_forward(b->c, b->op, &call, b->in, b->n_in, b->out, b->n_out);
    keep_error(b->c, rc);
    /* At the inferred size: a dynamic output's real shape may be smaller. */
    for (int i = 0; i < b->n_out; i++)
        guard_check(b, &b->out_g[i], "output", i, "forward", rc);
    if (call.state && mxop_state_destroy(b->c, call.state) == MXOP_ETIMEOUT)
        v->halted = 1;
    if (rc == MXOP_ETIMEOUT)
        v->halted = 1;
    return rc;
}

/* Copies of every output's bytes (real shapes) after a call. */
typedef struct snap {
    unsigned char *bytes[MXOP_MAX_TENSORS];
    size_t n[MXOP_MAX_TENSORS];
    mxop_shape_t shape[MXOP_MAX_TENSORS];
} snap_t;

static void snap_take(snap_t *s, const bufs_t *b)
{
    for (int i = 0; i < b->n_out; i++) {
        s->n[i] = numel(&b->out[i]) * mxop_dtype_size(b->out[i].dtype);
        s->bytes[i] = malloc(s->n[i] ? s->n[i] : 1);
        if (s->bytes[i] && s->n[i])
            memcpy(s->bytes[i], b->out[i].data, s->n[i]);
        s->shape[i].ndim = b->out[i].ndim;
        memcpy(s->shape[i].dims, b->out[i].shape, sizeof(s->shape[i].dims));
    }
}

static void snap_free(snap_t *s, int n)
{
    for (int i = 0; i < n; i++)
        free(s->bytes[i]);
    memset(s, 0, sizeof(*s));
}

static int all_bytes(const unsigned char *p, size_t n, int value)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != value)
            return 0;
    return 1;
}

static int same_shape(const mxop_shape_t *a, const mxop_shape_t *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

/*
 * "written" and "infer": an element is unwritten when it still holds the
 * poison after both calls (each with its own poison).  Unwritten elements
 * that are exactly the tail of the inferred shape mean forward wrote a
 * smaller tensor than inference promised ("infer"); any other unwritten
 * element is "written"'s failure.
 */
static int check_written(mxop__verify_t *v, const mxop__verify_case_t *k, const bufs_t *b,
                         const snap_t *a, const snap_t *bb)
{
    int bad_written = 0, bad_infer = 0;
    for (int o = 0; o < b->n_out; o++) {
        char s1[96], s2[96];
        size_t es = mxop_dtype_size(b->out[o].dtype);
        size_t n_inferred = mxop__run_numel(k->out_sh[o].ndim, k->out_sh[o].dims);
        size_t n = a->n[o] / es;
        if (!same_shape(&a->shape[o], &bb->shape[o]) || n > n_inferred) {
            RESULT(v, "infer", FAIL,
                   "output %d: forward gave shapes %s and %s for inference's %s (case %s)", o,
                   mxop_shape_format(s1, sizeof(s1), a->shape[o].ndim, a->shape[o].dims),
                   mxop_shape_format(s2, sizeof(s2), bb->shape[o].ndim, bb->shape[o].dims),
                   mxop_shape_format(s2, sizeof(s2), k->out_sh[o].ndim, k->out_sh[o].dims),
                   k->label);
            bad_infer = 1;
            continue;
        }
        size_t first = n, count = 0, last = 0;
        for (size_t e = 0; e < n; e++)
            if (all_bytes(a->bytes[o] + e * es, es, POISON_A) &&
                all_bytes(bb->bytes[o] + e * es, es, POISON_B)) {
                if (first == n)
                    first = e;
                last = e;
                count++;
            }
        if (count == 0)
            continue;
        mxop_shape_format(s1, sizeof(s1), k->out_sh[o].ndim, k->out_sh[o].dims);
        if (last == n - 1 && count == n - first) {
            RESULT(v, "infer", FAIL,
                   "output %d: inference promised %s (%zu elements) but forward wrote only the "
                   "first %zu (case %s)",
                   o, s1, n, first, k->label);
            bad_infer = 1;
        } else {
            RESULT(v, "written", FAIL,
                   "output %d of shape %s: %zu element%s left unwritten, the first at flat "
                   "index %zu (still poisoned after two calls with different poisons; case %s)",
                   o, s1, count, count == 1 ? "" : "s", first, k->label);
            bad_written = 1;
        }
    }
    if (!bad_written)
        RESULT(v, "written", PASS, "every output element written (poisoned with 0xA5 and NaN)");
    if (!bad_infer)
        RESULT(v, "infer", PASS, "forward wrote the shapes inference gave%s",
               v->info.dynamic_outputs ? " (dynamic outputs: within the inferred largest)" : "");
    return !bad_written && !bad_infer;
}

static int ranges_overlap(const mxop_array_t *x, const mxop_array_t *y)
{
    if (x->region != y->region || x->nbytes == 0 || y->nbytes == 0)
        return 0;
    return x->offset < y->offset + y->nbytes && y->offset < x->offset + x->nbytes;
}

static void check_inputs_alias(mxop__verify_t *v, const mxop__verify_case_t *k, const bufs_t *b,
                               unsigned char **copies)
{
    int bad = 0;
    for (int i = 0; i < b->n_in && !bad; i++) {
        if (v->info.mutated_inputs & (1ull << i))
            continue;
        size_t es = mxop_dtype_size(b->in[i].dtype);
        const unsigned char *now = b->in[i].data;
        for (size_t e = 0; e < b->in[i].nbytes && !bad; e++)
            if (now[e] != copies[i][e]) {
                RESULT(v, "inputs", FAIL,
                       "input %d (not declared mutated) changed at element %zu: %g became %g "
                       "(case %s)",
                       i, e / es, mxop__run_get(copies[i], b->in[i].dtype, e / es),
                       mxop__run_get(now, b->in[i].dtype, e / es), k->label);
                bad = 1;
            }
    }
    if (!bad)
        RESULT(v, "inputs", PASS, "inputs not declared mutated are untouched");
    bad = 0;
    for (int o = 0; o < b->n_out; o++)
        for (int i = 0; i < b->n_in; i++)
            if (ranges_overlap(&b->out[o], &b->in[i]) && !bad) {
                RESULT(v, "alias", FAIL, "output %d overlaps input %d after forward (case %s)", o,
                       i, k->label);
                bad = 1;
            }
    if (!bad)
        RESULT(v, "alias", PASS, "no output's memory overlaps an input's after forward");
}

/*
 * Byte by byte; a byte still holding each run's poison is unwritten,
 * "written"'s concern, not a difference.
 */
static int compare_snaps(const snap_t *a, const snap_t *b, int n_out, int *which, size_t *at)
{
    for (int o = 0; o < n_out; o++) {
        if (!same_shape(&a->shape[o], &b->shape[o]) || a->n[o] != b->n[o]) {
            *which = o;
            *at = (size_t)-1;
            return 1;
        }
        for (size_t e = 0; e < a->n[o]; e++)
            if (a->bytes[o][e] != b->bytes[o][e] &&
                !(a->bytes[o][e] == POISON_A && b->bytes[o][e] == POISON_B)) {
                *which = o;
                *at = e;
                return 1;
            }
    }
    return 0;
}

static int report_repeat(mxop__verify_t *v, const char *check, const char *where,
                         const mxop__verify_case_t *k, const snap_t *a, const snap_t *b, int n_out)
{
    int o;
    size_t at;
    if (!compare_snaps(a, b, n_out, &o, &at)) {
        RESULT(v, check, PASS, "same inputs and seed gave the same outputs %s", where);
        return 1;
    }
    if (at == (size_t)-1) {
        RESULT(v, check, FAIL, "output %d changed shape %s (case %s)", o, where, k->label);
        return 0;
    }
    int32_t dt = k->out_dt[o];
    size_t es = mxop_dtype_size(dt), e = at / es;
    RESULT(v, check, FAIL,
           "output %d element %zu differs %s: %.17g then %.17g (same inputs, seed %llu; "
           "case %s)",
           o, e, where, mxop__run_get(a->bytes[o], dt, e), mxop__run_get(b->bytes[o], dt, e),
           (unsigned long long)v->seed, k->label);
    return 0;
}

/* The "fresh-worker" run: the same case in a new session, compared with the warm one. */
static void run_fresh(mxop__verify_t *v, mxop_client_t *fresh, const mxop__verify_case_t *k,
                      const bufs_t *warm, const snap_t *a)
{
    bufs_t b = {.c = fresh};
    if (mxop_op_find(fresh, v->name, &b.op) != 0 || bufs_alloc(&b, k, 1) != 0) {
        RESULT(v, "fresh-worker", SKIP, "cannot set up the case in a new session");
        return;
    }
    for (int i = 0; i < b.n_in; i++)
        if (b.in[i].nbytes)
            memcpy(b.in[i].data, warm->in[i].data, b.in[i].nbytes);
    int rc = forward(v, &b, POISON_A);
    if (rc != 0) {
        RESULT(v, "fresh-worker", FAIL, "forward in a new session failed: %s: %s (case %s)",
               mxop_err_name(rc), detail(fresh), k->label);
    } else {
        snap_t s = {0};
        snap_take(&s, &b);
        (void)report_repeat(v, "fresh-worker", "in a new session's worker as in the warm one", k, a,
                            &s, b.n_out);
        snap_free(&s, b.n_out);
    }
    bufs_free(&b);
}

static void grad_checks(mxop__verify_t *v, const mxop__verify_case_t *k, bufs_t *b, int repeatable);

void mxop__verify_run_cases(mxop__verify_t *v)
{
    char err[1024];
    mxop_client_t *fresh = NULL;
    if (v->n_cases > 0 &&
        mxop__run_session_open(v->daemon, "mxop verify (fresh)", &fresh, err, sizeof(err)) != 0)
        RESULT(v, "fresh-worker", SKIP, "no new session: %s", err);
    else if (fresh)
        mxop_set_timeout(fresh, v->timeout_ms);
    /*
     * In scratch mode (a daemon at --socket that does not trust the library)
     * the op writes into the daemon's scratch copy of each output, and only
     * the output's own bytes come back here: a write past it cannot be seen.
     */
    mxop_stats_v2_t st = {.struct_size = sizeof(st)};
    int scratch = v->n_cases > 0 && mxop_stats_v2(v->c, &st) == 0 && st.confined;
    if (scratch)
        RESULT(v, "bounds", SKIP,
               "the daemon runs this library in scratch mode (strict sandbox, not trusted): "
               "writes past an output land in its scratch region, out of sight; run without "
               "--socket (the private daemon trusts the library) to check");
    for (int ci = 0; ci < v->n_cases; ci++) {
        const mxop__verify_case_t *k = &v->cases[ci];
        if (v->halted) {
            /* Every further case would wait out its deadline too. */
            RESULT(v, "forward", SKIP, "%d case%s not run: a call timed out", v->n_cases - ci,
                   v->n_cases - ci == 1 ? "" : "s");
            break;
        }
        bufs_t b = {.c = v->c, .op = v->op};
        call_err[0] = '\0';
        int rc = bufs_alloc(&b, k, v->seed * 1000003u + (uint64_t)ci);
        if (rc != 0) {
            RESULT(v, "forward", FAIL, "cannot allocate the case's arrays: %s: %s (case %s)",
                   mxop_err_name(rc), detail(v->c), k->label);
            continue;
        }
        unsigned char *copies[MXOP__VERIFY_MAX_IN] = {0};
        for (int i = 0; i < b.n_in; i++) {
            copies[i] = malloc(b.in[i].nbytes ? b.in[i].nbytes : 1);
            if (copies[i] && b.in[i].nbytes)
                memcpy(copies[i], b.in[i].data, b.in[i].nbytes);
        }
        snap_t sa = {0}, sb = {0};
        int ran = 0; /* a call of this case returned: "bounds" has a result */
        rc = forward(v, &b, POISON_A);
        if (rc == MXOP_EINPUT_WRITTEN) {
            /* The sandbox maps inputs read-only and caught the write. */
            RESULT(v, "inputs", FAIL,
                   "forward wrote into an input: MXOP_EINPUT_WRITTEN from the sandbox: %s "
                   "(case %s)",
                   detail(v->c), k->label);
            goto next;
        }
        if (rc == MXOP_EDTYPE ||
            (state_refused && (rc == MXOP_ESHAPE || rc == MXOP_EATTR || rc == MXOP_EINVAL))) {
            /*
             * A type refusal at the call, or a stateful op's instance
             * refusing the shapes, means "not accepted", as inference's
             * refusal does: the case is skipped, with what said no.
             */
            RESULT(v, "forward", SKIP, "%s refused case %s although inference accepted it: %s: %s",
                   state_refused ? "state_create" : "forward", k->label, mxop_err_name(rc),
                   detail(v->c));
            goto next;
        }
        if (rc != 0) {
            RESULT(v, "forward", FAIL,
                   "forward failed on a case inference accepts: %s: %s (case %s)",
                   mxop_err_name(rc), detail(v->c), k->label);
            /* Every further case would wait out its deadline too. */
            if (rc == MXOP_ETIMEOUT)
                ci = v->n_cases;
            goto next;
        }
        RESULT(v, "forward", PASS, "forward ran on the cases inference accepts");
        ran = 1;
        snap_take(&sa, &b);
        check_inputs_alias(v, k, &b, copies);
        for (int i = 0; i < b.n_in; i++) /* a mutated input starts the next call afresh */
            if (b.in[i].nbytes)
                memcpy(b.in[i].data, copies[i], b.in[i].nbytes);
        rc = forward(v, &b, POISON_B);
        if (rc != 0) {
            RESULT(v, "determinism", FAIL, "the second forward failed: %s: %s (case %s)",
                   mxop_err_name(rc), detail(v->c), k->label);
            goto next;
        }
        snap_take(&sb, &b);
        int written = check_written(v, k, &b, &sa, &sb);
        int repeatable = report_repeat(v, "determinism", "in two calls in the same (warm) worker",
                                       k, &sa, &sb, b.n_out);
        if (fresh)
            run_fresh(v, fresh, k, &b, &sa);
        for (int i = 0; i < b.n_in; i++)
            if (b.in[i].nbytes)
                memcpy(b.in[i].data, copies[i], b.in[i].nbytes);
        grad_checks(v, k, &b, repeatable && written);
    next:
        if (!scratch && (ran || b.over.what != NULL))
            report_bounds(v, k, &b);
        snap_free(&sa, b.n_out);
        snap_free(&sb, b.n_out);
        for (int i = 0; i < b.n_in; i++)
            free(copies[i]);
        bufs_free(&b);
    }
    mxop_close(fresh);
}

/*
 * The gradient checks of one case.  Backward gets [dy, x, y] and writes
 * dx; a float input's gradient is checked, other inputs' gradients get
 * req null.
 */
static int backward(mxop__verify_t *v, bufs_t *b, mxop_array_t *dy, mxop_array_t *dx,
                    const int32_t *req)
{
    mxop_array_t in[MXOP_MAX_TENSORS];
    int n = 0;
    for (int o = 0; o < b->n_out; o++)
        in[n++] = dy[o];
    for (int i = 0; i < b->n_in; i++)
        in[n++] = b->in[i];
    for (int o = 0; o < b->n_out; o++)
        in[n++] = b->out[o];
    for (int i = 0; i < b->n_in; i++) {
        dx[i].req = req[i];
        guard_arm(&b->dx_g[i]);
    }
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = v->attrs, .seed = v->seed};
    int rc = 0;
    call_err[0] = '\0';
    if (v->info.stateful) {
        /* The instance of a forward just made, as an engine would pass it. */
        int32_t dt[MXOP__VERIFY_MAX_IN];
        mxop_shape_t sh[MXOP__VERIFY_MAX_IN];
        for (int i = 0; i < b->n_in; i++) {
            dt[i] = b->in[i].dtype;
            sh[i].ndim = b->in[i].ndim;
            memcpy(sh[i].dims, b->in[i].shape, sizeof(sh[i].dims));
        }
        rc = mxop_state_create(b->c, b->op, v->attrs, b->n_in, dt, sh, &call.state);
        for (int o = 0; o < b->n_out; o++)
            b->out[o] = b->out_tmpl[o];
        if (rc == 0)
            rc = mxop_forward(b->c, b->op, &call, b->in, b->n_in, b->out, b->n_out);
    }
    if (rc == 0)
        rc = mxop_backward(b->c, b->op, &call, in, n, dx, b->n_in);
    keep_error(b->c, rc);
    for (int i = 0; i < b->n_in; i++)
        guard_check(b, &b->dx_g[i], "gradient of input", i, "backward", rc);
    if (call.state && mxop_state_destroy(b->c, call.state) == MXOP_ETIMEOUT)
        v->halted = 1;
    if (rc == MXOP_ETIMEOUT)
        v->halted = 1;
    return rc;
}

/* The loss L = sum over float outputs of dy . y, for finite differences. */
static double loss(const bufs_t *b, const mxop_array_t *dy)
{
    double l = 0;
    for (int o = 0; o < b->n_out; o++) {
        if (!is_float(b->out[o].dtype))
            continue;
        size_t n = numel(&b->out[o]);
        for (size_t e = 0; e < n; e++)
            l += mxop__run_get(dy[o].data, dy[o].dtype, e) *
                 mxop__run_get(b->out[o].data, b->out[o].dtype, e);
    }
    return l;
}

/* Backward against central differences of forward, in f64. */
static void check_fd(mxop__verify_t *v, const mxop__verify_case_t *k, bufs_t *b,
                     const mxop_array_t *dy, unsigned char **g)
{
    size_t total = 0;
    for (int i = 0; i < b->n_in; i++) {
        if (!is_float(k->in_dt[i]))
            continue;
        if (k->in_dt[i] != MXOP_F64) {
            RESULT(v, "grad", SKIP, "finite differences run on f64 cases only");
            return;
        }
        total += numel(&b->in[i]);
    }
    if (total > FD_MAX_ELEMS) {
        RESULT(v, "grad", SKIP, "case %s: more than %d input elements", k->label, FD_MAX_ELEMS);
        return;
    }
    if (v->info.stateful) {
        RESULT(v, "grad", SKIP,
               "stateful op: forward updates its instance, so finite differences of forward "
               "are not what backward differentiates");
        return;
    }
    mxop_array_t dys[MXOP_MAX_TENSORS];
    memcpy(dys, dy, sizeof(dys[0]) * (size_t)b->n_out);
    for (int i = 0; i < b->n_in; i++) {
        if (!is_float(k->in_dt[i]))
            continue;
        double *x = b->in[i].data;
        for (size_t e = 0; e < numel(&b->in[i]); e++) {
            double x0 = x[e], lp, lm;
            x[e] = x0 + FD_EPS;
            /* Poisoned with zeros, so that an unwritten element adds nothing. */
            int rc = forward(v, b, 0);
            lp = loss(b, dys);
            x[e] = x0 - FD_EPS;
            if (rc == 0)
                rc = forward(v, b, 0);
            lm = loss(b, dys);
            x[e] = x0;
            if (rc != 0) {
                RESULT(v, "grad", FAIL, "forward failed during finite differences: %s: %s",
                       mxop_err_name(rc), detail(b->c));
                return;
            }
            double num = (lp - lm) / (2 * FD_EPS), ana = ((const double *)g[i])[e];
            if (!(fabs(num - ana) <= FD_ATOL + FD_RTOL * fabs(num))) {
                RESULT(v, "grad", FAIL,
                       "input %d element %zu: backward gives %.9g, central differences %.9g "
                       "(eps %g, atol %g, rtol %g; case %s)",
                       i, e, ana, num, FD_EPS, FD_ATOL, FD_RTOL, k->label);
                return;
            }
        }
    }
    RESULT(v, "grad", PASS,
           "backward agrees with central differences in f64 (eps 1e-6, atol 1e-5, rtol 1e-3)");
}

static double add_tolerance(int32_t dt)
{
    return dt == MXOP_F64 ? 1e-12 : dt == MXOP_F32 ? 1e-5 : 1e-2;
}

static void check_req(mxop__verify_t *v, const mxop__verify_case_t *k, bufs_t *b, mxop_array_t *dy,
                      mxop_array_t *dx, unsigned char **g, const int32_t *base)
{
    int32_t req[MXOP__VERIFY_MAX_IN];
    uint64_t rng = v->seed + 77;
    unsigned char *pre[MXOP__VERIFY_MAX_IN] = {0};
    for (int i = 0; i < b->n_in; i++) {
        req[i] = base[i] == MXOP_REQ_WRITE ? MXOP_REQ_ADD : base[i];
        if (base[i] != MXOP_REQ_WRITE)
            continue;
        mxop__run_fill_random(dx[i].data, dx[i].dtype, numel(&dx[i]), &rng);
        pre[i] = malloc(dx[i].nbytes ? dx[i].nbytes : 1);
        if (pre[i] && dx[i].nbytes)
            memcpy(pre[i], dx[i].data, dx[i].nbytes);
    }
    int rc = backward(v, b, dy, dx, req), bad = 0;
    if (rc != 0) {
        RESULT(v, "req-add", FAIL, "backward with req add failed: %s: %s (case %s)",
               mxop_err_name(rc), detail(b->c), k->label);
        bad = 1;
    }
    for (int i = 0; i < b->n_in && !bad; i++) {
        if (!pre[i])
            continue;
        for (size_t e = 0; e < numel(&dx[i]) && !bad; e++) {
            double p = mxop__run_get(pre[i], dx[i].dtype, e),
                   w = mxop__run_get(g[i], dx[i].dtype, e),
                   got = mxop__run_get(dx[i].data, dx[i].dtype, e);
            if (!(fabs(got - (p + w)) <= add_tolerance(dx[i].dtype) * (1 + fabs(p) + fabs(w)))) {
                RESULT(v, "req-add", FAIL,
                       "input %d gradient element %zu: req add gave %.9g, not the buffer's %.9g "
                       "plus the written gradient %.9g (case %s)",
                       i, e, got, p, w, k->label);
                bad = 1;
            }
        }
    }
    if (!bad)
        RESULT(v, "req-add", PASS, "req add accumulates onto a pre-filled gradient buffer");
    /* Null: every gradient buffer left exactly as it was. */
    for (int i = 0; i < b->n_in; i++) {
        req[i] = MXOP_REQ_NULL;
        if (pre[i] && dx[i].nbytes)
            memcpy(dx[i].data, pre[i], dx[i].nbytes);
    }
    rc = backward(v, b, dy, dx, req);
    bad = 0;
    if (rc != 0) {
        RESULT(v, "req-null", FAIL, "backward with req null failed: %s: %s (case %s)",
               mxop_err_name(rc), detail(b->c), k->label);
        bad = 1;
    }
    for (int i = 0; i < b->n_in && !bad; i++)
        if (pre[i] && dx[i].nbytes && memcmp(pre[i], dx[i].data, dx[i].nbytes) != 0) {
            RESULT(v, "req-null", FAIL,
                   "input %d's gradient buffer changed under req null (case %s)", i, k->label);
            bad = 1;
        }
    if (!bad)
        RESULT(v, "req-null", PASS, "req null leaves the gradient buffers alone");
    for (int i = 0; i < b->n_in; i++)
        free(pre[i]);
}

static void grad_checks(mxop__verify_t *v, const mxop__verify_case_t *k, bufs_t *b, int repeatable)
{
    static const char *const checks[] = {"grad", "req-add", "req-null"};
    int any_float = 0;
    for (int i = 0; i < b->n_in; i++)
        any_float |= is_float(k->in_dt[i]);
    const char *why = !v->info.has_backward ? "the op has no backward"
                      : !any_float          ? "no float input to differentiate"
                                            : NULL;
    if (!why && v->halted)
        why = "a call of this op timed out";
    if (why) {
        for (int j = 0; j < 3; j++)
            RESULT(v, checks[j], SKIP, "%s", why);
        return;
    }
    mxop_array_t dy[MXOP_MAX_TENSORS], dx[MXOP__VERIFY_MAX_IN];
    unsigned char *g[MXOP__VERIFY_MAX_IN] = {0};
    int32_t base[MXOP__VERIFY_MAX_IN];
    int n_dy = 0, n_dx = 0;
    uint64_t rng = v->seed + 31;
    int rc = forward(v, b, 0);
    if (rc != 0) {
        RESULT(v, "grad", FAIL, "forward before backward failed: %s: %s (case %s)",
               mxop_err_name(rc), detail(b->c), k->label);
        return;
    }
    for (; n_dy < b->n_out && rc == 0; n_dy++) {
        rc = mxop_array_alloc(b->c, b->out[n_dy].dtype, b->out[n_dy].ndim, b->out[n_dy].shape,
                              &dy[n_dy]);
        if (rc == 0 && is_float(dy[n_dy].dtype))
            mxop__run_fill_random(dy[n_dy].data, dy[n_dy].dtype, numel(&dy[n_dy]), &rng);
    }
    for (; n_dx < b->n_in && rc == 0; n_dx++) {
        rc = guarded_alloc(b->c, b->in[n_dx].dtype, b->in[n_dx].ndim, b->in[n_dx].shape,
                           &b->dx_g[n_dx], &dx[n_dx]);
        base[n_dx] = is_float(b->in[n_dx].dtype) ? MXOP_REQ_WRITE : MXOP_REQ_NULL;
    }
    if (rc != 0) {
        RESULT(v, "grad", FAIL, "cannot allocate gradients: %s", mxop_err_name(rc));
        goto out;
    }
    rc = backward(v, b, dy, dx, base);
    if (rc != 0) {
        RESULT(v, "grad", FAIL, "backward failed: %s: %s (case %s)", mxop_err_name(rc),
               detail(b->c), k->label);
        goto out;
    }
    for (int i = 0; i < n_dx; i++) {
        g[i] = malloc(dx[i].nbytes ? dx[i].nbytes : 1);
        if (g[i] && dx[i].nbytes)
            memcpy(g[i], dx[i].data, dx[i].nbytes);
    }
    check_req(v, k, b, dy, dx, g, base);
    if (repeatable)
        check_fd(v, k, b, dy, g);
    else
        RESULT(v, "grad", SKIP,
               "case %s: forward's outputs are not repeatable or not all written (see "
               "determinism, written, infer), so finite differences of them mean nothing",
               k->label);
out:
    for (int i = 0; i < n_dy; i++)
        mxop_array_free(b->c, &dy[i]);
    for (int i = 0; i < n_dx; i++) {
        guarded_free(b->c, &b->dx_g[i]);
        free(g[i]);
    }
}

/*
 * Create/use/destroy cycles of a stateful op on its first case; a
 * destroyed instance must then be refused, not used.
 */
void mxop__verify_check_state(mxop__verify_t *v)
{
    if (!v->info.stateful) {
        RESULT(v, "state", SKIP, "not a stateful op");
        return;
    }
    if (v->n_cases == 0) {
        RESULT(v, "state", SKIP, "no case inference accepts");
        return;
    }
    const mxop__verify_case_t *k = &v->cases[0];
    bufs_t b = {.c = v->c, .op = v->op};
    call_err[0] = '\0';
    if (bufs_alloc(&b, k, v->seed) != 0) {
        RESULT(v, "state", FAIL, "cannot allocate the case's arrays");
        return;
    }
    uint64_t last = 0;
    int rc = 0, cycles = 5;
    for (int cyc = 0; cyc < cycles && rc == 0; cyc++) {
        uint64_t st = 0;
        rc = mxop_state_create(v->c, v->op, v->attrs, k->n_in, k->in_dt, k->in_sh, &st);
        for (int use = 0; use < 3 && rc == 0; use++) {
            mxop_call_t call = {
                .struct_size = sizeof(call), .attrs = v->attrs, .state = st, .seed = v->seed};
            for (int o = 0; o < b.n_out; o++)
                b.out[o] = b.out_tmpl[o];
            rc = mxop_forward(v->c, v->op, &call, b.in, b.n_in, b.out, b.n_out);
        }
        if (rc != 0)
            RESULT(v, "state", FAIL, "cycle %d: %s: %s (case %s)", cyc + 1, mxop_err_name(rc),
                   detail(v->c), k->label);
        if (st) {
            int drc = mxop_state_destroy(v->c, st);
            if (drc != 0 && rc == 0) {
                RESULT(v, "state", FAIL, "destroying instance %d: %s: %s", cyc + 1,
                       mxop_err_name(drc), detail(v->c));
                rc = drc;
            }
        }
        last = st;
    }
    if (rc == 0) {
        mxop_call_t call = {.struct_size = sizeof(call), .attrs = v->attrs, .state = last};
        for (int o = 0; o < b.n_out; o++)
            b.out[o] = b.out_tmpl[o];
        rc = mxop_forward(v->c, v->op, &call, b.in, b.n_in, b.out, b.n_out);
        if (rc == 0)
            RESULT(v, "state", FAIL, "a destroyed instance was accepted by forward");
        else
            RESULT(v, "state", PASS,
                   "%d create/use/destroy cycles (3 forwards each); a destroyed instance is "
                   "refused with %s",
                   cycles, mxop_err_name(rc));
    }
    bufs_free(&b);
}
