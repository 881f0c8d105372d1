/*
 * bench/diag/nproc_calls.c - aggregate null-op calls/s of N client
 * processes, each with its own session, on the shared-memory path (or the
 * socket path with MXOP_DATA_PATH=socket), over a longer window than
 * `make bench` section 6 (to judge the spin lease and the socket path's
 * spin with two sessions on two CPUs).  It talks to a daemon already running,
 * so that two builds of libmxop can be compared against one daemon
 * (LD_LIBRARY_PATH picks the library).  Not built by the Makefile:
 *
 *     cc -O2 -Iinclude -o /tmp/nproc_calls bench/diag/nproc_calls.c \
 *        -Lbuild/lib -lmxop -Wl,-rpath,$PWD/build/lib
 *     mkdir -p /tmp/nproc && cp -r build/plugins /tmp/nproc/
 *     build/bin/mxop-serverd --socket /tmp/nproc/s.sock --plugin-dir /tmp/nproc/plugins \
 *        --trusted-library noop.so &
 *     /tmp/nproc_calls /tmp/nproc/s.sock 1 1.5; /tmp/nproc_calls /tmp/nproc/s.sock 8 1.5
 *     kill %1
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mxop/client.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One client process: warm up, wait for the others, call for `secs`, report calls/s. */
static void client(const char *sock, double secs, int res_fd)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {
        .struct_size = sizeof(o), .timeout_ms = 60000, .data_path = MXOP_DATA_PATH_DEFAULT};
    const mxop_op_t *op = NULL;
    if (mxop_connect(sock, &o, &c) != 0 || mxop_load_library(c, "noop.so") != 0 ||
        mxop_op_find(c, "noop", &op) != 0)
        _exit(2);
    for (int k = 0; k < 500; k++)
        mxop_forward(c, op, NULL, NULL, 0, NULL, 0);
    usleep(200000); /* every process connected and warm before any starts */
    double t0 = now_s(), t;
    long calls = 0;
    while ((t = now_s()) - t0 < secs) {
        if (mxop_forward(c, op, NULL, NULL, 0, NULL, 0) != 0)
            _exit(3);
        calls++;
    }
    double rate = (double)calls / (t - t0);
    if (write(res_fd, &rate, sizeof(rate)) != (ssize_t)sizeof(rate))
        _exit(4);
    mxop_close(c);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s SOCKET N SECONDS\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    double secs = atof(argv[3]);
    int p[2];
    if (n < 1 || secs <= 0 || pipe(p) != 0)
        return 2;
    for (int i = 0; i < n; i++)
        if (fork() == 0)
            client(argv[1], secs, p[1]);
    close(p[1]);
    double total = 0;
    int got = 0;
    for (int i = 0; i < n; i++) {
        double r;
        if (read(p[0], &r, sizeof(r)) == (ssize_t)sizeof(r)) {
            total += r;
            got++;
        }
    }
    while (wait(NULL) > 0) {
    }
    printf("N=%d total %.0f calls/s (%d of %d processes reported)\n", n, total, got, n);
    return got == n ? 0 : 1;
}
