/*
 * common/util.c - clocks, bounded formatting, signal names, assertions.
 */
#include "common/util.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void mxop__assert_fail(const char *expr, const char *file, int line)
{
    /* An internal invariant broke: this is a bug in mxop, not bad input. */
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "mxop: internal assertion failed: %s (%s:%d)\n", expr, file,
                     line);
    if (n > 0) {
        ssize_t w = write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
        (void)w;
    }
    abort();
}

int64_t mxop__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void mxop__fmt(char *buf, size_t len, const char *fmt, ...)
{
    if (len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0)
        buf[0] = '\0';
}

const char *mxop__signal_name(int sig)
{
    switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "SIG?";
    }
}
