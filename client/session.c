/*
 * client/session.c - a client and its one session, without a pool:
 * allocating the client, opening its session (session_open.c), ending it
 * and freeing the client.  connect.c (mxop_connect,
 * mxop_close) builds on it with the options and the pool; the pool opens
 * its siblings here, so that a sibling never goes through the public
 * calls that would come back to the pool.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "client/session_state.h"
#include "shm/call_page.h"
#include "common/util.h"
#include "wire/fdpass.h"

/* How long mxop_close waits for the daemon to end the session. */
#define CLOSE_WAIT_MS 2000

/* Enough for an OpList of a few hundred ops without leaving the arena. */
#define PBARENA_CAP (256u * 1024)

/* Results are small; the buffer grows for a large one and is kept. */
#define DATA_RX_CAP (16u * 1024)

void mxop__client_free(mxop_client_t *c)
{
    mxop__reconnect_free(c);
    mxop__ctlchan_free(&c->ctl);
    mxop__sess_to(c, MXOP__SESS_CLOSED, -1, 0, NULL);
    if (c->call_page != NULL)
        munmap(c->call_page, sizeof(mxop__call_page_t));
    mxop__lease_unmap(&c->lease);
    mxop__rxbuf_free(&c->data_rx);
    free(c->mbox_buf);
    mxop__arena_free_all(c);
    mxop__regions_free(c);
    mxop__ops_free(c);
    mxop__framebuf_free(&c->data_fb);
    mxop__pbarena_destroy(&c->pba);
    pthread_mutex_destroy(&c->arena_lock);
    pthread_mutex_destroy(&c->libs_lock);
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
    mxop__ctlchan_init(&c->ctl, &c->pba);
    mxop__sess_to(c, MXOP__SESS_OPENING, -1, 0, NULL);
    c->next_call_id = 1;
    c->timeout_ms = timeout_ms;
    c->connect_timeout_ms = connect_timeout_ms;
    c->data_path = data_path;
    mxop__callbufs_init(c);
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return MXOP_ENOMEM;
    }
    if (pthread_mutex_init(&c->regions_lock, NULL) != 0 ||
        pthread_mutex_init(&c->arena_lock, NULL) != 0 ||
        pthread_mutex_init(&c->libs_lock, NULL) != 0) {
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
        mxop__client_free(c);
        return MXOP_ENOMEM;
    }
    *out = c;
    return 0;
}

/* Whether the client reconnects when its daemon goes away: the option, else $MXOP_RECONNECT. */
static int reconnect_on(int32_t opt)
{
    if (opt != MXOP_RECONNECT_DEFAULT)
        return opt == MXOP_RECONNECT_ON;
    const char *e = getenv("MXOP_RECONNECT");
    return !(e != NULL && (strcmp(e, "0") == 0 || strcmp(e, "off") == 0 || strcmp(e, "no") == 0));
}

int mxop__client_open(const char *path, const char *name, int data_path, int32_t timeout_ms,
                      int32_t connect_timeout_ms, int32_t reconnect, mxop_client_t **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    mxop_client_t *c = NULL;
    int rc = mxop__client_new(data_path, timeout_ms, connect_timeout_ms, &c);
    if (rc < 0) {
        mxop__fmt(err, errlen, "out of memory");
        return rc;
    }
    rc = mxop__session_open(c, path, name);
    if (rc < 0) {
        mxop__fmt(err, errlen, "%s", c->err);
        goto err;
    }
    rc = mxop__reconnect_init(c, path, name, reconnect_on(reconnect));
    if (rc < 0) {
        mxop__fmt(err, errlen, "out of memory");
        goto err;
    }
    *out = c;
    return 0;

err:
    mxop__client_free(c);
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
    if (c->ctl.fd < 0 || shutdown(c->ctl.fd, SHUT_WR) < 0)
        return;
    int64_t end = mxop__now_ns() + (int64_t)CLOSE_WAIT_MS * 1000000;
    for (;;) {
        int64_t left = end - mxop__now_ns();
        if (left <= 0)
            return;
        struct pollfd p = {.fd = c->ctl.fd, .events = POLLIN};
        int n = poll(&p, 1, (int)((left + 999999) / 1000000));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        /* Whatever still arrives (an event and its descriptor) is dropped. */
        int fds[MXOP__FRAME_MAX_FDS], nfds = 0;
        ssize_t r = mxop__recv_fds(c->ctl.fd, buf, sizeof buf, fds, MXOP__FRAME_MAX_FDS, &nfds);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (r == 0 || (r < 0 && r != -EINTR && r != -EAGAIN))
            return;
    }
}

void mxop__client_hang_up(mxop_client_t *c)
{
    mxop__shared_forget(c); /* the heap forgets the blocks it registered with this session */
    /* Closing the control socket is what ends the session: the daemon
     * kills the worker and drops the regions when it sees the EOF. */
    if (c->sess.state != MXOP__SESS_DEAD)
        hang_up(c);
}

int mxop__client_set_timeout(mxop_client_t *c, int32_t timeout_ms)
{
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    if (timeout_ms <= 0)
        rc = mxop__fail(c, MXOP_EINVAL, "timeout_ms must be > 0, got %d", (int)timeout_ms);
    else
        c->timeout_ms = timeout_ms;
    pthread_mutex_unlock(&c->lock);
    return rc;
}
