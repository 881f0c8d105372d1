/*
 * server/worker/plugin_loader.c - dlopen an op library, check it, register its ops.
 *
 * This is the only code in mxop that loads a plugin.  The library's
 * mxop_plugin_info is checked before any of its code other than its
 * constructors runs; its init then registers ops through register_op,
 * whose every definition is copied and validated here.  A library that
 * fails anywhere is unloaded and leaves no op behind.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "server/worker/mxnet/mxnet.h"
#include "server/worker/worker.h"

/* An op definition bigger than this is garbage, not a newer ABI. */
#define DEF_SIZE_MAX 65536u

static mxop__worker_lib_t *libs;
static uint32_t n_libs;
static uint32_t cap_libs;
/* True while a library's init runs: libs[n_libs] is then that library. */
static volatile int in_init;

const mxop__worker_lib_t *mxop__lib_get(uint32_t i)
{
    return i < n_libs ? &libs[i] : NULL;
}

uint32_t mxop__lib_count(void)
{
    return n_libs;
}

/*
 * A library loaded from its descriptor is known to the dynamic loader as
 * /proc/self/fd/N; backtraces name it by the path it was loaded for.
 * Called from the fault handler: plain comparisons only.
 */
const char *mxop__lib_path_of(const char *fname)
{
    /* The library whose init runs now is in place at libs[n_libs] (run_init). */
    uint32_t n = n_libs + (in_init ? 1u : 0u);
    for (uint32_t i = 0; i < n; i++)
        if (libs[i].fd_path[0] != '\0' && strcmp(libs[i].fd_path, fname) == 0)
            return libs[i].path;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* register_op */

/* Records the first registration failure of the library and returns `code`. */
__attribute__((format(printf, 3, 4))) static int reg_fail(struct mxop_ctx *c, int code,
                                                          const char *fmt, ...)
{
    if (c->reg_code == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->reg_msg, sizeof(c->reg_msg), fmt, ap);
        va_end(ap);
        c->reg_code = code;
    }
    return code;
}

static int valid_name_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.';
}

static int check_def(struct mxop_ctx *c, const mxop_op_def_t *d, const char *name)
{
    if (d->num_outputs < 0 || d->num_outputs > MXOP_MAX_TENSORS)
        return reg_fail(c, MXOP_EINVAL, "op '%s': num_outputs %d is outside [0, %d]", name,
                        d->num_outputs, MXOP_MAX_TENSORS);
    if (d->num_inputs < -1 || d->num_inputs > MXOP_MAX_TENSORS)
        return reg_fail(c, MXOP_EINVAL,
                        "op '%s': num_inputs %d is outside [0, %d] (or -1 for variadic)", name,
                        d->num_inputs, MXOP_MAX_TENSORS);
    if (d->num_inputs == -1 && (d->min_inputs < 0 || d->min_inputs > MXOP_MAX_TENSORS))
        return reg_fail(c, MXOP_EINVAL, "op '%s': min_inputs %d is outside [0, %d]", name,
                        d->min_inputs, MXOP_MAX_TENSORS);
    if (d->num_inputs >= 0 && d->num_inputs < 64 && (d->mutated_inputs >> d->num_inputs) != 0)
        return reg_fail(c, MXOP_EINVAL,
                        "op '%s': mutated_inputs 0x%llx names an input beyond its %d", name,
                        (unsigned long long)d->mutated_inputs, d->num_inputs);
    /* A GPU-only op is complete: host tensors are then refused at the call. */
    if (d->forward == NULL && d->forward_gpu == NULL && d->state_create == NULL)
        return reg_fail(c, MXOP_EINVAL, "op '%s' has neither forward, forward_gpu nor state_create",
                        name);
    if (d->state_create != NULL &&
        ((d->state_forward == NULL && d->state_forward_gpu == NULL) || d->state_destroy == NULL))
        return reg_fail(c, MXOP_EINVAL, "op '%s' is stateful (it has state_create) but lacks %s",
                        name, d->state_destroy == NULL ? "state_destroy" : "state_forward");
    return 0;
}

int mxop__register_op(mxop_ctx_t *ctx, const mxop_op_def_t *def)
{
    struct mxop_ctx *c = &mxop__ctx;
    if (ctx != c)
        return MXOP_EINVAL;
    if (c->mode != MXOP__CTX_INIT)
        return mxop__host.set_error(ctx, MXOP_EINVAL,
                                    "register_op may be called only during mxop_plugin_init");
    if (def == NULL)
        return reg_fail(c, MXOP_EINVAL, "register_op was given a NULL definition");
    if (def->struct_size == 0 || def->struct_size > DEF_SIZE_MAX)
        return reg_fail(c, MXOP_EABI,
                        "op definition has struct_size %u (this worker's is %zu): not an "
                        "mxop_op_def_t",
                        def->struct_size, sizeof(mxop_op_def_t));

    /* Read the plugin's struct by its own size; what it lacks stays zero. */
    mxop__worker_op_t op;
    memset(&op, 0, sizeof(op));
    size_t n = def->struct_size < sizeof(op.def) ? def->struct_size : sizeof(op.def);
    memcpy(&op.def, def, n);

    const char *name = op.def.name;
    if (name == NULL || name[0] == '\0')
        return reg_fail(c, MXOP_EINVAL, "an op definition has no name");
    size_t len = strnlen(name, MXOP__W_NAME_MAX + 1);
    if (len > MXOP__W_NAME_MAX)
        return reg_fail(c, MXOP_EINVAL, "op name '%.*s...' is longer than %d characters",
                        MXOP__W_NAME_MAX, name, MXOP__W_NAME_MAX);
    for (size_t i = 0; i < len; i++)
        if (!valid_name_char(name[i]))
            return reg_fail(c, MXOP_EINVAL,
                            "op name '%s' has a character outside [A-Za-z0-9_.] at %zu", name, i);
    memcpy(op.name, name, len + 1);

    int rc = check_def(c, &op.def, op.name);
    if (rc != 0)
        return rc;

    const mxop__worker_op_t *dup = mxop__op_find(op.name);
    if (dup != NULL) {
        if (dup->lib == c->reg_lib)
            return reg_fail(c, MXOP_EDUPLICATE, "op '%s' is registered twice", op.name);
        return reg_fail(c, MXOP_EDUPLICATE, "op '%s' is already registered by library '%s'",
                        op.name, mxop__lib_get(dup->lib)->name);
    }

    char why[MXOP__W_MSG_MAX];
    rc = mxop__attrs_copy(&op, why, sizeof(why));
    if (rc != 0)
        return reg_fail(c, rc, "%s", why);

    const char *desc = op.def.description != NULL ? op.def.description : "";
    op.description = strndup(desc, MXOP__W_DESC_MAX);
    if (op.description == NULL) {
        mxop__attrs_free(&op);
        return reg_fail(c, MXOP_ENOMEM, "out of memory registering op '%s'", op.name);
    }
    /* The copies outlive any trick the library plays with its own strings. */
    op.def.name = op.name;
    op.def.description = op.description;
    op.lib = c->reg_lib;
    op.tensor_stride = c->reg_tensor_stride;
    rc = mxop__op_append(&op);
    if (rc != 0) {
        free(op.description);
        mxop__attrs_free(&op);
        if (rc == MXOP_ELIMIT)
            return reg_fail(c, rc, "op '%s': this session already has %d ops, the most it may",
                            op.name, MXOP__W_MAX_OPS);
        return reg_fail(c, rc, "out of memory registering op '%s'", op.name);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Loading */

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s != NULL ? s + 1 : path;
}

static int grow_libs(void)
{
    if (n_libs < cap_libs)
        return 0;
    uint32_t cap = cap_libs ? cap_libs * 2 : 8;
    mxop__worker_lib_t *p = realloc(libs, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return MXOP_ENOMEM;
    libs = p;
    cap_libs = cap;
    return 0;
}

/* Runs the library's init with the registration context; see mxop__plugin_load. */
static int run_init(mxop_plugin_init_fn init, uint32_t tensor_stride, const char *lname, char *msg,
                    size_t msglen)
{
    struct mxop_ctx *c = &mxop__ctx;
    c->mode = MXOP__CTX_INIT;
    c->err_code = 0;
    c->has_msg = 0;
    c->msg[0] = '\0';
    c->n_attrs = 0;
    c->op = NULL;
    c->reg_lib = n_libs;
    c->reg_tensor_stride = tensor_stride;
    c->reg_code = 0;
    c->reg_msg[0] = '\0';

    in_init = 1;
    int rc = init(c, &mxop__host);
    in_init = 0;
    mxop__ctx_end();

    /*
     * A definition that was refused fails the whole library even when init
     * ignored register_op's answer: a library that loads with an op
     * silently missing would only fail later, and less clearly.
     */
    if (c->reg_code != 0) {
        mxop__fmt(msg, msglen, "library '%s': %s", lname, c->reg_msg);
        return c->reg_code;
    }
    if (rc != 0) {
        if (c->has_msg)
            mxop__fmt(msg, msglen, "library '%s' failed to initialise: %s", lname, c->msg);
        else
            mxop__fmt(msg, msglen, "library '%s' failed to initialise: init returned %d", lname,
                      rc);
        return MXOP_ELIB_INIT;
    }
    return 0;
}

/* An mxop_plugin_info bigger than this is garbage, not a newer ABI. */
#define INFO_SIZE_MAX 4096u

/* Whether the library's mxop_plugin_info is as long as `member`'s end. */
#define INFO_HAS(info, member)                                                                     \
    ((info)->struct_size >= offsetof(mxop_plugin_info_t, member) + sizeof((info)->member))

/*
 * The version rule of op.h (compatibility rule 5) and the stride the
 * library indexes tensors by (rule 4), from what the library says of
 * itself.  Nothing of the library but its constructors has run.
 */
static int check_info(const mxop_plugin_info_t *info, const char *lname, uint32_t *tensor_stride,
                      char *msg, size_t msglen)
{
    if (!INFO_HAS(info, abi_version) || info->struct_size > INFO_SIZE_MAX) {
        mxop__fmt(msg, msglen,
                  "library '%s': mxop_plugin_info has struct_size %u: not one "
                  "(declare it with MXOP_PLUGIN)",
                  lname, info->struct_size);
        return MXOP_ELIB_INVALID;
    }
    uint32_t built = info->abi_version;
    /* Libraries of ABI 1 and 2 have no abi_required: they need what they were built for. */
    uint32_t required =
        INFO_HAS(info, abi_required) && info->abi_required != 0 ? info->abi_required : built;
    if (built < 1 || required > built) {
        mxop__fmt(msg, msglen,
                  "library '%s' declares plugin ABI %u, requiring ABI %u: not a valid pair (the "
                  "required version is between 1 and the version it was built for)",
                  lname, built, required);
        return MXOP_EABI;
    }
    if (required > MXOP_ABI_VERSION) {
        mxop__fmt(msg, msglen,
                  "library '%s' was built for plugin ABI %u and needs a worker of ABI %u or newer; "
                  "this worker speaks ABI %d: use a newer mxop, or rebuild the library (or declare "
                  "with MXOP_PLUGIN_COMPAT that it runs in ABI %d)",
                  lname, built, required, MXOP_ABI_VERSION, MXOP_ABI_VERSION);
        return MXOP_EABI;
    }
    uint32_t size = INFO_HAS(info, tensor_size) ? info->tensor_size : 0;
    if (size == 0)
        size = (uint32_t)MXOP__TENSOR_SIZE_V1;
    if (size < MXOP__TENSOR_SIZE_V1 || size > MXOP__TENSOR_SIZE_MAX ||
        size % _Alignof(mxop_tensor_t) != 0) {
        mxop__fmt(msg, msglen,
                  "library '%s': mxop_plugin_info.tensor_size %u is not the size of an "
                  "mxop_tensor_t (this worker's is %zu; it is between %zu and %u, a multiple of "
                  "%zu)",
                  lname, size, sizeof(mxop_tensor_t), (size_t)MXOP__TENSOR_SIZE_V1,
                  MXOP__TENSOR_SIZE_MAX, _Alignof(mxop_tensor_t));
        return MXOP_EABI;
    }
    *tensor_stride = size;
    return 0;
}

/*
 * Every descriptor number ever handed to dlopen as /proc/self/fd/N, loads
 * that failed included: the dynamic loader recognises an object it has by
 * its name, and an object it could not unload (a C++ library with unique
 * symbols, say) keeps its name after a failed load.  Loads are few (a
 * session's quota), so a list is enough.
 */
static int *used_fds;
static uint32_t n_used_fds;
static uint32_t cap_used_fds;

static int fd_name_taken(int fd)
{
    for (uint32_t i = 0; i < n_used_fds; i++)
        if (used_fds[i] == fd)
            return 1;
    return 0;
}

static int note_fd_name(int fd)
{
    if (n_used_fds == cap_used_fds) {
        uint32_t cap = cap_used_fds ? cap_used_fds * 2 : 16;
        int *p = realloc(used_fds, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return MXOP_ENOMEM;
        used_fds = p;
        cap_used_fds = cap;
    }
    used_fds[n_used_fds++] = fd;
    return 0;
}

/*
 * Were the descriptor of a loaded library closed (by a library that closes
 * descriptors it does not own) and its number reused for the next one,
 * dlopen would answer the old library.  So each library is loaded under a
 * descriptor number never used for that before; `fd` is moved if needed.
 * Returns the number, or -errno (fd closed).
 */
static int unique_fd_name(int fd)
{
    int min = fd;
    while (fd_name_taken(fd)) {
        int moved = fcntl(fd, F_DUPFD_CLOEXEC, ++min);
        if (moved < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        close(fd);
        fd = moved;
        min = moved;
    }
    if (note_fd_name(fd) != 0) {
        close(fd);
        return -ENOMEM;
    }
    return fd;
}

int mxop__plugin_load(const char *path, const char *name, int fd, const char *expect,
                      const char *where, uint32_t *lib, char *msg, size_t msglen)
{
    if (path == NULL || path[0] == '\0') {
        mxop__fmt(msg, msglen, "WorkerLoad has an empty path");
        if (fd >= 0)
            close(fd);
        return MXOP_EINVAL;
    }
    const char *lname = name != NULL && name[0] != '\0' ? name : base_name(path);

    /* Loading a library twice is a no-op that answers its ops. */
    for (uint32_t i = 0; i < n_libs; i++) {
        if (strcmp(libs[i].path, path) == 0) {
            if (fd >= 0)
                close(fd);
            *lib = i;
            return 0;
        }
    }

    /* What the daemon opened, as a sealed private copy (integrity.c); never the path. */
    int lib_fd = -1;
    int rc = 0;
    if (fd >= 0 &&
        (rc = mxop__integrity_load_fd(fd, lname, expect, where, &lib_fd, msg, msglen)) != 0)
        return rc;
    char fd_path[48];
    const char *open_path = path;
    if (lib_fd >= 0 && (lib_fd = unique_fd_name(lib_fd)) < 0) {
        mxop__fmt(msg, msglen, "library '%s': no descriptor number for it: %s", lname,
                  strerror(-lib_fd));
        return MXOP_ELIB_INVALID;
    }
    if (lib_fd >= 0) {
        snprintf(fd_path, sizeof(fd_path), "/proc/self/fd/%d", lib_fd);
        open_path = fd_path;
    }
    dlerror();
    void *h = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        mxop__fmt(msg, msglen, "library '%s' cannot be loaded: %s", lname,
                  e != NULL ? e : "dlopen failed");
        if (lib_fd >= 0)
            close(lib_fd);
        return MXOP_ELIB_INVALID;
    }
    /* The same file under another path: dlopen handed back the same handle. */
    for (uint32_t i = 0; i < n_libs; i++) {
        if (libs[i].handle == h) {
            dlclose(h);
            if (lib_fd >= 0)
                close(lib_fd);
            *lib = i;
            return 0;
        }
    }

    mxop_plugin_init_fn init;
    /* The MXNet layer is the worker's own code: it has the worker's tensors. */
    uint32_t tensor_stride = sizeof(mxop_tensor_t);
    const mxop_plugin_info_t *info = dlsym(h, "mxop_plugin_info");
    if (info == NULL && mxop__mx_detect(h)) {
        /* An MXNet extension library: its own layer checks it and registers its ops. */
        rc = mxop__mx_open(h, lname, msg, msglen);
        if (rc != 0)
            goto err_close;
        init = mxop__mx_plugin_init;
        goto have_init;
    }
    if (info == NULL) {
        mxop__fmt(msg, msglen,
                  "library '%s' exports no mxop_plugin_info: not an mxop op library (declare it "
                  "with MXOP_PLUGIN)",
                  lname);
        rc = MXOP_ELIB_INVALID;
        goto err_close;
    }
    rc = check_info(info, lname, &tensor_stride, msg, msglen);
    if (rc != 0)
        goto err_close;
    void *sym = dlsym(h, "mxop_plugin_init");
    if (sym == NULL) {
        mxop__fmt(msg, msglen,
                  "library '%s' exports no mxop_plugin_init (define it with MXOP_PLUGIN_INIT)",
                  lname);
        rc = MXOP_ELIB_INVALID;
        goto err_close;
    }
    /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
    memcpy(&init, &sym, sizeof(init));

have_init:

    if (grow_libs() != 0) {
        mxop__fmt(msg, msglen, "out of memory loading library '%s'", lname);
        rc = MXOP_ENOMEM;
        goto err_close;
    }
    char *path_copy = strdup(path);
    char *name_copy = strdup(lname);
    if (path_copy == NULL || name_copy == NULL) {
        mxop__fmt(msg, msglen, "out of memory loading library '%s'", lname);
        rc = MXOP_ENOMEM;
        goto err_free;
    }

    uint32_t first = mxop__op_count();
    /* The op messages name the library being registered, so it is in place first. */
    libs[n_libs] = (mxop__worker_lib_t){h, path_copy, name_copy, first, 0, ""};
    if (lib_fd >= 0)
        snprintf(libs[n_libs].fd_path, sizeof(libs[n_libs].fd_path), "%s", fd_path);
    rc = run_init(init, tensor_stride, lname, msg, msglen);
    /* A process started by a constructor or init would be a second reader of the channels. */
    pid_t child;
    int started = mxop__children_sweep(&child);
    if (started > 0) {
        mxop__fmt(msg, msglen,
                  "library '%s' started %d process(es) while loading (pid %d first); a worker is "
                  "one process: they were killed and the library is refused",
                  lname, started, (int)child);
        rc = MXOP_ELIB_INIT;
    }
    if (rc != 0)
        goto err_ops;
    libs[n_libs].n_ops = mxop__op_count() - first;
    *lib = n_libs++;
    return 0;

err_ops:
    mxop__op_truncate(first);
err_free:
    free(path_copy);
    free(name_copy);
err_close:
    dlclose(h);
    if (lib_fd >= 0)
        close(lib_fd);
    return rc;
}
