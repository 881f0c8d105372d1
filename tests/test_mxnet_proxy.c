/*
 * tests/test_mxnet_proxy.c - libmxop_mxnet.so driven as MXNet's loader
 * drives an extension library (MXLoadLib): _opVersion, initialize, the op
 * table, then the _opCall* entry points with the callbacks it handed out.
 * The host side of the ABI is the worker's own declaration of it
 * (server/worker/mxnet/mxnet.h), so these run without MXNet; the tests in
 * MXNet itself are python/tests/mxnet_proxy/.  Each test runs in its own
 * process, loads the proxy (which starts its private daemon) and unloads
 * it, which must stop that daemon and remove its directory.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "server/worker/mxnet/mxnet.h"

static void *lib;
static mxop__mx_abi_t abi;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    cr_assert_not_null(p, "the proxy exports no %s", name);
    return p;
}

#define BIND(field, name)                                                                          \
    do {                                                                                           \
        void *p_ = sym(name);                                                                      \
        memcpy(&abi.field, &p_, sizeof(p_));                                                       \
    } while (0)

/* dlopen's the proxy configured with `libs` (paths under the build tree, ':'-separated). */
static void load(const char *libs)
{
    char path[1024], list[2048] = "";
    snprintf(path, sizeof(path), "%s/lib/libmxop_mxnet.so", mxt_build_dir());
    for (const char *p = libs; *p != '\0';) {
        size_t n = strcspn(p, ":");
        size_t used = strlen(list);
        snprintf(list + used, sizeof(list) - used, "%s%s/%.*s", used ? ":" : "", mxt_build_dir(),
                 (int)n, p);
        p += n + (p[n] == ':');
    }
    setenv("MXOP_MXNET_LIBS", list, 1);
    unsetenv("MXOP_SOCKET");
    unsetenv("MXOP_MXNET_CONFIG");
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(lib, "%s", dlerror());
    BIND(op_version, "_opVersion");
    BIND(initialize, "initialize");
    BIND(msg_size, "_msgSize");
    BIND(msg_get, "_msgGet");
    BIND(reg_size, "_opRegSize");
    BIND(reg_get, "_opRegGet");
    BIND(free_, "_opCallFree");
    BIND(parse_attrs, "_opCallParseAttrs");
    BIND(infer_shape, "_opCallInferShape");
    BIND(infer_type, "_opCallInferType");
    BIND(infer_stype, "_opCallInferSType");
    BIND(fcompute, "_opCallFCompute");
    BIND(mutate_inputs, "_opCallMutateInputs");
    BIND(create_state, "_opCallCreateOpState");
    BIND(destroy_state, "_opCallDestroyOpState");
    BIND(fstateful, "_opCallFStatefulCompute");
}

/* The messages of the last callback, joined. */
static const char *msgs(void)
{
    static char buf[4096];
    buf[0] = '\0';
    for (int i = 0; i < abi.msg_size(); i++) {
        const char *m = NULL;
        abi.msg_get(i, &m);
        strncat(buf, m, sizeof(buf) - strlen(buf) - 1);
    }
    return buf;
}

/* What _opRegGet said about one op. */
typedef struct op {
    const char *name;
    int n_fwd, n_bwd, n_create;
    mxop__mx_fn *fwd, *bwd, *create;
    mxop__mx_fn parse, type, stype, shape, mutate;
} op_t;

static op_t find(const char *name)
{
    op_t o;
    for (int i = 0; i < abi.reg_size(); i++) {
        memset(&o, 0, sizeof(o));
        int is_sg = -1;
        const char **fctx, **bctx, **cctx;
        abi.reg_get(i, &o.name, &is_sg, &fctx, &o.fwd, &o.n_fwd, &bctx, &o.bwd, &o.n_bwd, &cctx,
                    &o.create, &o.n_create, &o.parse, &o.type, &o.stype, &o.shape, &o.mutate);
        if (strcmp(o.name, name) == 0) {
            cr_assert_eq(is_sg, 0);
            return o;
        }
    }
    cr_assert_fail("the proxy registers no op '%s'", name);
    return o;
}

/* The private daemon: the loading process's child, and its directory. */
static pid_t daemon_child(void)
{
    char path[64], buf[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", getpid(), getpid());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (pid_t)atoi(buf);
}

/* The private directory of daemon `pid`: its --socket argument's folder. */
static void daemon_dir(pid_t pid, char *dir, size_t len)
{
    char path[64], args[4096];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(args, 1, sizeof(args) - 1, f);
    fclose(f);
    args[n] = '\0';
    dir[0] = '\0';
    for (size_t i = 0; i < n; i += strlen(args + i) + 1)
        if (strcmp(args + i, "--socket") == 0 && i + 9 < n) {
            snprintf(dir, len, "%s", args + i + 9);
            char *slash = strrchr(dir, '/');
            if (slash != NULL)
                *slash = '\0';
        }
    cr_assert(strncmp(dir, "/tmp/mxop-mxnet-", 16) == 0, "daemon %d: --socket in '%s'", (int)pid,
              dir);
}

/* Unloads the proxy: its daemon is gone (reaped by it) and its directory removed. */
static void unload_leaves_nothing(pid_t daemon)
{
    cr_assert_gt(daemon, 0, "no private daemon was started");
    char proc[64], dir[256];
    snprintf(proc, sizeof(proc), "/proc/%d", (int)daemon);
    daemon_dir(daemon, dir, sizeof(dir));
    cr_assert_eq(access(dir, F_OK), 0);
    cr_assert_eq(dlclose(lib), 0);
    lib = NULL;
    cr_assert_neq(access(proc, F_OK), 0, "the private daemon %d outlived the unload", (int)daemon);
    cr_assert_neq(access(dir, F_OK), 0, "%s was left behind", dir);
}

TestSuite(mxnet_proxy, .timeout = 60);

static const char *const no_keys[1] = {NULL};

/* relu through FCompute: forward of 4 floats, the callback kind given by _opRegGet. */
static int relu_call(const op_t *o, const float *x, float *y, int64_t n)
{
    const int64_t shape[1] = {n};
    const int64_t *shapes[1] = {shape};
    int dims[1] = {1}, types[1] = {0}, devid[1] = {0}, stypes[1] = {0};
    void *in[1] = {(void *)x}, *out[1] = {y};
    size_t ids[1] = {0};
    const char *dev[1] = {"cpu"};
    void *idx[1] = {NULL}, *ptr[1] = {NULL};
    int64_t sh[1] = {0};
    return abi.fcompute(o->fwd[0], no_keys, no_keys, 0, shapes, dims, in, types, ids, dev, devid, 1,
                        shapes, dims, out, types, ids, dev, devid, 1, NULL, NULL, NULL, NULL, NULL,
                        NULL, NULL, stypes, stypes, idx, idx, ptr, ptr, sh, sh, sh, sh, NULL, NULL);
}

Test(mxnet_proxy, registers_the_ops_of_both_abis_and_runs_them)
{
    load("plugins/relu.so:tests/plugins/mx_proxy.so");
    cr_assert_eq(abi.op_version(), 11);
    cr_assert_eq(abi.initialize(10901), 1, "%s", msgs());
    pid_t daemon = daemon_child();

    op_t relu = find("relu");
    cr_assert_eq(relu.n_fwd, 1);
    cr_assert_eq(relu.n_bwd, 1);
    cr_assert_eq(relu.n_create, 0);
    cr_assert(relu.parse != NULL && relu.type != NULL && relu.shape != NULL);
    op_t sg = find("state_gemm");
    cr_assert_eq(sg.n_create, 1);
    cr_assert_eq(sg.n_fwd, 0);

    int nin = -1, nout = -1;
    cr_assert_eq(abi.parse_attrs(relu.parse, no_keys, no_keys, 0, &nin, &nout), 1);
    cr_assert_eq(nin, 1);
    cr_assert_eq(nout, 1);

    /* Inference: shapes (malloc'ed, freed with _opCallFree) and types. */
    unsigned int s0[2] = {3, 5};
    unsigned int *ish[1] = {s0};
    int idim[1] = {2};
    unsigned int **mod = NULL, **osh = NULL;
    int *mdim = NULL, *odim = NULL;
    cr_assert_eq(
        abi.infer_shape(relu.shape, no_keys, no_keys, 0, ish, idim, 1, &mod, &mdim, &osh, &odim, 1),
        1, "%s", msgs());
    cr_assert_eq(odim[0], 2);
    cr_assert_eq(osh[0][0], 3);
    cr_assert_eq(osh[0][1], 5);
    abi.free_(mod[0]);
    abi.free_(osh[0]);
    abi.free_(mod);
    abi.free_(mdim);
    abi.free_(osh);
    abi.free_(odim);
    int it[1] = {0}, ot[1] = {-1};
    cr_assert_eq(abi.infer_type(relu.type, no_keys, no_keys, 0, it, 1, ot, 1), 1, "%s", msgs());
    cr_assert_eq(ot[0], 0);

    float x[4] = {-1, 2, -3, 4}, y[4] = {9, 9, 9, 9};
    cr_assert_eq(relu_call(&relu, x, y, 4), 1, "%s", msgs());
    cr_assert(y[0] == 0 && y[1] == 2 && y[2] == 0 && y[3] == 4);
    unload_leaves_nothing(daemon);
}

Test(mxnet_proxy, a_crash_is_a_failure_naming_op_and_signal_and_the_next_call_runs)
{
    load("tests/plugins/mx_proxy.so");
    cr_assert_eq(abi.initialize(10901), 1, "%s", msgs());
    pid_t daemon = daemon_child();
    op_t o = find("crashy_relu");
    float bad[2] = {1, -12345}, good[2] = {-5, 5}, y[2];
    cr_assert_eq(relu_call(&o, bad, y, 2), 0);
    const char *m = msgs();
    cr_assert(strstr(m, "crashy_relu") != NULL && strstr(m, "SIGSEGV") != NULL &&
                  strstr(m, "MXOP_EWORKER_CRASHED") != NULL,
              "%s", m);
    cr_assert_eq(relu_call(&o, good, y, 2), 1, "%s", msgs());
    cr_assert_eq(abi.msg_size(), 0, "a success leaves no message");
    cr_assert(y[0] == 0 && y[1] == 5);
    unload_leaves_nothing(daemon);
}

Test(mxnet_proxy, stateful_op_is_created_run_and_destroyed)
{
    load("tests/plugins/mx_proxy.so");
    cr_assert_eq(abi.initialize(10901), 1, "%s", msgs());
    pid_t daemon = daemon_child();
    op_t o = find("state_gemm");
    unsigned int sa[2] = {2, 3}, sb[2] = {3, 1};
    unsigned int *shapes[2] = {sa, sb};
    int dims[2] = {2, 2}, types[2] = {0, 0};
    const char *keys[1] = {"test_kw"}, *vals[1] = {"5"};
    void *st = NULL;
    cr_assert_eq(
        abi.create_state(o.create[0], keys, vals, 1, "cpu", 0, shapes, dims, 2, types, &st), 1,
        "%s", msgs());
    cr_assert_not_null(st);
    /* MXNet reads the C++ object's `created` flag (after the vtable pointer and ignore_warn). */
    cr_assert_eq(((const unsigned char *)st)[sizeof(void *) + 1], 1);

    float A[6] = {1, 2, 3, 4, 5, 6}, B[3] = {7, 8, 9}, C[2] = {0, 0};
    const int64_t la[2] = {2, 3}, lb[2] = {3, 1}, lc[2] = {2, 1};
    const int64_t *ish[2] = {la, lb}, *osh[1] = {lc};
    int idim[2] = {2, 2}, odim[1] = {2}, ity[2] = {0, 0}, oty[1] = {0}, devid[2] = {0, 0};
    int stypes[2] = {0, 0};
    void *in[2] = {A, B}, *out[1] = {C};
    size_t ids[2] = {0, 0};
    const char *dev[2] = {"cpu", "cpu"};
    void *nul[2] = {NULL, NULL};
    int64_t sh[2] = {0, 0};
    cr_assert_eq(abi.fstateful(1, st, ish, idim, in, ity, ids, dev, devid, 2, osh, odim, out, oty,
                               ids, dev, devid, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, stypes,
                               stypes, nul, nul, nul, nul, sh, sh, sh, sh, NULL, NULL),
                 1, "%s", msgs());
    cr_assert(C[0] == 50 && C[1] == 122, "C = [%g, %g]", C[0], C[1]);
    abi.destroy_state(st);
    unload_leaves_nothing(daemon);
}

Test(mxnet_proxy, a_library_that_does_not_load_fails_initialize_naming_it)
{
    load("tests/plugins/no_such_library.so");
    cr_assert_eq(abi.initialize(10901), 0);
    const char *m = msgs();
    cr_assert(strstr(m, "no_such_library.so") != NULL, "%s", m);
    cr_assert_eq(daemon_child(), 0, "a daemon was left running");
    cr_assert_eq(dlclose(lib), 0);
}
