/*
 * server/daemon/core/metrics.c - --metrics-file: the Prometheus text of every
 * session's counters, written at an interval for node_exporter's textfile
 * collector.
 *
 * The text itself comes from common/metrics_text.c (`mxop stats
 * --prometheus` makes the same from DaemonStats).  The file is written
 * whole under a temporary name in the same directory and renamed into
 * place, so that the collector never reads half of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/metrics_text.h"
#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/introspect.h"
#include "server/daemon/core/daemon.h"

#define DEFAULT_INTERVAL_MS 10000

int mxop__metrics_option(mxop__config_t *cfg, const char *opt, const char *val, char *err,
                         size_t errlen)
{
    if (strcmp(opt, "--metrics-file") == 0) {
        cfg->metrics_path = val;
        return 0;
    }
    if (strcmp(opt, "--metrics-interval-ms") != 0)
        return 1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (val[0] == '-' || *end != '\0' || errno != 0 || v < 100 || v > (1ull << 32)) {
        mxop__fmt(err, errlen,
                  "--metrics-interval-ms must be a number of milliseconds from 100, not '%s'", val);
        return MXOP_EINVAL;
    }
    cfg->metrics_interval_ms = v;
    return 0;
}

/* Writes the file: temporary name beside it, then rename.  Failures are logged, once a minute. */
static void write_file(mxop__daemon_t *d)
{
    static int64_t last_warn_ns;
    const char *path = d->cfg.metrics_path;
    char *text = mxop__metrics_text(d);
    char tmp[4096];
    mxop__fmt(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)d->pid);
    const char *what = "out of memory";
    int fd = -1;
    if (text != NULL) {
        /*
         * A new file, never one found under the name: open() of a FIFO
         * someone planted there would wait for a reader, in the daemon's
         * loop.  What a crashed daemon of this pid left is removed first.
         */
        unlink(tmp);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
        what = "open";
    }
    if (fd >= 0) {
        size_t n = strlen(text), off = 0;
        while (off < n) {
            ssize_t w = write(fd, text + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        bool ok = off == n;
        what = ok ? "rename" : "write";
        if (close(fd) != 0)
            ok = false;
        if (ok && rename(tmp, path) == 0) {
            free(text);
            return;
        }
        unlink(tmp);
    }
    int e = errno;
    free(text);
    int64_t now = mxop__now_ns();
    if (last_warn_ns == 0 || now - last_warn_ns > 60000000000LL) {
        last_warn_ns = now;
        MXOP__LOGW(0, NULL, "cannot write the metrics file %s (%s: %s)", path, what, strerror(e));
    }
}

static void timer_cb(uv_timer_t *t)
{
    write_file(t->data);
}

int mxop__metrics_start(mxop__daemon_t *d)
{
    if (d->cfg.metrics_path == NULL)
        return 0;
    uint64_t every = d->cfg.metrics_interval_ms ? d->cfg.metrics_interval_ms : DEFAULT_INTERVAL_MS;
    if (uv_timer_init(d->loop, &d->metrics_timer) != 0)
        return MXOP_EINTERNAL;
    d->metrics_timer.data = d;
    d->metrics_on = true;
    write_file(d);
    uv_timer_start(&d->metrics_timer, timer_cb, every, every);
    MXOP__LOGI(0, NULL, "writing metrics to %s every %llu ms", d->cfg.metrics_path,
               (unsigned long long)every);
    return 0;
}

void mxop__metrics_stop(mxop__daemon_t *d)
{
    if (!d->metrics_on)
        return;
    d->metrics_on = false;
    write_file(d);
    uv_close((uv_handle_t *)&d->metrics_timer, NULL);
}
