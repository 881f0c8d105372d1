/*
 * common/util.h - small helpers linked into every mxop binary.
 */
#ifndef MXOP_COMMON_UTIL_H
#define MXOP_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "mxop/errors.h"

/** Internal invariants only; never for input (bad input gets an error code). */
#define MXOP_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            mxop__assert_fail(#cond, __FILE__, __LINE__);                                          \
    } while (0)

_Noreturn void mxop__assert_fail(const char *expr, const char *file, int line);

/** CLOCK_MONOTONIC in nanoseconds. */
int64_t mxop__now_ns(void);

/** snprintf into a fixed buffer that never fails or overflows (truncates). */
void mxop__fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/** "SIGSEGV" for 11, "SIG?" for unknown. */
const char *mxop__signal_name(int sig);

#endif /* MXOP_COMMON_UTIL_H */
