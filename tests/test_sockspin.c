/*
 * tests/test_sockspin.c - the socket data path's busy-poll before a
 * blocking wait (wire/sockspin.c): the policy itself (it stops spinning
 * when spins do not pay, spins again when they do, never with
 * MXOP_SOCKET_SPIN=0, and stops at an error), and through the daemon on
 * the socket path: more client processes than CPUs all finish, idle
 * sessions use no CPU, threads sharing one client each get their own
 * results.
 *
 * Nothing here is timed: bounds are wide for a loaded 2-CPU machine.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "wire/sockspin.h"

/* ---- the policy, with a look function standing for the socket ---- */

typedef struct look {
    int answer_after; /* looks before "ready"; < 0: never */
    int looks;
    int result;     /* what a ready look returns (1, or an error) */
    int off_cpu_at; /* this look (1 = the first) sleeps, as if the spinner lost its CPU; 0: none */
} look_t;

/* A policy as a side starts out with, spinning allowed. */
static void fresh_spin(mxop__sockspin_t *s, mxop__sockspin_side_t side)
{
    unsetenv("MXOP_SOCKET_SPIN");
    mxop__sockspin_init(s, side);
}

static int look_fn(void *arg)
{
    look_t *l = arg;
    l->looks++;
    if (l->looks == l->off_cpu_at)
        usleep(20 * MXOP__SOCKSPIN_GAP_NS / 1000);
    if (l->answer_after >= 0 && l->looks > l->answer_after)
        return l->result;
    return 0;
}

Test(sockspin, a_side_whose_looks_never_succeed_stops_spinning, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_CLIENT);
    int waits = 160;
    for (int i = 0; i < waits; i++) {
        look_t l = {.answer_after = -1};
        cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), 0);
        mxop__sockspin_note_wait(&s, 2 * (int64_t)MXOP__SOCKSPIN_NS);
    }
    cr_log_info("%llu spins in %d waits (%llu skipped)", (unsigned long long)s.n_spins, waits,
                (unsigned long long)s.n_skip_rare);
    cr_assert_eq(s.n_spin_hits, 0);
    /* About 20 failures bring the average under a quarter; then a probe every 16 waits. */
    cr_assert_lt(s.n_spins, 40, "%llu of %d waits spun though no spin ever succeeded",
                 (unsigned long long)s.n_spins, waits);
    cr_assert_gt(s.n_skip_rare, (uint64_t)waits / 2);
}

Test(sockspin, a_side_whose_probes_succeed_spins_again, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_CLIENT);
    for (int i = 0; i < 100; i++) {
        look_t l = {.answer_after = -1};
        mxop__sockspin_wait(&s, look_fn, &l);
    }
    uint64_t skipped = s.n_skip_rare;
    cr_assert_gt(skipped, 0, "spins that never succeed did not stop");
    /* From now on the answer comes at the third look of every spin. */
    for (int i = 0; i < 200; i++) {
        look_t l = {.answer_after = 2, .result = 1};
        int r = mxop__sockspin_wait(&s, look_fn, &l);
        cr_assert(r == 0 || r == 1);
        if (r == 1)
            cr_assert_eq(l.looks, 3, "a spin returned before its answer or after it");
    }
    uint64_t late = s.n_skip_rare - skipped;
    cr_log_info("%llu hits, %llu skipped after the peer began to answer",
                (unsigned long long)s.n_spin_hits, (unsigned long long)late);
    cr_assert_lt(late, 100, "the side kept skipping spins that succeed");
    cr_assert_gt(s.n_spin_hits, 100);
}

Test(sockspin, an_error_ends_the_spin_and_is_returned, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_CLIENT);
    look_t l = {.answer_after = 1, .result = -5};
    cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), -5);
    cr_assert_eq(l.looks, 2);
    cr_assert_eq(s.n_spin_hits, 0);
}

Test(sockspin, switched_off_it_never_looks, .timeout = 60)
{
    setenv("MXOP_SOCKET_SPIN", "0", 1);
    mxop__sockspin_t s;
    mxop__sockspin_init(&s, MXOP__SOCKSPIN_CLIENT);
    unsetenv("MXOP_SOCKET_SPIN");
    for (int i = 0; i < 20; i++) {
        look_t l = {.answer_after = 0, .result = 1};
        cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), 0);
        cr_assert_eq(l.looks, 0, "MXOP_SOCKET_SPIN=0 still looked");
    }
    cr_assert_eq(s.n_spins, 0);
}

/*
 * A spinner that loses its CPU meanwhile shares it with its peer (more
 * runnable processes than CPUs): on the worker's side that spin kept the
 * client waiting behind it, so it ends at once and counts as a failure.
 */
Test(sockspin, a_workers_spin_that_lost_its_cpu_ends_as_a_failure, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_WORKER);
    look_t l = {.answer_after = 3, .result = 1, .off_cpu_at = 2};
    cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), 0, "the spin went on after losing its CPU");
    /* (The first look too may lose the CPU on a loaded machine.) */
    cr_assert_leq(l.looks, 2);
    cr_assert_eq(s.n_spins, 1);
    cr_assert_eq(s.n_spin_hits, 0);
    cr_assert_eq(s.n_lost_cpu, 1);
}

Test(sockspin, a_workers_answer_seen_after_losing_its_cpu_is_no_success, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_WORKER);
    for (int i = 0; i < 40; i++) {
        look_t l = {.answer_after = 1, .result = 1, .off_cpu_at = 2};
        int r = mxop__sockspin_wait(&s, look_fn, &l);
        cr_assert(r == 0 || r == 1);
    }
    cr_assert_eq(s.n_spin_hits, 0, "%llu spins that lost their CPU counted as successes",
                 (unsigned long long)s.n_spin_hits);
    cr_assert_gt(s.n_skip_rare, 0, "spins that only ended by losing the CPU did not stop");
}

Test(sockspin, a_workers_answer_at_the_first_look_counts_neither_way, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_WORKER);
    for (int i = 0; i < 100; i++) {
        look_t l = {.answer_after = 0, .result = 1};
        cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), 1);
        cr_assert_eq(l.looks, 1);
    }
    /* Only a first look that lost the CPU (a loaded machine) is counted, as a failure. */
    cr_assert_eq(s.n_spin_hits, 0);
    cr_assert_leq(s.n_spins, s.n_lost_cpu);
}

/*
 * The client's spin wakes the worker on its CPU and is preempted by it:
 * the answer after that counts, and the spin keeps both sides runnable, so
 * that the scheduler may move one to an idle CPU.
 */
Test(sockspin, a_clients_answer_seen_after_losing_its_cpu_is_a_success, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_CLIENT);
    look_t l = {.answer_after = 1, .result = 1, .off_cpu_at = 2};
    cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), 1);
    cr_assert_eq(s.n_spin_hits, 1);
    cr_assert_eq(s.n_lost_cpu, 1);
}

Test(sockspin, failed_probes_come_further_apart, .timeout = 60)
{
    mxop__sockspin_t s;
    fresh_spin(&s, MXOP__SOCKSPIN_CLIENT);
    uint64_t spins_at_1000 = 0;
    for (int i = 0; i < 3000; i++) {
        if (i == 1000)
            spins_at_1000 = s.n_spins;
        look_t l = {.answer_after = -1};
        cr_assert_eq(mxop__sockspin_wait(&s, look_fn, &l), 0);
    }
    uint64_t late = s.n_spins - spins_at_1000;
    cr_log_info("%llu probes in the last 2000 waits", (unsigned long long)late);
    /* One every 16 waits would be 125; doubling from 16 to 1024 leaves 2 or 3. */
    cr_assert_leq(late, 4, "%llu probes in 2000 waits of a peer that never answers a spin",
                  (unsigned long long)late);
    cr_assert_geq(late, 1, "probing stopped altogether");
}

/* ---- through the daemon, every session on the socket path ---- */

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(sockpath, .init = setup, .fini = teardown, .timeout = 180);

/* A session on the socket path with relu.so loaded (asserts it got that path). */
static mxop_client_t *connect_socket(void)
{
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {
        .struct_size = sizeof(o), .timeout_ms = 60000, .data_path = MXOP_DATA_PATH_SOCKET};
    int rc = mxop_connect(daemon_.sock, &o, &c);
    cr_assert_eq(rc, 0, "connect: %s", mxop_err_name(rc));
    cr_assert_eq(mxop_data_path(c), MXOP_DATA_PATH_SOCKET);
    rc = mxop_load_library(c, "relu.so");
    cr_assert_eq(rc, 0, "relu.so: %s: %s", mxop_err_name(rc), mxop_last_error(c));
    return c;
}

/*
 * Several client processes, idle sessions and threads sharing a client on
 * the socket path are test_contention's tests: `make check` runs every test
 * binary on both data paths (MXOP_DATA_PATH=shm and =socket).
 */

/* The client's data channel: its only unix socket connected to an unnamed peer (a socketpair). */
static int data_channel_fd(void)
{
    for (int fd = 3; fd < 1024; fd++) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
            continue;
        struct sockaddr_un sa;
        socklen_t len = sizeof(sa);
        if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sun_family != AF_UNIX)
            continue;
        if (len <= sizeof(sa_family_t))
            return fd;
    }
    return -1;
}

/*
 * The worker hangs up the data channel (here: bytes that are not a frame
 * make it shut the channel down; it stays alive until the daemon replaces
 * it): the client's busy-poll sees the end of the stream and hands it to
 * the blocking path, which reports it and gets a replacement.  A spin
 * that took the end of stream for "ready" would go round until the
 * call's deadline (60 s here).
 */
Test(sockpath, a_hung_up_channel_is_noticed_long_before_the_deadline)
{
    char why[512];
    mxop_client_t *c = connect_socket();
    cr_assert_null(mxt_relu_calls(c, 0, 200, why, sizeof(why)), "%s", why);
    mxt_sleep_ms(300);
    int fd = data_channel_fd();
    cr_assert(fd >= 0, "no data channel found");
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    cr_assert(send(fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL) > 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        ok = mxt_relu_calls(c, 0, 20, why, sizeof(why)) == NULL;
        if (!ok)
            mxt_sleep_ms(50);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_log_info("calls succeed again %.3f s after the hang-up", s);
    cr_assert(ok, "no call succeeded after the hang-up: %s", why);
    cr_assert_lt(s, 30.0, "the calls after the hang-up took %.1f s to succeed again", s);
    mxop_close(c);
}
