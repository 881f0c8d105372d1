/*
 * tests/test_soak.c - many sessions calling ops while workers are killed
 * from outside.
 *
 * Several client threads, each with its own session, call ops and check
 * every result, for a bounded time (MXOP_SOAK_SECONDS, default 15, at most
 * 60) and a bounded number of calls; meanwhile a killer thread SIGKILLs a
 * random worker of the daemon (live worker or spare) every 20-120 ms.
 * Every call must return either a correct result or a crash or timeout
 * error: never a wrong result, never another error, never a hang (each
 * call is timed against its deadline plus the client's grace), never a
 * lost reply.  Afterwards the daemon is alive, serves a new session, and
 * its descriptors and memfds are back where they were.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "harness.h"

#define CLIENTS 4
#define MAX_CALLS_PER_CLIENT 20000
/* A call's deadline, and the most any call may take: deadline + grace (5 s) + slack. */
#define CALL_TIMEOUT_MS 2000
#define CALL_BOUND_MS (CALL_TIMEOUT_MS + 5000 + 3000)

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(soak, .init = setup, .fini = teardown, .timeout = 120);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static atomic_int stop;
static atomic_int ready; /* clients set up: the killing starts */

struct client {
    int index;
    unsigned seed;
    int calls, ok, crashed, timeouts;
    int bad; /* wrong results, other errors, overlong calls */
    char why[512];
    pthread_t thread;
};

static void fail_once(struct client *cl, const char *fmt, const char *a, const char *b, double v)
{
    if (cl->bad++ == 0)
        snprintf(cl->why, sizeof(cl->why), fmt, a, b, v);
}

static void *client_loop(void *arg)
{
    struct client *cl = arg;
    const char *libs[] = {"relu.so", "crash.so", NULL};
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    const mxop_op_t *relu = mxt_op(c, "relu");
    const mxop_op_t *identity = mxt_op(c, "identity");
    const mxop_op_t *sleep_op = mxt_op(c, "sleep");
    const mxop_op_t *segv = mxt_op(c, "segv");
    int64_t s[] = {512};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, (unsigned)cl->index + 1, &x);
    mxt_array(c, MXOP_F32, 1, s, 99, &y);
    float saved[512];
    memcpy(saved, x.data, sizeof(saved));
    const char *sleep_attrs[] = {"ms", "3", NULL};
    atomic_fetch_add(&ready, 1);

    while (!atomic_load(&stop) && cl->calls < MAX_CALLS_PER_CLIENT) {
        unsigned r = (unsigned)rand_r(&cl->seed) % 100;
        const mxop_op_t *op = r < 45 ? relu : r < 85 ? identity : r < 97 ? sleep_op : segv;
        mxop_call_t call = {.struct_size = sizeof(call),
                            .timeout_ms = CALL_TIMEOUT_MS,
                            .attrs = op == sleep_op ? sleep_attrs : NULL};
        memset(y.data, 0xee, y.nbytes);
        double t0 = now_ms();
        int rc = mxop_forward(c, op, &call, &x, 1, &y, 1);
        double took = now_ms() - t0;
        cl->calls++;
        if (took > CALL_BOUND_MS)
            fail_once(cl, "a call of %s took too long (%s) %.0f ms", op == relu ? "relu" : "other",
                      "", took);
        if (memcmp(saved, x.data, sizeof(saved)) != 0)
            fail_once(cl, "the input changed (%s%s) %g", "", "", 0);
        if (rc == MXOP_EWORKER_CRASHED) {
            cl->crashed++;
            /* While no worker can be started calls fail at once: pause as an engine would. */
            if (took < 5)
                mxt_sleep_ms(5);
            continue;
        }
        if (rc == MXOP_ETIMEOUT) {
            cl->timeouts++;
            continue;
        }
        if (op == segv) {
            fail_once(cl, "segv returned %s: %s (%g)", mxop_err_name(rc), mxop_last_error(c), 0);
            continue;
        }
        if (rc != 0) {
            fail_once(cl, "error %s: %s (%g)", mxop_err_name(rc), mxop_last_error(c), 0);
            continue;
        }
        for (int i = 0; i < 512; i++) {
            double v = mxt_get(&x, (size_t)i);
            double want = op == relu ? (v > 0 ? v : 0) : v;
            if (mxt_get(&y, (size_t)i) != want) {
                fail_once(cl, "wrong result (%s%s) at element %g", "", "", i);
                break;
            }
        }
        cl->ok++;
    }
    mxop_array_free(c, &x);
    mxop_array_free(c, &y);
    mxop_close(c);
    return NULL;
}

struct killer {
    unsigned seed;
    bool chaos; /* also stop and resume workers, and make spawns fail */
    int kills, stops, spawn_outages;
    pthread_t thread;
};

/* The daemon's soft RLIMIT_NOFILE: while it is tiny, no worker can be started. */
static void daemon_nofile(rlim_t cur)
{
    struct rlimit rl;
    if (prlimit(daemon_.pid, RLIMIT_NOFILE, NULL, &rl) == 0) {
        rl.rlim_cur = cur;
        prlimit(daemon_.pid, RLIMIT_NOFILE, &rl, NULL);
    }
}

static void *killer_loop(void *arg)
{
    struct killer *k = arg;
    pid_t stopped = -1;
    struct rlimit saved;
    prlimit(daemon_.pid, RLIMIT_NOFILE, NULL, &saved);
    while (atomic_load(&ready) < CLIENTS && !atomic_load(&stop))
        mxt_sleep_ms(5);
    while (!atomic_load(&stop)) {
        mxt_sleep_ms(20 + (int)((unsigned)rand_r(&k->seed) % 100));
        pid_t kids[64];
        int n = mxt_children(daemon_.pid, kids, 64);
        if (n <= 0)
            continue;
        pid_t victim = kids[(unsigned)rand_r(&k->seed) % (unsigned)n];
        unsigned r = k->chaos ? (unsigned)rand_r(&k->seed) % 10 : 0;
        if (r < 5) {
            if (kill(victim, SIGKILL) == 0)
                k->kills++;
        } else if (r < 8) {
            /* Stop one (live worker or spare); resume the one stopped before, if it lives. */
            if (stopped > 0)
                kill(stopped, SIGCONT);
            stopped = kill(victim, SIGSTOP) == 0 ? victim : -1;
            k->stops += stopped > 0;
        } else {
            /* For a moment no descriptor can be made: every spawn fails. */
            daemon_nofile(3);
            mxt_sleep_ms(150 + (int)((unsigned)rand_r(&k->seed) % 300));
            daemon_nofile(saved.rlim_cur);
            k->spawn_outages++;
        }
    }
    if (stopped > 0)
        kill(stopped, SIGCONT);
    daemon_nofile(saved.rlim_cur);
    return NULL;
}

struct counts {
    pid_t pid;
    int fds;
    int memfds;
};

static int back_to(void *arg)
{
    struct counts *b = arg;
    pid_t kids[64];
    return mxt_children(b->pid, kids, 64) == 0 && mxt_fd_count(b->pid) == b->fds &&
           mxt_memfd_count(b->pid) == b->memfds;
}

static void soak(bool chaos)
{
    int seconds = 15;
    const char *env = getenv("MXOP_SOAK_SECONDS");
    if (env != NULL && atoi(env) > 0)
        seconds = atoi(env) < 60 ? atoi(env) : 60;

    /* A first session opens what the daemon opens lazily; the baseline comes after it. */
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *warm = mxt_connect_with(&daemon_, libs);
    mxop_close(warm);
    pid_t kids[64];
    for (int i = 0; i < 500 && mxt_children(daemon_.pid, kids, 64) > 0; i++)
        mxt_sleep_ms(10);
    mxt_sleep_ms(50);
    struct counts base = {daemon_.pid, mxt_fd_count(daemon_.pid), mxt_memfd_count(daemon_.pid)};

    static struct client cl[CLIENTS];
    struct killer k = {.seed = 4242, .chaos = chaos};
    atomic_store(&stop, 0);
    atomic_store(&ready, 0);
    for (int i = 0; i < CLIENTS; i++) {
        memset(&cl[i], 0, sizeof(cl[i]));
        cl[i].index = i;
        cl[i].seed = 1000u + (unsigned)i;
        cr_assert_eq(pthread_create(&cl[i].thread, NULL, client_loop, &cl[i]), 0);
    }
    cr_assert_eq(pthread_create(&k.thread, NULL, killer_loop, &k), 0);
    mxt_sleep_ms(seconds * 1000);
    atomic_store(&stop, 1);
    pthread_join(k.thread, NULL);
    int calls = 0, ok = 0, crashed = 0, timeouts = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(cl[i].thread, NULL);
        calls += cl[i].calls;
        ok += cl[i].ok;
        crashed += cl[i].crashed;
        timeouts += cl[i].timeouts;
    }
    fprintf(stderr,
            "soak%s: %d s, %d clients, %d kills, %d stops, %d spawn outages: %d calls, %d "
            "correct, %d crashed, %d timed out\n",
            chaos ? " (chaos)" : "", seconds, CLIENTS, k.kills, k.stops, k.spawn_outages, calls, ok,
            crashed, timeouts);
    for (int i = 0; i < CLIENTS; i++)
        cr_expect_eq(cl[i].bad, 0, "client %d: %d bad calls, first: %s", i, cl[i].bad, cl[i].why);
    for (int i = 0; i < CLIENTS; i++)
        cr_assert(cl[i].ok > 0, "client %d got no result at all", i);
    cr_assert(k.kills > 0, "no worker was killed");
    cr_assert(mxt_daemon_alive(&daemon_), "the daemon died");

    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    int64_t s[] = {16};
    mxop_array_t x, y;
    mxt_array(c, MXOP_F32, 1, s, 5, &x);
    mxt_array(c, MXOP_F32, 1, s, 6, &y);
    cr_assert_eq(mxop_forward(c, mxt_op(c, "relu"), NULL, &x, 1, &y, 1), 0);
    mxop_close(c);
    cr_assert(mxt_wait_until(back_to, &base, 5000),
              "daemon: %d fds (%d memfds) before, %d (%d) after", base.fds, base.memfds,
              mxt_fd_count(base.pid), mxt_memfd_count(base.pid));
}

Test(soak, calls_survive_random_worker_kills)
{
    soak(false);
}

/*
 * Workers and spares are also stopped (SIGSTOP, resumed later or killed by
 * the watchdog) and spawns fail for a while (the daemon's RLIMIT_NOFILE
 * lowered): still no wrong result, no lost reply, every call within its
 * deadline plus the grace.
 */
Test(soak, calls_survive_stops_and_failed_spawns)
{
    soak(true);
}
