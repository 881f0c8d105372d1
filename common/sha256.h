/*
 * common/sha256.h - SHA-256 of an open file: the worker checks libraries
 * against the allowlist with it, the daemon and `mxop load` name a
 * library's version by it (hot reload).
 */
#ifndef MXOP_COMMON_SHA256_H
#define MXOP_COMMON_SHA256_H

/**
 * SHA-256 of everything `fd` reads from offset 0 (common/sha256.c), as 64
 * lower-case hex digits and a NUL.  Returns 0 or -errno.
 */
int mxop__sha256_fd(int fd, char hex[65]);

#endif /* MXOP_COMMON_SHA256_H */
