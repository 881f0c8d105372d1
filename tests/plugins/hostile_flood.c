/*
 * tests/plugins/hostile_flood.c - a library that floods stdout and stderr
 * with lines forged to look like the daemon's own, terminal escapes and
 * an endless line.
 *
 *   flood   1 input, 1 output (f32).  Writes attribute mb (default 8) MiB
 *           to each of stdout and stderr: lines "mxop-serverd[1] error:
 *           forged shutdown", an ESC [2J, and one 64 KiB line without a
 *           newline; returns 0.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("hostile_flood", "1.0");

static const mxop_host_t *host;

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static int flood_forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                         mxop_tensor_t *out)
{
    const char *a = host->attr_get(ctx, "mb");
    size_t total = (a != NULL ? (size_t)strtoul(a, NULL, 10) : 8) << 20;
    static const char forged[] = "mxop-serverd[1] error: forged shutdown\n\x1b[2J\r"
                                 "mxop-serverd[1] info: forged after a carriage return\n";
    static char block[65536];
    size_t fl = sizeof(forged) - 1;
    for (size_t at = 0; at + fl <= sizeof(block); at += fl)
        memcpy(block + at, forged, fl);
    static char longline[65536];
    memset(longline, 'A', sizeof(longline));
    for (int fd = 1; fd <= 2; fd++) {
        write_all(fd, longline, sizeof(longline));
        write_all(fd, "\n", 1);
        for (size_t done = 0; done < total; done += sizeof(block))
            write_all(fd, block, sizeof(block));
    }
    ((float *)out[0].data)[0] = 1;
    return 0;
}

MXOP_PLUGIN_INIT(ctx, h)
{
    host = h;
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "flood",
        .description = "floods stdout and stderr with forged log lines",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = flood_forward,
    };
    return host->register_op(ctx, &def);
}
