/*
 * `mxop run LIB OP [--attr K=V]... [--input SHAPE:DTYPE[=FILE.npy]]... [--seed N]
 *           [--out DIR] [--socket PATH] [--json]`
 *
 * Runs one op forward on seeded random inputs or .npy files and prints each
 * input's and output's shape, dtype and checksums: FNV-1a 64 of its bytes
 * and the sum of its elements as f64.  --out DIR saves them as
 * DIR/inputN.npy and DIR/outputN.npy.  Syntax of SHAPE: see run_tensor.h.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/mxop/commands.h"
#include "tools/mxop/run_session.h"
#include "tools/mxop/run_tensor.h"

typedef struct input_spec {
    int32_t dtype;
    mxop_shape_t shape;
    void *file_data; /* from a .npy file; NULL: random */
    size_t file_bytes;
} input_spec_t;

typedef struct run_args {
    const char *lib, *op, *socket, *out_dir;
    uint64_t seed;
    int json;
    int n_attrs, n_in;
    const char *attrs[2 * 64 + 1];
    input_spec_t in[MXOP_MAX_TENSORS];
} run_args_t;

static void usage(FILE *to)
{
    fprintf(to, "usage: mxop run LIB OP [--attr K=V]... [--input SHAPE:DTYPE[=FILE.npy]]...\n"
                "                [--seed N] [--out DIR] [--socket PATH] [--json]\n\n"
                "Runs op OP of library LIB forward once and prints, for every input and output,\n"
                "its shape, dtype and checksums: fnv1a64 (FNV-1a 64 of its bytes, hex) and sum\n"
                "(its elements added as f64, in index order).\n\n"
                "  --input SHAPE:DTYPE[=FILE]  one per input, in order. SHAPE is dimensions\n"
                "                 joined by 'x' (2x3; 0x3 is empty), '' or 'scalar' for 0-d\n"
                "                 (':f32' or 'scalar:f32'). DTYPE: f32 f64 f16 bf16 i32 i64 u8 i8\n"
                "                 bool. Without FILE the contents are random from --seed (floats\n"
                "                 in [-1,1), integers in [-8,8), u8 in [0,16), bool 0/1); a FILE\n"
                "                 (.npy, C order, little-endian) must have that shape and dtype.\n"
                "  --attr K=V     an attribute of the call (repeatable)\n"
                "  --seed N       the random inputs' seed and the call's seed (default 1)\n"
                "  --out DIR      save inputs and outputs as DIR/inputN.npy, DIR/outputN.npy\n"
                "                 (bf16 as '<u2', its raw bits)\n"
                "  --socket PATH  a running daemon (else $MXOP_SOCKET); LIB is then a name in its\n"
                "                 plugin directory. Without either, a private daemon is started\n"
                "                 with a copy of LIB (a path, or a name in build/plugins).\n"
                "  --json         one JSON object instead of lines\n\n"
                "exit status: 0 done, 1 the op or daemon refused the call, 2 bad arguments,\n"
                "3 no daemon reachable.\n");
}

static int parse_input(const char *text, input_spec_t *s)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", text);
    char *file = strchr(buf, '=');
    if (file)
        *file++ = '\0';
    char *colon = strrchr(buf, ':');
    if (!colon) {
        fprintf(stderr, "mxop run: --input '%s' has no ':DTYPE' (e.g. 2x3:f32)\n", text);
        return -1;
    }
    *colon = '\0';
    s->dtype = mxop__run_dtype_parse(colon + 1);
    if (s->dtype < 0) {
        fprintf(stderr, "mxop run: --input '%s': unknown dtype '%s'\n", text, colon + 1);
        return -1;
    }
    if (mxop__run_shape_parse(buf, &s->shape) != 0) {
        fprintf(stderr,
                "mxop run: --input '%s': shape '%s' is not dimensions joined by 'x' "
                "(at most %d), '' or 'scalar'\n",
                text, buf, MXOP_MAX_DIMS);
        return -1;
    }
    if (!file)
        return 0;
    char err[600];
    int32_t dt;
    mxop_shape_t sh;
    if (mxop__npy_read(file, s->dtype, &dt, &sh, &s->file_data, &s->file_bytes, err, sizeof(err)) !=
        0) {
        fprintf(stderr, "mxop run: --input '%s': %s\n", text, err);
        return -1;
    }
    int same = dt == s->dtype && sh.ndim == s->shape.ndim;
    for (int d = 0; same && d < sh.ndim; d++)
        same = sh.dims[d] == s->shape.dims[d];
    if (!same) {
        char a[96], b[96];
        fprintf(stderr, "mxop run: --input '%s': the file holds %s %s, not %s %s\n", text,
                mxop_shape_format(a, sizeof(a), sh.ndim, sh.dims), mxop_dtype_name(dt),
                mxop_shape_format(b, sizeof(b), s->shape.ndim, s->shape.dims),
                mxop_dtype_name(s->dtype));
        free(s->file_data);
        s->file_data = NULL;
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, run_args_t *a)
{
    static const struct option opts[] = {
        {"attr", required_argument, NULL, 'a'},   {"input", required_argument, NULL, 'i'},
        {"seed", required_argument, NULL, 's'},   {"out", required_argument, NULL, 'o'},
        {"socket", required_argument, NULL, 'S'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    a->seed = 1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'a': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || a->n_attrs == 64) {
                fprintf(stderr, "mxop run: --attr '%s' is not K=V (at most 64)\n", optarg);
                return -1;
            }
            *eq = '\0';
            a->attrs[2 * a->n_attrs] = optarg;
            a->attrs[2 * a->n_attrs + 1] = eq + 1;
            a->n_attrs++;
            break;
        }
        case 'i':
            if (a->n_in == MXOP_MAX_TENSORS) {
                fprintf(stderr, "mxop run: at most %d inputs\n", MXOP_MAX_TENSORS);
                return -1;
            }
            if (parse_input(optarg, &a->in[a->n_in]) != 0)
                return -1;
            a->n_in++;
            break;
        case 's': {
            char *end;
            errno = 0;
            a->seed = strtoull(optarg, &end, 0);
            if (errno || *end || !*optarg || a->seed == 0) {
                fprintf(stderr, "mxop run: --seed '%s' is not a positive integer\n", optarg);
                return -1;
            }
            break;
        }
        case 'o': a->out_dir = optarg; break;
        case 'S': a->socket = optarg; break;
        case 'j': a->json = 1; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "mxop run: give LIB and OP\n");
        usage(stderr);
        return -1;
    }
    a->lib = argv[optind];
    a->op = argv[optind + 1];
    return 0;
}

static void print_tensor(int json, const char *kind, int i, const mxop_array_t *t, int first)
{
    char shp[160];
    mxop_shape_format(shp, sizeof(shp), t->ndim, t->shape);
    size_t n = mxop__run_numel(t->ndim, t->shape);
    uint64_t h = mxop__run_fnv1a64(t->data, n * mxop_dtype_size(t->dtype));
    double sum = mxop__run_sum(t->data, t->dtype, n);
    if (!json) {
        printf("%s %d shape=%s dtype=%s fnv1a64=%016" PRIx64 " sum=%.17g\n", kind, i, shp,
               mxop_dtype_name(t->dtype), h, sum);
        return;
    }
    printf("%s{\"index\": %d, \"shape\": %s, \"dtype\": \"%s\", \"fnv1a64\": \"%016" PRIx64
           "\", \"sum\": ",
           first ? "" : ", ", i, shp, mxop_dtype_name(t->dtype), h);
    if (isfinite(sum))
        printf("%.17g}", sum);
    else
        printf("null}");
}

static int save(const char *dir, const char *kind, int i, const mxop_array_t *t)
{
    char path[4096], err[600];
    snprintf(path, sizeof(path), "%s/%s%d.npy", dir, kind, i);
    if (mxop__npy_write(path, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err, sizeof(err))) {
        fprintf(stderr, "mxop run: %s\n", err);
        return -1;
    }
    return 0;
}

/* Runs the op; arrays and state are freed by the caller through the client. */
static int run_op(mxop_client_t *c, run_args_t *a, mxop_array_t *in, mxop_array_t *out)
{
    const mxop_op_t *op;
    int rc = mxop_op_find(c, a->op, &op);
    if (rc != 0) {
        fprintf(stderr, "mxop run: %s: no op '%s' in %s\n", mxop_err_name(rc), a->op, a->lib);
        return rc;
    }
    mxop_op_info_v2_t info = {.struct_size = sizeof(info)};
    mxop_op_info_v2(op, &info);
    const char *const *attrs = a->n_attrs ? a->attrs : NULL;
    int32_t in_dt[MXOP_MAX_TENSORS], out_dt[MXOP_MAX_TENSORS];
    mxop_shape_t in_sh[MXOP_MAX_TENSORS], out_sh[MXOP_MAX_TENSORS];
    for (int i = 0; i < a->n_in; i++) {
        in_dt[i] = a->in[i].dtype;
        in_sh[i] = a->in[i].shape;
    }
    int n_out = info.num_outputs;
    rc = mxop_infer(c, op, attrs, a->n_in, in_dt, in_sh, n_out, out_dt, out_sh);
    if (rc != 0) {
        fprintf(stderr, "mxop run: inference refused the inputs: %s: %s\n", mxop_err_name(rc),
                mxop_last_error(c));
        return rc;
    }
    uint64_t rng = a->seed;
    for (int i = 0; i < a->n_in; i++) {
        rc = mxop_array_alloc(c, in_dt[i], in_sh[i].ndim, in_sh[i].dims, &in[i]);
        if (rc != 0)
            goto alloc_failed;
        if (a->in[i].file_data)
            memcpy(in[i].data, a->in[i].file_data, a->in[i].file_bytes);
        else
            mxop__run_fill_random(in[i].data, in_dt[i], in[i].nbytes / mxop_dtype_size(in_dt[i]),
                                  &rng);
    }
    for (int i = 0; i < n_out; i++) {
        rc = mxop_array_alloc(c, out_dt[i], out_sh[i].ndim, out_sh[i].dims, &out[i]);
        if (rc != 0)
            goto alloc_failed;
    }
    mxop_call_t call = {.struct_size = sizeof(call), .attrs = attrs, .seed = a->seed};
    if (info.stateful) {
        rc = mxop_state_create(c, op, attrs, a->n_in, in_dt, in_sh, &call.state);
        if (rc != 0) {
            fprintf(stderr, "mxop run: creating the op's state failed: %s: %s\n", mxop_err_name(rc),
                    mxop_last_error(c));
            return rc;
        }
    }
    rc = mxop_forward(c, op, &call, in, a->n_in, out, n_out);
    if (rc != 0)
        fprintf(stderr, "mxop run: forward failed: %s: %s\n", mxop_err_name(rc),
                mxop_last_error(c));
    if (call.state)
        mxop_state_destroy(c, call.state);
    return rc;
alloc_failed:
    fprintf(stderr, "mxop run: cannot allocate an array: %s: %s\n", mxop_err_name(rc),
            mxop_last_error(c));
    return rc;
}

static int report(run_args_t *a, const mxop_array_t *in, const mxop_array_t *out, int n_out)
{
    if (a->json) {
        printf("{\"library\": \"%s\", \"op\": \"%s\", \"seed\": %" PRIu64
               ", \"checksum\": \"fnv1a64 of the bytes; sum of the elements as f64\", "
               "\"inputs\": [",
               a->lib, a->op, a->seed);
        for (int i = 0; i < a->n_in; i++)
            print_tensor(1, "input", i, &in[i], i == 0);
        printf("], \"outputs\": [");
        for (int i = 0; i < n_out; i++)
            print_tensor(1, "output", i, &out[i], i == 0);
        printf("]}\n");
    } else {
        for (int i = 0; i < a->n_in; i++)
            print_tensor(0, "input", i, &in[i], 0);
        for (int i = 0; i < n_out; i++)
            print_tensor(0, "output", i, &out[i], 0);
    }
    if (!a->out_dir)
        return 0;
    if (mkdir(a->out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "mxop run: --out %s: %s\n", a->out_dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < a->n_in; i++)
        if (save(a->out_dir, "input", i, &in[i]) != 0)
            return -1;
    for (int i = 0; i < n_out; i++)
        if (save(a->out_dir, "output", i, &out[i]) != 0)
            return -1;
    return 0;
}

int mxop__cmd_run(int argc, char **argv)
{
    static run_args_t a;
    memset(&a, 0, sizeof(a));
    int prc = parse_args(argc, argv, &a);
    if (prc != 0) {
        for (int i = 0; i < a.n_in; i++)
            free(a.in[i].file_data);
        return prc > 0 ? MXOP_CLI_EXIT_OK : MXOP_CLI_EXIT_USAGE;
    }
    int status = MXOP_CLI_EXIT_FAILED;
    mxop__run_daemon_t d;
    mxop_client_t *c = NULL;
    char err[1024];
    if (mxop__run_daemon_open(&d, a.lib, a.socket, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "mxop run: %s\n", err);
        status = MXOP_CLI_EXIT_NO_DAEMON;
        goto out;
    }
    int rc = mxop__run_session_open(&d, "mxop run", &c, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "mxop run: %s\n", err);
        status = rc == MXOP_EDISCONNECTED || rc == MXOP_EINVAL ? MXOP_CLI_EXIT_NO_DAEMON
                                                               : MXOP_CLI_EXIT_FAILED;
        goto out;
    }
    static mxop_array_t in[MXOP_MAX_TENSORS], out[MXOP_MAX_TENSORS];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    const mxop_op_t *op;
    if (run_op(c, &a, in, out) == 0 && mxop_op_find(c, a.op, &op) == 0) {
        mxop_op_info_v2_t info = {.struct_size = sizeof(info)};
        mxop_op_info_v2(op, &info);
        if (report(&a, in, out, info.num_outputs) == 0)
            status = MXOP_CLI_EXIT_OK;
    }
    for (int i = 0; i < MXOP_MAX_TENSORS; i++) {
        mxop_array_free(c, &in[i]);
        mxop_array_free(c, &out[i]);
    }
out:
    mxop_close(c);
    mxop__run_daemon_close(&d);
    for (int i = 0; i < a.n_in; i++)
        free(a.in[i].file_data);
    return status;
}
