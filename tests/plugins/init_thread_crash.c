/*
 * tests/plugins/init_thread_crash.c - an init that starts a thread which
 * segfaults 30 ms later: the load itself succeeds, and every worker the
 * library is replayed into dies soon after it starts, before serving any
 * call.  The daemon must back off and then give up, not respawn for ever.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "mxop/op.h"

MXOP_PLUGIN("init_thread_crash", "1.0");

/* volatile: read at run time, so the store is neither dropped nor flagged by the compiler. */
static int *volatile bad_pointer;

static void *crash_soon(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 30 * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    *bad_pointer = 42;
    return NULL;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, crash_soon, NULL);
    pthread_attr_destroy(&attr);
    return rc == 0 ? 0 : host->set_error(ctx, MXOP_ELIB_INIT, "pthread_create failed");
}
