/*
 * tests/plugins/deadlock_loop.c - a library that deadlocks the worker's
 * serving loop between calls, as a sampling profiler or a garbage
 * collector with a "stop the world" signal can: its op returns correctly,
 * and a background thread it started then takes a lock and signals the
 * worker's main thread, whose handler waits for that same lock (taking a
 * mutex in a signal handler is the library's bug).  The worker then burns
 * no CPU and names no call: only a liveness probe can tell that it no
 * longer serves.
 *
 *   deadlock_after  copies its 1 input to its 1 output, then deadlocks the
 *                   worker's main thread about 200 ms later
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "mxop/op.h"

MXOP_PLUGIN("deadlock_loop", "1.0");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t main_thread;
static int started;

static void on_sample(int sig)
{
    (void)sig;
    /* Waits for the lock the sampler thread holds while it waits for this handler. */
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
}

static void *sampler(void *arg)
{
    (void)arg;
    usleep(200 * 1000); /* the call's result has gone back by now */
    pthread_mutex_lock(&lock);
    pthread_kill(main_thread, SIGUSR1);
    for (;;)
        pause(); /* "waits for the sample" for ever, holding the lock */
    return NULL;
}

static int forward(mxop_ctx_t *ctx, int n_in, const mxop_tensor_t *in, int n_out,
                   mxop_tensor_t *out)
{
    (void)ctx, (void)n_in, (void)n_out;
    if (out[0].req != MXOP_REQ_NULL && in[0].size > 0)
        memcpy(out[0].data, in[0].data, in[0].size * mxop_dtype_size(in[0].dtype));
    if (!started) {
        started = 1;
        main_thread = pthread_self();
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sample;
        sigaction(SIGUSR1, &sa, NULL);
        pthread_t t;
        if (pthread_create(&t, NULL, sampler, NULL) == 0)
            pthread_detach(t);
    }
    return 0;
}

MXOP_PLUGIN_INIT(ctx, host)
{
    mxop_op_def_t def = {
        .struct_size = sizeof(mxop_op_def_t),
        .name = "deadlock_after",
        .description = "deadlocks the worker's loop after its call (tests/plugins/deadlock_loop.c)",
        .num_inputs = 1,
        .num_outputs = 1,
        .forward = forward,
    };
    return host->register_op(ctx, &def);
}
