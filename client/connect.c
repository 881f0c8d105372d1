/*
 * client/connect.c - mxop_connect and mxop_close: the options, the client
 * and its session (session.c), and the pool of siblings (pool.c) on top.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "client/session_state.h"
#include "common/util.h"

/* The detail of the last failed mxop_connect, per thread: there is no
 * client yet to hold it. */
static _Thread_local char connect_err[MXOP__ERR_MAX];

const char *mxop_connect_error(void)
{
    return connect_err;
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

/* Reads a field of an options struct only when the caller's struct has it. */
#define OPT_HAS(o, field)                                                                          \
    ((o)->struct_size >= offsetof(mxop_connect_opts_t, field) + sizeof((o)->field))

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

    rc = mxop__client_open(path, name, data_path, timeout_ms, connect_timeout_ms, reconnect, &c,
                           connect_err, sizeof connect_err);
    if (rc < 0)
        return rc;
    rc = mxop__pool_init(c, path, name, max_sessions);
    if (rc < 0) {
        mxop__fmt(connect_err, sizeof connect_err, "out of memory setting up the session pool");
        mxop__client_free(c);
        return rc;
    }
    /*
     * The arena's first chunk is made by the first mxop_array_alloc, not
     * here: a session that only uses its own regions (or heap arrays) should
     * not pay for mapping and pre-faulting a chunk in both processes.
     */

    c->err[0] = '\0';
    *out = c;
    return 0;
}

int mxop_data_path(mxop_client_t *c)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int path = c->sess.chan == MXOP__CHAN_MBOX || c->sess.chan == MXOP__CHAN_MBOX_WANTED
                   ? MXOP_DATA_PATH_SHM
                   : MXOP_DATA_PATH_SOCKET;
    pthread_mutex_unlock(&c->lock);
    return path;
}

void mxop_close(mxop_client_t *c)
{
    if (c == NULL)
        return;
    mxop__client_hang_up(c);
    mxop__pool_free(c);
    mxop__client_free(c);
}
