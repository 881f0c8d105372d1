/*
 * server/worker/mxnet/lib.c - recognising an MXNet extension library,
 * checking it, and registering its ops as mxop ops.
 *
 * MXNet's own loader (MXLoadLib) aborts the process on anything it dislikes;
 * here every refusal is a named error with a message, and the library is
 * unloaded by the plugin loader.  The loader contract followed is MXNet's:
 * _opVersion must be exactly 11, initialize() may refuse the host, ops are
 * enumerated with _opRegSize / _opRegGet (once per op: it appends on every
 * call), and partitioners and graph passes are refused by name.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "server/worker/mxnet/mxnet.h"
#include "server/worker/worker.h"

/* The library mxop__mx_open accepted, registered by the next plugin init. */
static int pending = -1;

int mxop__mx_detect(void *h)
{
    return dlsym(h, "_opVersion") != NULL && dlsym(h, "mxop_plugin_info") == NULL;
}

/* ------------------------------------------------------------------------ */
/* Opening a library */

/* Looks up every entry point; the first missing one is named in msg. */
static int bind_abi(void *h, mxop__mx_abi_t *a, const char *lname, char *msg, size_t msglen)
{
    static const struct {
        const char *sym;
        size_t off;
    } need[] = {
        {"_opVersion", offsetof(mxop__mx_abi_t, op_version)},
        {"initialize", offsetof(mxop__mx_abi_t, initialize)},
        {"_msgSize", offsetof(mxop__mx_abi_t, msg_size)},
        {"_msgGet", offsetof(mxop__mx_abi_t, msg_get)},
        {"_opRegSize", offsetof(mxop__mx_abi_t, reg_size)},
        {"_opRegGet", offsetof(mxop__mx_abi_t, reg_get)},
        {"_opCallFree", offsetof(mxop__mx_abi_t, free_)},
        {"_opCallParseAttrs", offsetof(mxop__mx_abi_t, parse_attrs)},
        {"_opCallInferShape", offsetof(mxop__mx_abi_t, infer_shape)},
        {"_opCallInferType", offsetof(mxop__mx_abi_t, infer_type)},
        {"_opCallInferSType", offsetof(mxop__mx_abi_t, infer_stype)},
        {"_opCallFCompute", offsetof(mxop__mx_abi_t, fcompute)},
        {"_opCallMutateInputs", offsetof(mxop__mx_abi_t, mutate_inputs)},
        {"_opCallCreateOpState", offsetof(mxop__mx_abi_t, create_state)},
        {"_opCallDestroyOpState", offsetof(mxop__mx_abi_t, destroy_state)},
        {"_opCallFStatefulCompute", offsetof(mxop__mx_abi_t, fstateful)},
    };
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        void *p = dlsym(h, need[i].sym);
        if (p == NULL) {
            mxop__fmt(msg, msglen,
                      "library '%s' looks like an MXNet extension library but exports no %s "
                      "(every lib_api version 11 library has it)",
                      lname, need[i].sym);
            return MXOP_ELIB_INVALID;
        }
        /* POSIX: a data pointer from dlsym converts to a function pointer. */
        memcpy((char *)a + need[i].off, &p, sizeof(p));
    }
    return 0;
}

/* How many partitioners or passes the library registers (0 when it lacks the entry point). */
static int count_of(void *h, const char *sym)
{
    void *p = dlsym(h, sym);
    if (p == NULL)
        return 0;
    int (*fn)(void);
    memcpy(&fn, &p, sizeof(fn));
    return fn();
}

/*
 * The MXNet versions announced to initialize(), in order: MXNet 1.9.1 (the
 * release whose lib_api version 11 this layer speaks), then 2.0.0 (master:
 * the same lib_api version, and its example libraries refuse anything
 * older).  MXOP_MXNET_VERSION in the daemon's environment (which its
 * workers inherit) names the one version to announce instead.
 */
static const int host_versions[] = {MXOP__MX_HOST_VERSION, MXOP__MX_HOST_VERSION_MASTER};

/* MXOP_MXNET_VERSION as a version number, 0 when unset; -1 when not a positive integer. */
static int configured_version(void)
{
    const char *env = getenv("MXOP_MXNET_VERSION");
    if (env == NULL || env[0] == '\0')
        return 0;
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (*end != '\0' || v <= 0 || v > 1000000)
        return -1;
    return (int)v;
}

/*
 * initialize() with each version in turn until the library accepts one.
 * What the library said while refusing an earlier one is dropped when a
 * later one is accepted; when none is, every refusal is in msg.
 */
static int negotiate(mxop__mx_lib_t *l, const char *lname, char *msg, size_t msglen)
{
    int conf = configured_version();
    if (conf < 0) {
        mxop__fmt(msg, msglen,
                  "library '%s': MXOP_MXNET_VERSION='%s' is not an MXNet version number (e.g. "
                  "10901 for 1.9.1, 20000 for 2.0)",
                  lname, getenv("MXOP_MXNET_VERSION"));
        return MXOP_EINVAL;
    }
    const int *tries = conf > 0 ? &conf : host_versions;
    int n = conf > 0 ? 1 : (int)(sizeof(host_versions) / sizeof(host_versions[0]));
    char said[MXOP__W_MSG_MAX], all[MXOP__W_MSG_MAX] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        if (l->abi.initialize(tries[i]) == MXOP__MX_OK) {
            l->host_version = tries[i];
            mxop__mx_read_msgs(l, said, sizeof(said));
            return 0;
        }
        mxop__mx_read_msgs(l, said, sizeof(said));
        int w = snprintf(all + used, sizeof(all) - used, "%sinitialize(%d) failed%s%s",
                         i ? "; " : "", tries[i], said[0] ? ": " : "", said);
        if (w > 0)
            used = (size_t)w >= sizeof(all) - used ? sizeof(all) - 1 : used + (size_t)w;
    }
    mxop__fmt(msg, msglen, "library '%s' failed to initialise (%s)%s", lname, all,
              conf > 0 ? " (the version announced is MXOP_MXNET_VERSION's)" : "");
    return MXOP_ELIB_INIT;
}

int mxop__mx_open(void *h, const char *lname, char *msg, size_t msglen)
{
    mxop__mx_lib_t l;
    memset(&l, 0, sizeof(l));
    snprintf(l.name, sizeof(l.name), "%s", lname);

    /*
     * The version first, as MXNet's loader reads it: a library of another
     * lib_api version may lack entry points of version 11 (version 10 has
     * no _opCallDestroyOpState), and its version is what is wrong with it.
     */
    void *pv = dlsym(h, "_opVersion");
    int (*op_version)(void);
    memcpy(&op_version, &pv, sizeof(op_version));
    int v = op_version();
    if (v != MXOP__MX_LIB_VERSION) {
        mxop__fmt(msg, msglen,
                  "library '%s' was built against MXNet lib_api version %d (MX_LIBRARY_VERSION); "
                  "mxop runs version %d only: rebuild it against the lib_api.h of MXNet 1.9 or "
                  "2.0",
                  lname, v, MXOP__MX_LIB_VERSION);
        return MXOP_EABI;
    }
    int rc = bind_abi(h, &l.abi, lname, msg, msglen);
    if (rc != 0)
        return rc;
    rc = negotiate(&l, lname, msg, msglen);
    if (rc != 0)
        return rc;
    int parts = count_of(h, "_partRegSize");
    int passes = count_of(h, "_passRegSize");
    if (parts > 0 || passes > 0) {
        mxop__fmt(msg, msglen,
                  "library '%s' registers %d graph partitioner(s) and %d graph pass(es): mxop "
                  "runs ops only, partitioners and passes are not supported",
                  lname, parts, passes);
        return MXOP_ENOT_SUPPORTED;
    }
    /* No ops is allowed, as MXNet allows it (a library run for its initialize() alone). */
    int n_ops = l.abi.reg_size();
    if (n_ops < 0) {
        mxop__fmt(msg, msglen, "library '%s': _opRegSize() returned %d", lname, n_ops);
        return MXOP_ELIB_INVALID;
    }
    l.msgs_seen = l.abi.msg_size();

    int index = mxop__mx_lib_add(&l);
    if (index < 0) {
        mxop__fmt(msg, msglen, "out of memory loading library '%s'", lname);
        return MXOP_ENOMEM;
    }
    pending = index;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Registering its ops */

/* Picks the function registered for context "cpu" or "gpu". */
static void by_ctx(const char **ctxs, mxop__mx_fn *fps, int n, mxop__mx_fn *cpu, mxop__mx_fn *gpu)
{
    for (int i = 0; i < n; i++) {
        if (ctxs[i] != NULL && strcmp(ctxs[i], "cpu") == 0)
            *cpu = fps[i];
        else if (ctxs[i] != NULL && strcmp(ctxs[i], "gpu") == 0)
            *gpu = fps[i];
    }
}

/* Registers op `i` of library `lib`. */
static int register_one(mxop_ctx_t *ctx, const mxop_host_t *host, uint32_t lib, int i)
{
    mxop__mx_lib_t *l = mxop__mx_lib_get(lib);
    const char *name = NULL;
    int is_sg = 0, nf = 0, nb = 0, nc = 0;
    const char **fctx = NULL, **bctx = NULL, **cctx = NULL;
    mxop__mx_fn *ffp = NULL, *bfp = NULL, *cfp = NULL;
    mxop__mx_op_t mo;
    memset(&mo, 0, sizeof(mo));
    mo.lib = lib;
    l->abi.reg_get(i, &name, &is_sg, &fctx, &ffp, &nf, &bctx, &bfp, &nb, &cctx, &cfp, &nc,
                   &mo.parse, &mo.type, &mo.stype, &mo.shape, &mo.mutate);
    if (name == NULL)
        return host->set_error(ctx, MXOP_ELIB_INVALID, "library '%s': op %d has no name", l->name,
                               i);
    if (is_sg)
        return host->set_error(ctx, MXOP_ENOT_SUPPORTED,
                               "library '%s': op '%s' is a subgraph op; mxop runs ops only, "
                               "subgraph ops are not supported",
                               l->name, name);
    by_ctx(fctx, ffp, nf, &mo.fwd_cpu, &mo.fwd_gpu);
    by_ctx(bctx, bfp, nb, &mo.bwd_cpu, &mo.bwd_gpu);
    by_ctx(cctx, cfp, nc, &mo.create_cpu, &mo.create_gpu);
    if (mo.parse == NULL || (mo.fwd_cpu == NULL && mo.fwd_gpu == NULL && mo.create_cpu == NULL &&
                             mo.create_gpu == NULL))
        return host->set_error(ctx, MXOP_ELIB_INVALID, "library '%s': op '%s' has no %s", l->name,
                               name, mo.parse == NULL ? "ParseAttrs" : "forward for cpu or gpu");

    mxop_op_def_t def;
    memset(&def, 0, sizeof(def));
    def.struct_size = sizeof(def);
    def.name = name;
    def.description = "an op of an MXNet extension library (lib_api version 11)";
    def.flags = MXOP_OP_MXNET;
    /*
     * MXNet learns an op's arity from ParseAttrs with the call's attributes.
     * mxop declares it at load: ParseAttrs with no attributes gives it when
     * it does not depend on them; else the op takes any number of inputs
     * and one output, and every call checks the counts against ParseAttrs.
     */
    int nin = -1, nout = -1;
    if (mxop__mx_probe_parse(&l->abi, mo.parse, &nin, &nout) != MXOP__MX_OK || nin < 0 ||
        nout < 0 || nin > MXOP_MAX_TENSORS || nout > MXOP_MAX_TENSORS) {
        nin = -1;
        nout = 1;
    }
    mxop__mx_skip_msgs(lib);
    def.num_inputs = nin;
    def.min_inputs = 0;
    def.num_outputs = nout;
    if (mo.mutate != NULL) {
        int *idx = NULL, n = 0;
        if (mxop__mx_probe_mutate(&l->abi, mo.mutate, &idx, &n) == MXOP__MX_OK) {
            for (int j = 0; j < n; j++)
                if (idx[j] >= 0 && idx[j] < 64 && (nin < 0 || idx[j] < nin))
                    def.mutated_inputs |= 1ull << idx[j];
        }
        if (idx != NULL)
            l->abi.free_(idx);
        mxop__mx_skip_msgs(lib);
    }
    mxop__mx_fill_def(&mo, &def);

    uint32_t index = mxop__op_count();
    if (mxop__mx_op_reserve(index + 1) != 0)
        return host->set_error(ctx, MXOP_ENOMEM, "out of memory registering op '%s'", name);
    int rc = host->register_op(ctx, &def);
    if (rc == 0)
        mxop__mx_op_set(index, &mo);
    return rc;
}

int mxop__mx_plugin_init(mxop_ctx_t *ctx, const mxop_host_t *host)
{
    if (pending < 0)
        return host->set_error(ctx, MXOP_EINVAL, "no MXNet library is being loaded");
    uint32_t lib = (uint32_t)pending;
    pending = -1;
    int n = mxop__mx_lib_get(lib)->abi.reg_size();
    for (int i = 0; i < n; i++) {
        int rc = register_one(ctx, host, lib, i);
        if (rc != 0)
            return rc;
    }
    return 0;
}
