/*
 * server/daemon/worker/worker_output.c - a worker's stdout and stderr, logged by
 * the daemon and never trusted.
 *
 * A library writes what it likes to fds 1 and 2.  Inherited as they were,
 * those were the daemon's own: a library could write lines that read as
 * the daemon's ("mxop-serverd[1] error: ..."), terminal escapes, or
 * megabytes a second into the daemon's log.  Instead each worker gets a
 * pipe per stream, read here, and every line it writes becomes one log
 * line of the daemon's:
 *
 *     mxop-serverd[PID] info session=N: worker 1234 stdout [lib.so,...]: <line>
 *
 * (the libraries the session has loaded: the daemon cannot tell which of
 * them wrote the line, since they share the worker),
 * with every byte outside printable ASCII, and the backslash, written as
 * \xHH: a line cannot start a line of its own, move the cursor or pass for
 * anything but a worker's output.  Each stream may log
 * MXOP__WORKER_OUTPUT_LINES_PER_S lines a second (a token bucket holding
 * up to MXOP__WORKER_OUTPUT_BURST); what is over is read and dropped, and
 * the count of dropped lines is logged with the next line let through and
 * at the end.  The pipe is always drained, so a flooding library never
 * blocks on a full pipe and the daemon's work stays bounded by the bytes
 * read.  The reader lives until every writer (the worker and anything it
 * started) has closed the pipe, then frees itself.
 */
#include "server/daemon/worker/worker_output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/core/daemon.h"
#include "server/daemon/worker/worker.h"

typedef struct stream {
    uv_pipe_t pipe;
    struct mxop__worker_output *owner;
    const char *name; /* "stdout" or "stderr" */
    char line[MXOP__WORKER_OUTPUT_LINE_MAX + 1];
    size_t len;
    bool cut;      /* the current line is over the maximum: the rest is dropped */
    double tokens; /* lines it may log now */
    uint64_t last; /* uv_now when the tokens were counted */
    uint64_t dropped;
    bool closed;                                  /* EOF seen, the handle closing */
    char last_line[MXOP__WORKER_OUTPUT_LAST_MAX]; /* the last whole line, escaped (logged or not) */
    char buf[16384];
} stream_t;

struct mxop__worker_output {
    uint64_t session;
    pid_t pid;
    int open;  /* streams not yet closed */
    bool held; /* by its worker, until the worker's exit was reported */
    stream_t s[2];
};

/*
 * The libraries of each session that has loaded any, kept here by session
 * id (the daemon's loop is its only thread), so that a reader, which may
 * outlive its worker, never points into a session.
 */
typedef struct libnote {
    struct libnote *next;
    uint64_t session;
    char *libs;
} libnote_t;

static libnote_t *notes;

int mxop__worker_output_set_libs(uint64_t session, const char *libs)
{
    libnote_t **pp = &notes;
    while (*pp != NULL && (*pp)->session != session)
        pp = &(*pp)->next;
    if (libs == NULL || libs[0] == '\0') {
        if (*pp != NULL) {
            libnote_t *n = *pp;
            *pp = n->next;
            free(n->libs);
            free(n);
        }
        return 0;
    }
    char *copy = strdup(libs);
    if (copy == NULL)
        return MXOP_ENOMEM;
    if (*pp == NULL) {
        libnote_t *n = calloc(1, sizeof(*n));
        if (n == NULL) {
            free(copy);
            return MXOP_ENOMEM;
        }
        n->session = session;
        n->next = notes;
        notes = n;
        pp = &notes;
    }
    free((*pp)->libs);
    (*pp)->libs = copy;
    return 0;
}

static const char *libs_of(uint64_t session)
{
    for (const libnote_t *n = notes; n != NULL; n = n->next)
        if (n->session == session)
            return n->libs;
    return NULL;
}

/* Writes `n` bytes of `in` with every byte outside printable ASCII, and the backslash, as \xHH. */
static size_t escape(char *out, const char *in, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '\\') {
            out[at++] = '\\';
            out[at++] = 'x';
            out[at++] = hex[ch >> 4];
            out[at++] = hex[ch & 15];
        } else {
            out[at++] = (char)ch;
        }
    }
    out[at] = '\0';
    return at;
}

void mxop__worker_output_set_pid(mxop__worker_output_t *o, pid_t pid)
{
    if (o != NULL)
        o->pid = pid;
}

static void say_dropped(stream_t *st)
{
    if (st->dropped == 0)
        return;
    MXOP__LOGW(st->owner->session, NULL,
               "worker %d %s: %llu lines dropped (over %d lines a second)", (int)st->owner->pid,
               st->name, (unsigned long long)st->dropped, MXOP__WORKER_OUTPUT_LINES_PER_S);
    st->dropped = 0;
}

/* Logs the line gathered so far (escaped), or counts it as dropped. */
static void emit(stream_t *st)
{
    {
        /* Kept whatever the rate limit says: the exit report may need it (worker.c). */
        char esc[MXOP__WORKER_OUTPUT_LAST_MAX * 4 + 1];
        size_t n =
            st->len < MXOP__WORKER_OUTPUT_LAST_MAX - 1 ? st->len : MXOP__WORKER_OUTPUT_LAST_MAX - 1;
        escape(esc, st->line, n);
        mxop__fmt(st->last_line, sizeof(st->last_line), "%s", esc);
    }
    uv_loop_t *loop = st->pipe.loop;
    uint64_t now = uv_now(loop);
    st->tokens += (double)(now - st->last) * MXOP__WORKER_OUTPUT_LINES_PER_S / 1000.0;
    if (st->tokens > MXOP__WORKER_OUTPUT_BURST)
        st->tokens = MXOP__WORKER_OUTPUT_BURST;
    st->last = now;
    if (st->tokens < 1) {
        st->dropped++;
    } else {
        st->tokens -= 1;
        say_dropped(st);
        char esc[MXOP__WORKER_OUTPUT_LINE_MAX * 4 + 1];
        escape(esc, st->line, st->len);
        /* The session's libraries, escaped too (their names are the client's), at most 255 bytes.
         */
        char lib_esc[256 * 4 + 4] = "";
        const char *libs = libs_of(st->owner->session);
        if (libs != NULL) {
            size_t n = strlen(libs);
            lib_esc[0] = ' ';
            lib_esc[1] = '[';
            size_t at = 2 + escape(lib_esc + 2, libs, n < 255 ? n : 255);
            lib_esc[at++] = ']';
            lib_esc[at] = '\0';
        }
        mxop__log_ctx_t ctx = {.session = st->owner->session, .worker_pid = (int)st->owner->pid};
        mxop__log_ev(MXOP__LOG_INFO, &ctx, "worker %d %s%s: %s%s", (int)st->owner->pid, st->name,
                     lib_esc, esc, st->cut ? " [cut]" : "");
    }
    st->len = 0;
    st->cut = false;
}

static void take(stream_t *st, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            emit(st);
        } else if (st->len < MXOP__WORKER_OUTPUT_LINE_MAX) {
            st->line[st->len++] = p[i];
        } else {
            st->cut = true;
        }
    }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    stream_t *st = h->data;
    buf->base = st->buf;
    buf->len = sizeof(st->buf);
}

static void closed_cb(uv_handle_t *h)
{
    stream_t *st = h->data;
    mxop__worker_output_t *o = st->owner;
    if (--o->open == 0 && !o->held)
        free(o);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    stream_t *st = s->data;
    if (n > 0) {
        take(st, buf->base, (size_t)n);
        return;
    }
    if (n == 0 || n == UV_EAGAIN || n == UV_EINTR)
        return;
    /* EOF (every writer is gone) or an error: the last partial line, the count, the end. */
    if (st->len > 0)
        emit(st);
    say_dropped(st);
    uv_read_stop(s);
    st->closed = true;
    uv_close((uv_handle_t *)s, closed_cb);
}

void mxop__worker_output_drain(mxop__worker_output_t *o, char *last_err, size_t len)
{
    if (len > 0)
        last_err[0] = '\0';
    if (o == NULL)
        return;
    for (int i = 0; i < 2; i++) {
        stream_t *st = &o->s[i];
        uv_os_fd_t fd;
        if (st->closed || uv_fileno((uv_handle_t *)&st->pipe, &fd) != 0)
            continue;
        /*
         * The loop may not have read the last bytes yet (the exit can be
         * seen first): read what is there now (the descriptor is
         * non-blocking), bounded, and the partial line with it.
         */
        for (int rounds = 0; rounds < 64; rounds++) {
            ssize_t n = read(fd, st->buf, sizeof(st->buf));
            if (n > 0) {
                take(st, st->buf, (size_t)n);
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        if (st->len > 0)
            emit(st);
    }
    if (len > 0)
        mxop__fmt(last_err, len, "%s", o->s[1].last_line);
}

void mxop__worker_output_release(mxop__worker_output_t *o)
{
    if (o == NULL)
        return;
    o->held = false;
    if (o->open == 0)
        free(o);
}

int mxop__worker_output_start(uv_loop_t *loop, uint64_t session, int fds[2],
                              mxop__worker_output_t **out)
{
    *out = NULL;
    fds[0] = fds[1] = -1;
    mxop__worker_output_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return MXOP_EINTERNAL;
    o->session = session;
    o->held = true;
    int p[2][2] = {{-1, -1}, {-1, -1}};
    for (int i = 0; i < 2; i++) {
        if (pipe2(p[i], O_CLOEXEC) != 0)
            goto fail;
    }
    for (int i = 0; i < 2; i++) {
        stream_t *st = &o->s[i];
        st->owner = o;
        st->name = i == 0 ? "stdout" : "stderr";
        st->tokens = MXOP__WORKER_OUTPUT_BURST;
        st->last = uv_now(loop);
        /* Once initialised the handle must be closed through uv_close: from here on it is. */
        if (uv_pipe_init(loop, &st->pipe, 0) != 0)
            goto fail_handles;
        st->pipe.data = st;
        o->open++;
        if (uv_pipe_open(&st->pipe, p[i][0]) != 0)
            goto fail_handles;
        p[i][0] = -1;
        if (uv_read_start((uv_stream_t *)&st->pipe, alloc_cb, read_cb) != 0)
            goto fail_handles;
    }
    fds[0] = p[0][1];
    fds[1] = p[1][1];
    *out = o;
    return 0;

fail_handles:
    o->held = false;
    for (int i = 0; i < 2; i++) {
        if (p[i][0] >= 0)
            close(p[i][0]);
        if (p[i][1] >= 0)
            close(p[i][1]);
    }
    if (o->open == 0) {
        free(o);
        return MXOP_EINTERNAL;
    }
    for (int i = 0; i < o->open; i++)
        uv_close((uv_handle_t *)&o->s[i].pipe, closed_cb);
    return MXOP_EINTERNAL;
fail:
    for (int i = 0; i < 2; i++) {
        if (p[i][0] >= 0)
            close(p[i][0]);
        if (p[i][1] >= 0)
            close(p[i][1]);
    }
    free(o);
    return MXOP_EINTERNAL;
}
