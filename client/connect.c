/*
 * client/connect.c - opening a session with mxop-serverd, and closing it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "shm/call_page.h"
#include "common/util.h"
#include "shm/fdpass.h"

/* The detail of the last failed mxop_connect, per thread: there is no
 * client yet to hold it. */
static _Thread_local char connect_err[MXOP__ERR_MAX];

/* How long mxop_close waits for the daemon to end the session. */
#define CLOSE_WAIT_MS 2000

/* Enough for an OpList of a few hundred ops without leaving the arena. */
#define PBARENA_CAP (256u * 1024)

/* Results are small; the buffer grows for a large one and is kept. */
#define DATA_RX_CAP (16u * 1024)

const char *mxop_connect_error(void)
{
    return connect_err;
}

/*
 * connect() with a deadline.  A Unix socket connects at once or refuses;
 * only a full listen backlog (EAGAIN on a non-blocking socket) is worth
 * waiting for, so that is retried until the deadline.
 */
static int connect_unix(const char *path, int timeout_ms, int *fd_out, char *err, size_t errlen)
{
    struct sockaddr_un addr;
    size_t plen = strlen(path);

    if (plen == 0) {
        mxop__fmt(err, errlen, "socket path is empty");
        return MXOP_EINVAL;
    }
    if (plen >= sizeof addr.sun_path) {
        mxop__fmt(err, errlen, "socket path is too long (%zu bytes, at most %zu): %s", plen,
                  sizeof addr.sun_path - 1, path);
        return MXOP_EINVAL;
    }
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, plen + 1);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        mxop__fmt(err, errlen, "socket: %s", strerror(errno));
        return MXOP_EIO;
    }

    int64_t end = mxop__now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            break;
        int e = errno;
        if (e == EINTR)
            continue;
        if ((e == EAGAIN || e == EINPROGRESS) && mxop__now_ns() < end) {
            if (e == EINPROGRESS) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                int left = (int)((end - mxop__now_ns()) / 1000000) + 1;
                if (poll(&p, 1, left) > 0) {
                    int soerr = 0;
                    socklen_t sl = sizeof soerr;
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                    if (soerr == 0)
                        break;
                    e = soerr;
                    goto fail;
                }
                continue;
            }
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
    fail:
        close(fd);
        if (e == ENOENT || e == ECONNREFUSED || e == ENOTSOCK) {
            mxop__fmt(err, errlen, "no mxop-serverd listening on %s", path);
            return MXOP_EDISCONNECTED;
        }
        if (e == EACCES || e == EPERM) {
            mxop__fmt(err, errlen, "not allowed to connect to %s: %s", path, strerror(e));
            return MXOP_EDENIED;
        }
        if (e == EAGAIN || e == EINPROGRESS) {
            mxop__fmt(err, errlen, "mxop-serverd at %s did not accept within %d ms", path,
                      timeout_ms);
            return MXOP_ETIMEOUT;
        }
        mxop__fmt(err, errlen, "cannot connect to %s: %s", path, strerror(e));
        return MXOP_EDISCONNECTED;
    }

    /* The frame helpers expect a blocking socket with their own deadlines. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        mxop__fmt(err, errlen, "fcntl: %s", strerror(errno));
        close(fd);
        return MXOP_EIO;
    }
    *fd_out = fd;
    return 0;
}

static int hello(mxop_client_t *c, const char *name)
{
    Mxop__Hello body = MXOP__HELLO__INIT;
    body.min_version = MXOP_PROTOCOL_VERSION;
    body.max_version = MXOP_PROTOCOL_VERSION;
    body.client_name = (char *)(name != NULL ? name : "");
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_HELLO;
    req.hello = &body;

    Mxop__Reply *r;
    int rc = mxop__ctl_request(c, &req, NULL, 0, c->connect_timeout_ms, &r, NULL);
    if (rc < 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_HELLO || r->hello == NULL)
        return mxop__fail(c, MXOP_EPROTOCOL, "mxop-serverd answered Hello without a HelloReply");
    if (r->hello->version != MXOP_PROTOCOL_VERSION)
        return mxop__fail(c, MXOP_EVERSION,
                          "mxop-serverd chose protocol version %u; this client speaks %d",
                          r->hello->version, MXOP_PROTOCOL_VERSION);
    return 0;
}

static int open_session(mxop_client_t *c)
{
    Mxop__OpenSession body = MXOP__OPEN_SESSION__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &body;

    Mxop__Reply *r;
    int fd = -1;
    int rc = mxop__ctl_request(c, &req, NULL, 0, c->connect_timeout_ms, &r, &fd);
    if (rc < 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_OPEN_SESSION || r->open_session == NULL) {
        if (fd >= 0)
            close(fd);
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "mxop-serverd answered OpenSession without an OpenSessionReply");
    }
    if (fd < 0)
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "mxop-serverd opened the session without passing its data channel");
    mxop__data_open(c, fd);
    c->session = r->open_session->session;
    c->worker_pid = r->open_session->worker_pid;
    c->generation = r->open_session->generation;
    c->confined = r->open_session->confined;
    return 0;
}

int mxop__session_open(mxop_client_t *c, const char *path, const char *name)
{
    int rc = connect_unix(path, c->connect_timeout_ms, &c->ctl_fd, c->err, sizeof c->err);
    if (rc < 0)
        return rc;
    rc = hello(c, name);
    if (rc < 0)
        return rc;
    rc = open_session(c);
    if (rc < 0)
        return rc;
    /* The mailbox is set up now rather than at the first call, so that the
     * session's path is known from here on (mxop_data_path). */
    mxop__data_attach_now(c);
    return 0;
}

static void client_free(mxop_client_t *c)
{
    mxop__pool_free(c);
    mxop__reconnect_free(c);
    if (c->ctl_fd >= 0)
        close(c->ctl_fd);
    mxop__data_drop(c);
    if (c->call_page != NULL)
        munmap(c->call_page, sizeof(mxop__call_page_t));
    mxop__lease_unmap(&c->lease);
    mxop__rxbuf_free(&c->data_rx);
    free(c->mbox_buf);
    mxop__arena_free_all(c);
    mxop__regions_free(c);
    mxop__ops_free(c);
    mxop__framebuf_free(&c->ctl_fb);
    mxop__framebuf_free(&c->data_fb);
    mxop__pbarena_destroy(&c->pba);
    pthread_mutex_destroy(&c->arena_lock);
    pthread_mutex_destroy(&c->regions_lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int mxop__client_new(int data_path, int32_t timeout_ms, int32_t connect_timeout_ms,
                     mxop_client_t **out)
{
    *out = NULL;
    mxop_client_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return MXOP_ENOMEM;
    c->ctl_fd = -1;
    c->data_fd = -1;
    c->next_req_id = 1;
    c->next_call_id = 1;
    c->timeout_ms = timeout_ms;
    c->connect_timeout_ms = connect_timeout_ms;
    c->data_path = data_path;
    c->data_open_fn = mxop__data_open;
    c->data_drop_fn = mxop__data_drop;
    mxop__callbufs_init(c);
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return MXOP_ENOMEM;
    }
    if (pthread_mutex_init(&c->regions_lock, NULL) != 0 ||
        pthread_mutex_init(&c->arena_lock, NULL) != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return MXOP_ENOMEM;
    }
    int rc = mxop__pbarena_init(&c->pba, PBARENA_CAP);
    if (rc == 0)
        rc = mxop__rxbuf_init(&c->data_rx, DATA_RX_CAP);
    /* Results are small: a header claiming more is refused at once (MXOP__RESULT_MAX). */
    mxop__rxbuf_set_max(&c->data_rx, MXOP__RESULT_MAX);
    if (rc == 0 && data_path == MXOP_DATA_PATH_SHM) {
        c->mbox_buf = malloc(MXOP__MBOX_SLOT_BYTES);
        rc = c->mbox_buf == NULL ? MXOP_ENOMEM : 0;
    }
    if (rc < 0) {
        client_free(c);
        return MXOP_ENOMEM;
    }
    *out = c;
    return 0;
}

/* The data path from $MXOP_DATA_PATH, or the built-in default; MXOP_EINVAL if unknown. */
static int env_data_path(int *path)
{
    const char *e = getenv("MXOP_DATA_PATH");
    if (e == NULL || e[0] == '\0') {
        *path = MXOP__DEFAULT_DATA_PATH;
        return 0;
    }
    if (strcmp(e, "socket") == 0) {
        *path = MXOP_DATA_PATH_SOCKET;
        return 0;
    }
    if (strcmp(e, "shm") == 0) {
        *path = MXOP_DATA_PATH_SHM;
        return 0;
    }
    mxop__fmt(connect_err, sizeof connect_err,
              "MXOP_DATA_PATH is '%.64s'; set it to 'socket' or 'shm' (or leave it unset)", e);
    return MXOP_EINVAL;
}

/* Whether the client reconnects when its daemon goes away: the option, else $MXOP_RECONNECT. */
static int reconnect_on(int32_t opt)
{
    if (opt != MXOP_RECONNECT_DEFAULT)
        return opt == MXOP_RECONNECT_ON;
    const char *e = getenv("MXOP_RECONNECT");
    return !(e != NULL && (strcmp(e, "0") == 0 || strcmp(e, "off") == 0 || strcmp(e, "no") == 0));
}

/* Reads a field of an options struct only when the caller's struct has it. */
#define OPT_HAS(o, field)                                                                          \
    ((o)->struct_size >= offsetof(mxop_connect_opts_t, field) + sizeof((o)->field))

/* How the pool drives its sibling sessions: through the public calls. */
static const mxop__sibling_api_t sibling_api = {
    .connect = mxop_connect,
    .close = mxop_close,
    .load_library = mxop_load_library,
    .op_find = mxop_op_find,
    .forward = mxop_forward,
    .backward = mxop_backward,
    .set_timeout = mxop_set_timeout,
};

int mxop_connect(const char *socket_path, const mxop_connect_opts_t *opts, mxop_client_t **out)
{
    int rc;
    mxop_client_t *c = NULL;
    int32_t timeout_ms = MXOP__DEFAULT_TIMEOUT_MS;
    int32_t connect_timeout_ms = MXOP__DEFAULT_CONNECT_TIMEOUT_MS;
    const char *name = NULL;
    int data_path = MXOP_DATA_PATH_DEFAULT;
    int32_t max_sessions = 1;
    int32_t reconnect = MXOP_RECONNECT_DEFAULT;

    connect_err[0] = '\0';
    if (out == NULL) {
        mxop__fmt(connect_err, sizeof connect_err, "mxop_connect: out is NULL");
        return MXOP_EINVAL;
    }
    *out = NULL;

    if (opts != NULL) {
        if (opts->struct_size < sizeof opts->struct_size) {
            mxop__fmt(
                connect_err, sizeof connect_err,
                "mxop_connect: opts->struct_size is %u; set it to sizeof(mxop_connect_opts_t)",
                opts->struct_size);
            return MXOP_EINVAL;
        }
        if (OPT_HAS(opts, timeout_ms) && opts->timeout_ms != 0)
            timeout_ms = opts->timeout_ms;
        if (OPT_HAS(opts, connect_timeout_ms) && opts->connect_timeout_ms != 0)
            connect_timeout_ms = opts->connect_timeout_ms;
        if (OPT_HAS(opts, client_name))
            name = opts->client_name;
        if (OPT_HAS(opts, data_path))
            data_path = opts->data_path;
        if (OPT_HAS(opts, max_sessions) && opts->max_sessions != 0)
            max_sessions = opts->max_sessions;
        if (OPT_HAS(opts, reconnect))
            reconnect = opts->reconnect;
        if (reconnect < MXOP_RECONNECT_DEFAULT || reconnect > MXOP_RECONNECT_OFF) {
            mxop__fmt(connect_err, sizeof connect_err,
                      "mxop_connect: opts->reconnect is %d; use MXOP_RECONNECT_DEFAULT, _ON or "
                      "_OFF",
                      (int)reconnect);
            return MXOP_EINVAL;
        }
        if (max_sessions < 1 || max_sessions > MXOP__POOL_MAX + 1) {
            mxop__fmt(connect_err, sizeof connect_err,
                      "mxop_connect: opts->max_sessions is %d; use 0 or 1 (one session) up to %d",
                      (int)max_sessions, MXOP__POOL_MAX + 1);
            return MXOP_EINVAL;
        }
        if (data_path < MXOP_DATA_PATH_DEFAULT || data_path > MXOP_DATA_PATH_SHM) {
            mxop__fmt(connect_err, sizeof connect_err,
                      "mxop_connect: opts->data_path is %d; use MXOP_DATA_PATH_DEFAULT, _SOCKET "
                      "or _SHM",
                      (int)data_path);
            return MXOP_EINVAL;
        }
        if (timeout_ms < 0 || connect_timeout_ms < 0) {
            mxop__fmt(connect_err, sizeof connect_err,
                      "mxop_connect: negative timeout (timeout_ms %d, connect_timeout_ms %d)",
                      (int)timeout_ms, (int)connect_timeout_ms);
            return MXOP_EINVAL;
        }
    }

    if (data_path == MXOP_DATA_PATH_DEFAULT) {
        rc = env_data_path(&data_path);
        if (rc < 0)
            return rc;
    }

    const char *path = socket_path != NULL ? socket_path : getenv("MXOP_SOCKET");
    if (path == NULL || path[0] == '\0') {
        mxop__fmt(connect_err, sizeof connect_err, "no socket path: pass one or set MXOP_SOCKET");
        return MXOP_EINVAL;
    }

    rc = mxop__client_new(data_path, timeout_ms, connect_timeout_ms, &c);
    if (rc < 0) {
        mxop__fmt(connect_err, sizeof connect_err, "out of memory");
        return rc;
    }

    rc = mxop__session_open(c, path, name);
    if (rc < 0)
        goto err;
    rc = mxop__reconnect_init(c, path, name, reconnect_on(reconnect));
    if (rc < 0) {
        mxop__fmt(connect_err, sizeof connect_err, "out of memory");
        goto err_msg_set;
    }
    rc = mxop__pool_init(c, path, name, max_sessions, &sibling_api);
    if (rc < 0) {
        mxop__fmt(connect_err, sizeof connect_err, "out of memory setting up the session pool");
        goto err_msg_set;
    }
    /*
     * The arena's first chunk is made by the first mxop_array_alloc, not
     * here: a session that only uses its own regions (or heap arrays) should
     * not pay for mapping and pre-faulting a chunk in both processes.
     */

    c->err[0] = '\0';
    *out = c;
    return 0;

err:
    if (connect_err[0] == '\0')
        mxop__fmt(connect_err, sizeof connect_err, "%s", c->err);
err_msg_set:
    client_free(c);
    return rc;
}

/*
 * Tells the daemon the session is over (EOF on the control socket) and
 * waits, briefly, for it to close its end: by then it has stopped the
 * worker and dropped the session's regions, so a process that closes a
 * client and looks at the daemon sees the session gone.
 */
static void hang_up(mxop_client_t *c)
{
    uint8_t buf[4096];
    if (c->ctl_fd < 0 || shutdown(c->ctl_fd, SHUT_WR) < 0)
        return;
    int64_t end = mxop__now_ns() + (int64_t)CLOSE_WAIT_MS * 1000000;
    for (;;) {
        int64_t left = end - mxop__now_ns();
        if (left <= 0)
            return;
        struct pollfd p = {.fd = c->ctl_fd, .events = POLLIN};
        int n = poll(&p, 1, (int)((left + 999999) / 1000000));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        /* Whatever still arrives (an event and its descriptor) is dropped. */
        int fds[MXOP__FRAME_MAX_FDS], nfds = 0;
        ssize_t r = mxop__recv_fds(c->ctl_fd, buf, sizeof buf, fds, MXOP__FRAME_MAX_FDS, &nfds);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (r == 0 || (r < 0 && r != -EINTR && r != -EAGAIN))
            return;
    }
}

int mxop_data_path(mxop_client_t *c)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int path = c->mbox_on || c->mbox_wanted ? MXOP_DATA_PATH_SHM : MXOP_DATA_PATH_SOCKET;
    pthread_mutex_unlock(&c->lock);
    return path;
}

void mxop_close(mxop_client_t *c)
{
    if (c == NULL)
        return;
    mxop__shared_forget(c); /* the heap forgets the blocks it registered with this session */
    /* Closing the control socket is what ends the session: the daemon
     * kills the worker and drops the regions when it sees the EOF. */
    if (!c->ctl_dead)
        hang_up(c);
    client_free(c);
}
