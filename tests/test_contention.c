/*
 * tests/test_contention.c - calls where training runs: more processes than
 * CPUs, idle sessions beside busy ones, several threads sharing one client,
 * and the mailbox's rule of spinning only when spinning pays.
 *
 * Nothing here is timed: the tests assert that every call completes with
 * its own correct result and that idle sides stay idle, with wide margins
 * for a loaded 2-CPU machine.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "data.pb-c.h"
#include "harness.h"
#include "wire/frame.h"
#include "client/spincap.h"
#include "shm/mailbox.h"

static mxt_daemon_t daemon_;

static void setup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void teardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(contention, .init = setup, .fini = teardown, .timeout = 120);

static mxop_client_t *connect_relu(void)
{
    const char *libs[] = {"relu.so", NULL};
    return mxt_connect_with(&daemon_, libs);
}

/* ---- more client processes than CPUs ---- */

#define PROCS 6
#define PROC_CALLS 1500

/* One client process: its own session, PROC_CALLS checked calls; the exit status says how. */
_Noreturn static void client_proc(unsigned who)
{
    char why[512];
    mxop_client_t *c = NULL;
    mxop_connect_opts_t o = {.struct_size = sizeof(o), .timeout_ms = 60000};
    if (mxop_connect(daemon_.sock, &o, &c) != 0)
        _exit(2);
    if (mxop_load_library(c, "relu.so") != 0)
        _exit(3);
    const char *fail = mxt_relu_calls(c, who, PROC_CALLS, why, sizeof(why));
    if (fail != NULL)
        fprintf(stderr, "client process %u: %s\n", who, fail);
    mxop_close(c);
    _exit(fail == NULL ? 0 : 4);
}

Test(contention, more_client_processes_than_cpus_all_make_progress)
{
    cr_log_info("%d client processes with their workers on %ld CPUs", PROCS,
                sysconf(_SC_NPROCESSORS_ONLN));
    pid_t pids[PROCS];
    pid_t parent = getpid();
    for (unsigned i = 0; i < PROCS; i++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0, "fork failed");
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            client_proc(i);
        }
        pids[i] = pid;
    }
    int bad = 0;
    for (int i = 0; i < PROCS; i++) {
        int st = 0;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            cr_log_error("client process %d ended with status 0x%x", i, st);
            bad++;
        }
    }
    cr_assert_eq(bad, 0, "%d of %d client processes did not finish their %d calls", bad, PROCS,
                 PROC_CALLS);
}

/* ---- idle sessions beside one another ---- */

static long cpu_ms_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    cr_assert_not_null(p);
    unsigned long ut = 0, st = 0;
    cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
    return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

static long self_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

#define IDLE_SESSIONS 4

Test(contention, idle_sessions_burn_no_cpu_after_busy_ones)
{
    char why[512];
    mxop_client_t *c[IDLE_SESSIONS];
    pid_t w[IDLE_SESSIONS];
    long w0[IDLE_SESSIONS];
    /* Every session is busy first, so that each side's spin policy is warm. */
    for (int i = 0; i < IDLE_SESSIONS; i++) {
        c[i] = connect_relu();
        cr_assert_null(mxt_relu_calls(c[i], (unsigned)i, 1000, why, sizeof(why)), "%s", why);
        w[i] = mxt_worker_pid(c[i]);
        cr_assert_gt(w[i], 0);
    }
    long c0 = self_cpu_ms();
    for (int i = 0; i < IDLE_SESSIONS; i++)
        w0[i] = cpu_ms_of(w[i]);
    mxt_sleep_ms(1200);
    long used = self_cpu_ms() - c0;
    cr_assert_lt(used, 60, "%d idle clients used %ld ms of CPU in 1.2 s", IDLE_SESSIONS, used);
    for (int i = 0; i < IDLE_SESSIONS; i++) {
        long wused = cpu_ms_of(w[i]) - w0[i];
        cr_assert_lt(wused, 60, "idle worker %d used %ld ms of CPU in 1.2 s", i, wused);
    }
    for (int i = 0; i < IDLE_SESSIONS; i++) {
        cr_assert_null(mxt_relu_calls(c[i], (unsigned)i, 10, why, sizeof(why)), "after idling: %s",
                       why);
        mxop_close(c[i]);
    }
}

/* ---- several threads sharing one client ---- */

#define THREADS 4
#define THREAD_CALLS 400

typedef struct thread_arg {
    mxop_client_t *c;
    unsigned who;
    char why[512];
    const char *fail;
} thread_arg_t;

static void *thread_main(void *p)
{
    thread_arg_t *a = p;
    a->fail = mxt_relu_calls(a->c, a->who, THREAD_CALLS, a->why, sizeof(a->why));
    return NULL;
}

Test(contention, threads_sharing_one_client_each_get_their_own_results)
{
    mxop_client_t *c = connect_relu();
    pthread_t t[THREADS];
    static thread_arg_t args[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        args[i] = (thread_arg_t){.c = c, .who = i + 1};
        cr_assert_eq(pthread_create(&t[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        cr_expect_null(args[i].fail, "thread %d: %s", i, args[i].why);
    mxop_close(c);
}

/* ---- the spin policy itself, on a mailbox with no peer ---- */

/* A client's mailbox (cl) and the worker's view of it (wk), in one process. */
static void mailbox_pair(mxop__mbox_t *cl, mxop__mbox_t *wk)
{
    int fds[3];
    char why[256];
    cr_assert_eq(mxop__mbox_create(cl, fds, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(
        mxop__mbox_attach(wk, fds[0], dup(fds[1]), dup(fds[2]), MXOP__MBOX_BYTES, why, sizeof(why)),
        0, "%s", why);
}

Test(contention, a_side_whose_spins_never_succeed_stops_spinning)
{
    mxop__mbox_t m;
    int fds[3];
    char why[256];
    cr_assert_eq(mxop__mbox_create(&m, fds, why, sizeof(why)), 0, "%s", why);
    close(fds[0]);
    /* Nobody ever answers: the first spins fail, then the side mostly sleeps at once. */
    int waits = 160;
    for (int i = 0; i < waits; i++) {
        int64_t spent = 0;
        cr_assert_eq(mxop__mbox_spin(&m, MXOP__MBOX_SPIN_NS, &spent), 0);
        mxop__mbox_note_wait(&m, mxop__now_ns() - 2 * (int64_t)MXOP__MBOX_SPIN_NS);
    }
    cr_log_info("%llu spins in %d waits (%llu skipped as not paying)",
                (unsigned long long)m.n_spins, waits, (unsigned long long)m.n_skip_rare);
    cr_assert_eq(m.n_spin_hits, 0);
    /* About 20 spins bring the success average under a quarter; then one in every 16 waits. */
    cr_assert_lt(m.n_spins, 40, "%llu of %d waits spun though no spin ever succeeded",
                 (unsigned long long)m.n_spins, waits);
    cr_assert_gt(m.n_skip_rare, (uint64_t)waits / 2);
    mxop__mbox_close(&m);
}

Test(contention, a_side_whose_probes_succeed_spins_again)
{
    mxop__mbox_t cl, wk;
    mailbox_pair(&cl, &wk);
    for (int i = 0; i < 100; i++) {
        int64_t spent;
        mxop__mbox_spin(&cl, MXOP__MBOX_SPIN_NS, &spent);
    }
    uint64_t skipped = cl.n_skip_rare;
    cr_assert_gt(skipped, 0, "spins that never succeed did not stop");
    /* From now on every frame is there before the wait: each probe succeeds. */
    uint8_t buf[MXOP__MBOX_SLOT_BYTES];
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    uint64_t spins_before = cl.n_spins;
    for (int i = 0; i < 200; i++) {
        res.id = (uint64_t)i;
        mxop__mbox_put(&wk, MXOP__KIND_CALL_RESULT, &res.base,
                       protobuf_c_message_get_packed_size(&res.base));
        int64_t spent;
        cr_assert_eq(mxop__mbox_spin(&cl, MXOP__MBOX_SPIN_NS, &spent), 1,
                     "a frame put before the wait was not seen");
        uint16_t kind;
        uint32_t len;
        cr_assert_eq(mxop__mbox_take(&cl, buf, sizeof(buf), &kind, &len), 1);
        cr_assert_eq(kind, MXOP__KIND_CALL_RESULT);
    }
    uint64_t late_skips = cl.n_skip_rare - skipped;
    cr_log_info("%llu spins, %llu skipped after the peer began to answer",
                (unsigned long long)(cl.n_spins - spins_before), (unsigned long long)late_skips);
    /* A few probes raise the average over a quarter; from then on every wait spins. */
    cr_assert_lt(late_skips, 100, "the side kept skipping spins that succeed");
    cr_assert_gt(cl.n_spin_hits, 100);
    mxop__mbox_close(&wk);
    mxop__mbox_close(&cl);
}

/*
 * The spin budget follows how long the peer took to answer, not the whole
 * wait: a wait that ended in a sleep also holds the wake-up, and a budget
 * that followed it would grow past its cap and collapse.
 */
Test(contention, a_wait_counts_until_the_answer_not_until_the_wake_up)
{
    mxop__mbox_t cl, wk;
    mailbox_pair(&cl, &wk);
    uint8_t buf[MXOP__MBOX_SLOT_BYTES];
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    for (int i = 0; i < 16; i++) {
        int64_t since = mxop__now_ns();
        res.id = (uint64_t)i;
        mxop__mbox_put(&wk, MXOP__KIND_CALL_RESULT, &res.base,
                       protobuf_c_message_get_packed_size(&res.base));
        /* The side takes the answer 5 ms after it came (as after a slow wake-up). */
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint16_t kind;
        uint32_t len;
        cr_assert_eq(mxop__mbox_take(&cl, buf, sizeof(buf), &kind, &len), 1);
        mxop__mbox_note_wait(&cl, since);
    }
    /* The answers came at once; the average stays far below the 5 ms slept. */
    cr_assert_lt(cl.wait_avg_ns, 1000000, "average wait %lld ns counts the sleeps",
                 (long long)cl.wait_avg_ns);

    /* A publication time outside the wait (a peer that lies) counts the whole wait. */
    atomic_store(&cl.rx->put_ns, mxop__now_ns() + 1000000000);
    for (int i = 0; i < 32; i++)
        mxop__mbox_note_wait(&cl, mxop__now_ns() - 2 * (int64_t)MXOP__MBOX_SPIN_LONG_NS);
    cr_assert_gt(cl.wait_avg_ns, MXOP__MBOX_SPIN_LONG_NS, "a put_ns in the future was believed");
    mxop__mbox_close(&wk);
    mxop__mbox_close(&cl);
}

/* Long spins only while each call in flight and its worker have a CPU each. */
Test(contention, long_spins_only_while_calls_in_flight_fit_the_cpus)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    int cpus = CPU_COUNT(&set);
    int64_t caps[8];
    for (int k = 1; k <= 8; k++) {
        caps[k - 1] = mxop__spincap_enter(1);
        cr_assert_eq(caps[k - 1], 2 * k <= cpus ? MXOP__MBOX_SPIN_LONG_NS : 0,
                     "%d calls in flight on %d CPUs: cap %lld", k, cpus, (long long)caps[k - 1]);
    }
    for (int k = 0; k < 8; k++)
        mxop__spincap_leave(1);
    /* All over: a lone call spins long again (where 2 CPUs allow it). */
    cr_assert_eq(mxop__spincap_enter(1), cpus >= 2 ? MXOP__MBOX_SPIN_LONG_NS : 0);
    mxop__spincap_leave(1);
}

/*
 * A worker whose last call kept all the CPUs busy (a product on every BLAS
 * thread) leaves none for its client's spin; a worker's word outside 1..64
 * is clamped, and the count comes back whole when the calls end.
 */
Test(contention, no_spin_beside_a_worker_that_keeps_every_cpu_busy)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    int cpus = CPU_COUNT(&set);
    cr_assert_eq(mxop__spincap_enter(cpus), 0, "a spin beside a worker on all %d CPUs", cpus);
    mxop__spincap_leave(cpus);
    cr_assert_eq(mxop__spincap_enter(cpus - 1), cpus >= 2 ? MXOP__MBOX_SPIN_LONG_NS : 0,
                 "a worker on %d of %d CPUs leaves one for the spin", cpus - 1, cpus);
    mxop__spincap_leave(cpus - 1);
    cr_assert_eq(mxop__spincap_enter(-7), cpus >= 2 ? MXOP__MBOX_SPIN_LONG_NS : 0,
                 "a negative word counts as one CPU");
    mxop__spincap_leave(-7);
    cr_assert_eq(mxop__spincap_enter(1 << 30), 0, "a huge word stops the spin");
    mxop__spincap_leave(1 << 30);
    cr_assert_eq(mxop__spincap_enter(1), cpus >= 2 ? MXOP__MBOX_SPIN_LONG_NS : 0,
                 "the count came back whole");
    mxop__spincap_leave(1);
}

/*
 * The worker's word on the CPUs its last call kept busy reaches the client
 * with the result, clamped to 1..64; a peer that never said reads as 1.
 */
Test(contention, the_workers_busy_cpus_reach_the_client_clamped)
{
    mxop__mbox_t cl, wk;
    mailbox_pair(&cl, &wk);
    cr_assert_eq(mxop__mbox_peer_busy(&cl), 1, "nothing said yet");
    static const int said[] = {2, 1, 0, -3, 64, 65, 1 << 30};
    static const int heard[] = {2, 1, 1, 1, 64, 64, 64};
    for (size_t i = 0; i < sizeof(said) / sizeof(said[0]); i++) {
        mxop__mbox_say_busy(&wk, said[i]);
        cr_assert_eq(mxop__mbox_peer_busy(&cl), heard[i], "said %d", said[i]);
    }
    mxop__mbox_close(&wk);
    mxop__mbox_close(&cl);
}

/* The peer of long_waits_are_caught_by_a_long_spin_only: answers each request 150 us late. */
#define LATE_NS (150 * 1000)
typedef struct late_peer {
    mxop__mbox_t *wk;
    int n;
} late_peer_t;

static void *late_peer_main(void *arg)
{
    late_peer_t *p = arg;
    uint8_t *buf = malloc(MXOP__MBOX_SLOT_BYTES);
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    for (int i = 0; i < p->n; i++) {
        uint16_t kind;
        uint32_t len;
        while (mxop__mbox_take(p->wk, buf, MXOP__MBOX_SLOT_BYTES, &kind, &len) != 1)
            ;
        int64_t until = mxop__now_ns() + LATE_NS;
        while (mxop__now_ns() < until)
            ;
        res.id = (uint64_t)i;
        mxop__mbox_put(p->wk, MXOP__KIND_CALL_RESULT, &res.base,
                       protobuf_c_message_get_packed_size(&res.base));
    }
    free(buf);
    return NULL;
}

/* Runs n calls against a late peer, each wait spinning with `cap`; returns the spins that hit. */
static uint64_t calls_against_a_late_peer(int64_t cap, int n)
{
    mxop__mbox_t cl, wk;
    mailbox_pair(&cl, &wk);
    late_peer_t peer = {.wk = &wk, .n = n};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, late_peer_main, &peer), 0);
    uint8_t *buf = malloc(MXOP__MBOX_SLOT_BYTES);
    Mxop__CallResult req = MXOP__CALL_RESULT__INIT;
    for (int i = 0; i < n; i++) {
        int64_t since = mxop__now_ns(), spent;
        mxop__mbox_put(&cl, MXOP__KIND_CALL_RESULT, &req.base,
                       protobuf_c_message_get_packed_size(&req.base));
        if (!mxop__mbox_spin(&cl, cap, &spent))
            while (!mxop__mbox_ready(&cl))
                ;
        uint16_t kind;
        uint32_t len;
        cr_assert_eq(mxop__mbox_take(&cl, buf, MXOP__MBOX_SLOT_BYTES, &kind, &len), 1);
        mxop__mbox_note_wait(&cl, since);
    }
    pthread_join(t, NULL);
    free(buf);
    uint64_t hits = cl.n_spin_hits;
    cr_log_info("cap %lld ns: %llu of %llu spins hit, average wait %lld ns", (long long)cap,
                (unsigned long long)hits, (unsigned long long)cl.n_spins,
                (long long)cl.wait_avg_ns);
    mxop__mbox_close(&wk);
    mxop__mbox_close(&cl);
    return hits;
}

/*
 * Answers 150 us late (an op of that length): the worker's cap catches
 * few (only where a yield let the peer finish); the client's long cap
 * follows the waits and catches most (at least a quarter, for a loaded
 * machine).
 */
Test(contention, long_waits_are_caught_by_a_long_spin_only, .timeout = 60)
{
    const int n = 200;
    /* A spinner preempted for longer than the peer's delay finds the answer
     * at its next look whatever its cap, so on a loaded machine one round
     * can look like a hit: each claim needs to hold in one of five rounds. */
    uint64_t fewest = UINT64_MAX, most = 0;
    for (int round = 0; round < 5 && fewest >= (uint64_t)n / 4; round++) {
        uint64_t hits = calls_against_a_late_peer(MXOP__MBOX_SPIN_NS, n);
        fewest = hits < fewest ? hits : fewest;
    }
    for (int round = 0; round < 5 && most <= (uint64_t)n / 4; round++) {
        uint64_t hits = calls_against_a_late_peer(MXOP__MBOX_SPIN_LONG_NS, n);
        most = hits > most ? hits : most;
    }
    cr_assert_lt(fewest, (uint64_t)n / 4);
    cr_assert_gt(most, (uint64_t)n / 4);
}

Test(contention, a_put_says_whether_it_woke_a_crowded_reader)
{
    mxop__mbox_t cl, wk;
    mailbox_pair(&cl, &wk);
    Mxop__CallResult res = MXOP__CALL_RESULT__INIT;
    const uint32_t whys[] = {MXOP__MBOX_CROWDED, MXOP__MBOX_SLEEPING, MXOP__MBOX_CROWDED,
                             MXOP__MBOX_AWAKE, 7u /* any other word: plain sleeping */};
    for (size_t i = 0; i < sizeof(whys) / sizeof(whys[0]); i++) {
        if (whys[i] != MXOP__MBOX_AWAKE)
            cr_assert_eq(mxop__mbox_sleep_begin(&cl, whys[i]), 0, "no frame was waiting");
        res.id = (uint64_t)i;
        mxop__mbox_put(&wk, MXOP__KIND_CALL_RESULT, &res.base,
                       protobuf_c_message_get_packed_size(&res.base));
        cr_assert_eq(wk.peer_crowded, whys[i] == MXOP__MBOX_CROWDED, "word %u", whys[i]);
        /* A sleeper's bell rang; an awake reader's did not. */
        struct pollfd p = {.fd = cl.bell_rx, .events = POLLIN};
        cr_assert_eq(poll(&p, 1, 0), whys[i] != MXOP__MBOX_AWAKE, "word %u", whys[i]);
        mxop__mbox_sleep_end(&cl, p.revents & POLLIN);
        uint8_t buf[MXOP__MBOX_SLOT_BYTES];
        uint16_t kind;
        uint32_t len;
        cr_assert_eq(mxop__mbox_take(&cl, buf, sizeof(buf), &kind, &len), 1);
    }
    mxop__mbox_close(&cl);
    mxop__mbox_close(&wk);
}

/*
 * A call that would say CROWDED claims its thread's CPU; a second call of
 * the process sleeping on the same CPU says plain SLEEPING, so that two
 * threads sleeping on one CPU (Python's, after a GIL hand-over) do not draw
 * both their workers there.  The claim ends with the call.
 */
Test(contention, one_crowded_call_a_cpu)
{
    int cpu = mxop__spincap_crowd_enter(0);
    if (cpu < 0)
        cr_skip_test("this CPU's number is not known here (or above 63), or the test may not "
                     "run on every CPU");
    /* A call that spins never claims a CPU. */
    cr_assert_eq(mxop__spincap_crowd_enter(MXOP__MBOX_SPIN_LONG_NS), -1);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    cr_assert_eq(mxop__spincap_crowd_enter(0), -1, "a second crowded call on CPU %d", cpu);
    mxop__spincap_crowd_leave(cpu);
    int again = mxop__spincap_crowd_enter(0);
    cr_assert_eq(again, cpu, "CPU %d was not free again after the call", cpu);
    mxop__spincap_crowd_leave(again);
    mxop__spincap_crowd_leave(-1); /* a call that claimed nothing: no effect */
    cr_assert_eq(mxop__spincap_crowd_enter(0), cpu);
    mxop__spincap_crowd_leave(cpu);
}
