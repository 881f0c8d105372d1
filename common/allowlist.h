/*
 * common/allowlist.h - the library allowlist file, parsed the same way by
 * the daemon (which checks it at start) and the worker (which reads it at
 * every load, so that an edited file takes effect at the next load).
 *
 * One library a line: its path relative to the plugin directory, blanks,
 * and the SHA-256 of the file as 64 hexadecimal digits, and optionally the
 * word `trusted` (the library keeps the zero-copy path under strict, as
 * with --trusted-library; docs/security.md).  Any other third field is an
 * error naming its line.  Blank lines and lines starting with '#' are
 * ignored.  A name listed twice is an error.
 *
 *     # name      sha256                                                            [trusted]
 *     relu.so     9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
 *     conv.so     2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae  trusted
 */
#ifndef MXOP_COMMON_ALLOWLIST_H
#define MXOP_COMMON_ALLOWLIST_H

#include <stddef.h>

/* The most bytes an allowlist file may have. */
#define MXOP__ALLOWLIST_MAX_BYTES (1 << 20)

/**
 * Reads the file at `path` (NUL-terminated, at most MXOP__ALLOWLIST_MAX_BYTES)
 * into a malloc'd buffer.  Returns 0, or MXOP_EIO / MXOP_ELIMIT / MXOP_ENOMEM
 * with a sentence in err.
 */
int mxop__allowlist_read(const char *path, char **text, char *err, size_t errlen);

/**
 * Looks `name` up in `text`, checking every line's syntax on the way.
 * Returns 1 with the digest (lower case) in expected[65], its line in
 * *line and (when `trusted` is not NULL) whether the line says `trusted`
 * in *trusted, 0 when the name is not listed, or MXOP_EINVAL with a
 * sentence naming the line that is wrong.  name NULL: only checks the
 * syntax.
 */
int mxop__allowlist_find(const char *text, const char *name, char expected[65], int *line,
                         int *trusted, char *err, size_t errlen);

#endif /* MXOP_COMMON_ALLOWLIST_H */
