/*
 * tests/plugins/hostile_ns.c - a library that looks around the worker's
 * minimal root (server/worker/namespaces.c) for what it should not see.
 *
 * Every op: 1 input (ignored), 1 output f64 of at least NS_OUT elements;
 * it returns 0 and says what it found in out[] (the test decides):
 *
 *   ns_open     attr path: out[0] = 1 if open(path, O_RDONLY) succeeded,
 *               else -errno.
 *   ns_create   attr path: out[0] = 1 if open(path, O_WRONLY|O_CREAT)
 *               succeeded (and "evil" was written), else -errno.
 *   ns_connect  attr path: out[0] = 1 if an AF_UNIX connect() to path
 *               succeeded, else -errno.
 *   ns_proc     out[0] = processes listed in /proc (numeric entries),
 *               out[1] = 1 if the worker's own pid is among them,
 *               out[2] = the worker's getpid() (1 in a pid namespace of its own),
 *               out[3] = the pid /proc/self names.
 *   ns_tmp      attr name: out[0] = 1 if /tmp/NAME could be created and
 *               written, else -errno; out[1] = 1 if TMPDIR is "/tmp".
 *   ns_seen     attr name: out[0] = 1 if /tmp/NAME exists, else -errno.
 *   ns_net      out[0] = network interfaces in /proc/net/dev, out[1] = 1 if
 *               "lo" is one, out[2] = 1 if lo is up, 0 if down, -errno if
 *               its flags cannot be read.
 *   ns_dev      out[0] = entries of /dev (not . and ..), out[1] = those
 *               named nvidia*.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_ns", "1.0");

#define NS_OUT 4

static const mxop_host_t *host;

static int start(mxop_ctx_t *ctx, int n_out, mxop_tensor_t *out, double **r)
{
    if (n_out < 1 || out[0].size < NS_OUT)
        return host->set_error(ctx, MXOP_EATTR, "hostile_ns: the output needs %d elements", NS_OUT);
    *r = out[0].data;
    for (int i = 0; i < NS_OUT; i++)
        (*r)[i] = 0;
    return 0;
}

static const char *need(mxop_ctx_t *ctx, const char *name)
{
    const char *v = host->attr_get(ctx, name);
    if (v == NULL)
        host->set_error(ctx, MXOP_EATTR, "hostile_ns: needs the attribute %s", name);
    return v;
}

#define BEGIN(needs_attr)                                                                          \
    double *r;                                                                                     \
    int rc_ = start(ctx, n_out, out, &r);                                                          \
    (void)n_in;                                                                                    \
    (void)in;                                                                                      \
    if (rc_ != 0)                                                                                  \
        return rc_;                                                                                \
    const char *arg = (needs_attr) != NULL ? need(ctx, (needs_attr)) : "";                         \
    if (arg == NULL)                                                                               \
        return MXOP_EATTR;

static int ns_open(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    BEGIN("path");
    int fd = open(arg, O_RDONLY | O_CLOEXEC);
    r[0] = fd >= 0 ? 1 : -(double)errno;
    if (fd >= 0)
        close(fd);
    return 0;
}

static int ns_create(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                     mxop_tensor_t *out)
{
    BEGIN("path");
    int fd = open(arg, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    r[0] = fd >= 0 ? 1 : -(double)errno;
    if (fd >= 0) {
        if (write(fd, "evil", 4) != 4)
            r[0] = -(double)errno;
        close(fd);
    }
    return 0;
}

static int ns_connect(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                      mxop_tensor_t *out)
{
    BEGIN("path");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        r[0] = -(double)errno;
        return 0;
    }
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", arg);
    r[0] = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 1 : -(double)errno;
    close(fd);
    return 0;
}

static int ns_proc(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    BEGIN(NULL);
    DIR *d = opendir("/proc");
    if (d == NULL) {
        r[0] = -(double)errno;
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (e->d_name[0] == '\0' || *end != '\0')
            continue;
        r[0] += 1;
        if (pid == (long)getpid())
            r[1] = 1;
    }
    closedir(d);
    r[2] = (double)getpid();
    char self[32];
    ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        r[3] = strtod(self, NULL);
    } else {
        r[3] = -(double)errno;
    }
    return 0;
}

static int ns_tmp(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    BEGIN("name");
    char path[300];
    snprintf(path, sizeof(path), "/tmp/%s", arg);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    r[0] = fd >= 0 ? 1 : -(double)errno;
    if (fd >= 0) {
        if (write(fd, "note", 4) != 4)
            r[0] = -(double)errno;
        close(fd);
    }
    const char *t = getenv("TMPDIR");
    r[1] = t != NULL && strcmp(t, "/tmp") == 0;
    return 0;
}

static int ns_seen(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    BEGIN("name");
    char path[300];
    snprintf(path, sizeof(path), "/tmp/%s", arg);
    r[0] = access(path, F_OK) == 0 ? 1 : -(double)errno;
    return 0;
}

static int ns_net(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    BEGIN(NULL);
    FILE *f = fopen("/proc/net/dev", "re");
    if (f == NULL) {
        r[0] = -(double)errno;
        return 0;
    }
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (colon == NULL)
            continue; /* the two header lines */
        *colon = '\0';
        char *name = line;
        while (*name == ' ')
            name++;
        r[0] += 1;
        if (strcmp(name, "lo") == 0)
            r[1] = 1;
    }
    fclose(f);
    /* SIOCGIFFLAGS answers on any socket; the sandbox allows only AF_UNIX ones. */
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
        r[2] = -(double)errno;
    else
        r[2] = (ifr.ifr_flags & IFF_UP) != 0;
    if (s >= 0)
        close(s);
    return 0;
}

static int ns_dev(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out, mxop_tensor_t *out)
{
    BEGIN(NULL);
    DIR *d = opendir("/dev");
    if (d == NULL) {
        r[0] = -(double)errno;
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        r[0] += 1;
        if (strncmp(e->d_name, "nvidia", 6) == 0)
            r[1] += 1;
    }
    closedir(d);
    return 0;
}

/* The output: NS_OUT values, whatever the input (so that `mxop run` can call the ops). */
static int ns_infer_shape(mxop_ctx_t *ctx, int n_in, const mxop_shape_t *in, int n_out,
                          mxop_shape_t *out)
{
    (void)ctx;
    (void)n_in;
    (void)in;
    (void)n_out;
    out[0].ndim = 1;
    out[0].dims[0] = NS_OUT;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    static const struct {
        const char *name;
        int (*fn)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    } ops[] = {
        {"ns_open", ns_open}, {"ns_create", ns_create}, {"ns_connect", ns_connect},
        {"ns_proc", ns_proc}, {"ns_tmp", ns_tmp},       {"ns_seen", ns_seen},
        {"ns_net", ns_net},   {"ns_dev", ns_dev},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        mxop_op_def_t def = {
            .struct_size = sizeof(mxop_op_def_t),
            .name = ops[i].name,
            .description = "looks around the worker's minimal root",
            .num_inputs = 1,
            .num_outputs = 1,
            .forward = ops[i].fn,
            .infer_shape = ns_infer_shape,
        };
        int rc = host->register_op(ctx, &def);
        if (rc != 0)
            return rc;
    }
    return 0;
}
