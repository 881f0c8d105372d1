/*
 * server/daemon/log.c - leveled, one-line-per-event logging to stderr.
 */
#include "server/daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mxop/errors.h"

static int min_level = MXOP__LOG_INFO;

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

/* Keeps one event on one line even when a message quotes a plugin's text. */
static void sanitise(char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f)
            s[i] = '?';
    }
}

void mxop__log(int level, uint64_t session, const char *op, const char *fmt, ...)
{
    if (level < min_level || level < 0 || level > MXOP__LOG_ERROR)
        return;

    char line[2048];
    size_t n = 0;
    int k = snprintf(line, sizeof(line), "mxop-serverd[%d] %s", (int)getpid(), level_names[level]);
    if (k > 0)
        n = (size_t)k;
    if (session != 0 && n < sizeof(line)) {
        k = snprintf(line + n, sizeof(line) - n, " session=%llu", (unsigned long long)session);
        if (k > 0)
            n += (size_t)k;
    }
    if (op != NULL && op[0] != '\0' && n < sizeof(line)) {
        size_t start = n + 4;
        k = snprintf(line + n, sizeof(line) - n, " op=%s", op);
        if (k > 0) {
            n += (size_t)k;
            if (n > sizeof(line) - 1)
                n = sizeof(line) - 1;
            /* Op names come from plugins: no spaces or control characters in the key. */
            for (size_t i = start; i < n; i++)
                if ((unsigned char)line[i] <= 0x20 || line[i] == 0x7f)
                    line[i] = '_';
        }
    }
    if (n < sizeof(line)) {
        k = snprintf(line + n, sizeof(line) - n, ": ");
        if (k > 0)
            n += (size_t)k;
    }
    if (n < sizeof(line) - 1) {
        size_t start = n;
        va_list ap;
        va_start(ap, fmt);
        k = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
        va_end(ap);
        if (k > 0)
            n += (size_t)k;
        if (n > sizeof(line) - 2)
            n = sizeof(line) - 2;
        sanitise(line + start, n - start);
    }
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n++] = '\n';

    /* One write per line, so lines of concurrent writers do not interleave. */
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(2, line + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}
