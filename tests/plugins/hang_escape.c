/*
 * tests/plugins/hang_escape.c - an op whose descendant leaves the worker's
 * session and process group and then tries to become a client.
 *
 *   escape_connect  forks a child that calls setsid() and forks a
 *                   grandchild, then exits: the grandchild is reparented
 *                   to the daemon (a child subreaper) and, in a session of
 *                   its own, connects to the daemon's control socket
 *                   (attribute socket), says Hello and waits 300 ms.  out[0]:
 *                   -ECONNRESET (f64) when the daemon hung up on it (or
 *                   sent a refusal and closed), 1 when the daemon waited for
 *                   its Hello (it was taken for a client), 0 when the
 *                   attempt could not be made.  Needs a sandbox that lets
 *                   ops fork (none or basic).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hang_escape", "1.0");

static const mxop_host_t *host;

/* In the grandchild: the daemon's verdict on a connection, as a byte. */
static char try_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return 'x';
    /* A Hello frame (header: magic, version 1, kind 1 = request, length; then Hello{1, 1, "e"}). */
    static const unsigned char hello[] = {0x4d, 0x58, 0x4f, 0x50, 0x01, 0x00, 0x01, 0x00,
                                          0x0b, 0x00, 0x00, 0x00, 0x08, 0x01, 0x52, 0x07,
                                          0x08, 0x01, 0x10, 0x01, 0x1a, 0x01, 'e'};
    (void)!send(fd, hello, sizeof(hello), MSG_NOSIGNAL);
    /* Served: the HelloReply comes and the connection stays.  Refused: closed at once. */
    for (int waited = 0; waited < 300; waited += 50) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        char buf[512];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            ;
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 'r';
    }
    return 'a';
}

static int escape_connect(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                          mxop_tensor_t *out)
{
    (void)n_in, (void)in, (void)n_out;
    const char *path = host->attr_get(ctx, "socket");
    double *o = out[0].data;
    o[0] = 0;
    int pfd[2];
    if (path == NULL || pipe(pfd) != 0)
        return 0;
    pid_t child = fork();
    if (child < 0)
        return 0;
    if (child == 0) {
        setsid();
        pid_t parent = getpid();
        if (fork() == 0) {
            /* Wait to be reparented (to the daemon), then try. */
            for (int i = 0; i < 200 && getppid() == parent; i++)
                usleep(5000);
            char v = try_connect(path);
            (void)!write(pfd[1], &v, 1);
            _exit(0);
        }
        _exit(0);
    }
    close(pfd[1]);
    waitpid(child, NULL, 0);
    struct pollfd p = {.fd = pfd[0], .events = POLLIN};
    char v = 0;
    if (poll(&p, 1, 5000) == 1 && read(pfd[0], &v, 1) == 1)
        o[0] = v == 'r' ? -(double)ECONNRESET : v == 'a' ? 1 : 0;
    close(pfd[0]);
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t d = {.struct_size = sizeof(mxop_op_def_t),
                       .name = "escape_connect",
                       .description = "a descendant leaves the worker's session and connects",
                       .num_inputs = 1,
                       .num_outputs = 1,
                       .forward = escape_connect};
    return host->register_op(ctx, &d);
}
