/*
 * server/daemon/core/log.c - leveled, one-line-per-event logging to stderr, as
 * text or as JSON (--log-format).
 */
#include "server/daemon/core/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mxop/errors.h"

static int min_level = MXOP__LOG_INFO;
static int format = MXOP__LOG_TEXT;

/* --log-file, kept for the reopen. */
static const char *log_path;

int mxop__log_open_file(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the log file %s: %s", path, strerror(errno));
        return MXOP_EIO;
    }
    /* fd 2 is where every line goes (one write each); it replaces the old file atomically. */
    if (fd != 2) {
        if (dup2(fd, 2) < 0) {
            snprintf(err, errlen, "cannot make %s the log: %s", path, strerror(errno));
            close(fd);
            return MXOP_EIO;
        }
        close(fd);
    }
    log_path = path;
    return 0;
}

int mxop__log_reopen(char *err, size_t errlen)
{
    if (log_path == NULL) {
        snprintf(err, errlen, "the log goes to stderr (no --log-file): nothing to reopen");
        return MXOP_EINVAL;
    }
    return mxop__log_open_file(log_path, err, errlen);
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int mxop__log_parse_level(const char *s, int *level)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *level = i;
            return 0;
        }
    }
    return MXOP_EINVAL;
}

void mxop__log_set_level(int level)
{
    min_level = level;
}

int mxop__log_enabled(int level)
{
    return level >= min_level;
}

int mxop__log_parse_format(const char *s, int *fmt)
{
    if (strcmp(s, "text") == 0)
        *fmt = MXOP__LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *fmt = MXOP__LOG_JSON;
    else
        return MXOP_EINVAL;
    return 0;
}

void mxop__log_set_format(int fmt)
{
    format = fmt;
}

/* Keeps one event on one line even when a message quotes a plugin's text. */
static void sanitise(char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f)
            s[i] = '?';
    }
}

/* A line being built: appends never overrun, the end is cut instead. */
typedef struct {
    char buf[4096];
    size_t n;
} line_t;

static void put(line_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(line_t *l, const char *fmt, ...)
{
    if (l->n >= sizeof(l->buf) - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->buf + l->n, sizeof(l->buf) - l->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        l->n += (size_t)k;
    if (l->n > sizeof(l->buf) - 2)
        l->n = sizeof(l->buf) - 2;
}

/* A key=value of text format: values come from plugins, so no spaces or control characters. */
static void put_word(line_t *l, const char *key, const char *v)
{
    size_t start = l->n + strlen(key) + 2;
    put(l, " %s=%s", key, v);
    for (size_t i = start; i < l->n; i++)
        if ((unsigned char)l->buf[i] <= 0x20 || l->buf[i] == 0x7f)
            l->buf[i] = '_';
}

/* A JSON string: quotes, backslashes, control characters and bytes past ASCII escaped. */
static void put_json_string(line_t *l, const char *v)
{
    put(l, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p != '\0'; p++) {
        if (l->n >= sizeof(l->buf) - 16)
            break;
        if (*p == '"' || *p == '\\')
            put(l, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            put(l, "\\u%04x", (unsigned)*p);
        else
            l->buf[l->n++] = (char)*p;
    }
    put(l, "\"");
}

/* The wall clock as 2026-12-03T05:40:00.123Z. */
static void timestamp(char *out, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, len - k, ".%03ldZ", ts.tv_nsec / 1000000L);
}

static void vlog(int level, const mxop__log_ctx_t *ctx, const char *fmt, va_list ap)
{
    if (level < min_level || level < 0 || level > MXOP__LOG_ERROR)
        return;
    char msg[2048];
    int k = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (k < 0)
        msg[0] = '\0';
    char ts[40];
    timestamp(ts, sizeof(ts));
    const char *op = ctx->op != NULL && ctx->op[0] != '\0' ? ctx->op : NULL;
    const char *lib = ctx->library != NULL && ctx->library[0] != '\0' ? ctx->library : NULL;

    line_t l;
    l.n = 0;
    if (format == MXOP__LOG_JSON) {
        put(&l, "{\"ts\":\"%s\",\"level\":\"%s\",\"daemon_pid\":%d", ts, level_names[level],
            (int)getpid());
        if (ctx->session != 0)
            put(&l, ",\"session\":%llu", (unsigned long long)ctx->session);
        if (op != NULL) {
            put(&l, ",\"op\":");
            put_json_string(&l, op);
        }
        if (lib != NULL) {
            put(&l, ",\"library\":");
            put_json_string(&l, lib);
        }
        if (ctx->worker_pid > 0)
            put(&l, ",\"worker_pid\":%d", ctx->worker_pid);
        put(&l, ",\"msg\":");
        put_json_string(&l, msg);
        /* A message too long for the line still ends as valid JSON. */
        if (l.n >= sizeof(l.buf) - 16) {
            l.n = 0;
            put(&l, "{\"ts\":\"%s\",\"level\":\"%s\",\"daemon_pid\":%d,\"msg\":\"(cut)\"", ts,
                level_names[level], (int)getpid());
        }
        put(&l, "}");
    } else {
        put(&l, "mxop-serverd[%d] %s %s", (int)getpid(), level_names[level], ts);
        if (ctx->session != 0)
            put(&l, " session=%llu", (unsigned long long)ctx->session);
        if (op != NULL)
            put_word(&l, "op", op);
        if (lib != NULL)
            put_word(&l, "library", lib);
        if (ctx->worker_pid > 0)
            put(&l, " worker=%d", ctx->worker_pid);
        put(&l, ": ");
        size_t start = l.n;
        put(&l, "%s", msg);
        sanitise(l.buf + start, l.n - start);
    }
    l.buf[l.n++] = '\n';

    /* One write per line, so lines of concurrent writers do not interleave. */
    size_t off = 0;
    while (off < l.n) {
        ssize_t w = write(2, l.buf + off, l.n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

void mxop__log(int level, uint64_t session, const char *op, const char *fmt, ...)
{
    mxop__log_ctx_t ctx = {.session = session, .op = op};
    va_list ap;
    va_start(ap, fmt);
    vlog(level, &ctx, fmt, ap);
    va_end(ap);
}

void mxop__log_ev(int level, const mxop__log_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, ctx, fmt, ap);
    va_end(ap);
}
