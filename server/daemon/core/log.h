/*
 * server/daemon/core/log.h - the daemon's log: one line per event on stderr.
 *
 *     mxop-serverd[PID] LEVEL TIMESTAMP[ session=N][ op=NAME][ library=L][ worker=PID]: message
 *
 * or, with --log-format json, one JSON object a line: ts, level,
 * daemon_pid, and where known session, op, library, worker_pid; then msg.
 *
 * Only the daemon logs; the libraries it shares code with return errors.
 */
#ifndef MXOP_SERVER_DAEMON_LOG_H
#define MXOP_SERVER_DAEMON_LOG_H

#include <stddef.h>
#include <stdint.h>

enum mxop__log_level {
    MXOP__LOG_DEBUG = 0,
    MXOP__LOG_INFO = 1,
    MXOP__LOG_WARN = 2,
    MXOP__LOG_ERROR = 3,
};

enum mxop__log_format { MXOP__LOG_TEXT = 0, MXOP__LOG_JSON = 1 };

/* Parses "text" or "json".  Returns 0 or MXOP_EINVAL. */
int mxop__log_parse_format(const char *s, int *format);
void mxop__log_set_format(int format);

/* What an event is about, where known (0, NULL or "" when not). */
typedef struct mxop__log_ctx {
    uint64_t session;
    const char *op;
    const char *library;
    int worker_pid;
} mxop__log_ctx_t;

/*
 * Sends the log to `path` (appended, created 0640) instead of stderr: the
 * file becomes fd 2.  mxop__log_reopen opens the same path again, after
 * logrotate moved the file (SIGUSR1).  Return 0, or MXOP_EIO with a
 * sentence in err (the log then stays where it was).
 */
int mxop__log_open_file(const char *path, char *err, size_t errlen);
int mxop__log_reopen(char *err, size_t errlen);

/* Parses "debug", "info", "warn" or "error".  Returns 0 or MXOP_EINVAL. */
int mxop__log_parse_level(const char *s, int *level);
void mxop__log_set_level(int level);
int mxop__log_enabled(int level);

/*
 * Writes one line: `session` 0 and `op` NULL or "" are left out.  Control
 * characters in the message are replaced so that an event stays one line.
 */
void mxop__log(int level, uint64_t session, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same with every field of `ctx`. */
void mxop__log_ev(int level, const mxop__log_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define MXOP__LOGD(session, op, ...) mxop__log(MXOP__LOG_DEBUG, (session), (op), __VA_ARGS__)
#define MXOP__LOGI(session, op, ...) mxop__log(MXOP__LOG_INFO, (session), (op), __VA_ARGS__)
#define MXOP__LOGW(session, op, ...) mxop__log(MXOP__LOG_WARN, (session), (op), __VA_ARGS__)
#define MXOP__LOGE(session, op, ...) mxop__log(MXOP__LOG_ERROR, (session), (op), __VA_ARGS__)

#endif /* MXOP_SERVER_DAEMON_LOG_H */
