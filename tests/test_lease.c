/*
 * tests/test_lease.c - the spin lease (shm/lease_page.h, client/lease.c):
 * processes of one uid take turns to spin on the shared-memory path.
 *
 * The rule on a page of its own: a holder keeps its slot while nobody
 * waits, a waiter gets it after the holder's quantum, a dead or idle
 * holder loses it, a holder that never lets go is waited for only up to the
 * bound, and a page that is not one is refused.  Then through the daemon:
 * sessions of one uid share one page, and calls from more processes than
 * CPUs all complete (test_contention.c covers their results).  Nothing is
 * timed but the bounds, with wide margins for a loaded 2-CPU machine.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "client/lease.h"
#include "common/util.h"
#include "harness.h"
#include "shm/lease_page.h"

/* A page as the daemon makes it (server/daemon/core/lease_pages.c), with `slots` slots. */
static int page_fd(uint32_t slots)
{
    int fd = memfd_create("test-lease", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, sizeof(mxop__lease_page_t)), 0);
    mxop__lease_page_t *p =
        mmap(NULL, sizeof(mxop__lease_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(p, MAP_FAILED);
    p->magic = MXOP__LEASE_MAGIC;
    p->n_slots = slots;
    munmap(p, sizeof(*p));
    return fd;
}

static void lease_on(mxop__lease_t *l, int fd)
{
    memset(l, 0, sizeof(*l));
    cr_assert_eq(mxop__lease_map(l, fd), 0, "a well-formed page was refused");
}

/* A child process that takes the slot, calls (enters) for `ms`, and exits. */
static pid_t busy_holder(int fd, int ms, int ready_fd)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        mxop__lease_t l;
        memset(&l, 0, sizeof(l));
        if (mxop__lease_map(&l, fd) != 0 || mxop__lease_enter(&l) != 1)
            _exit(2);
        char b = 1;
        if (write(ready_fd, &b, 1) != 1)
            _exit(3);
        int64_t end = mxop__now_ns() + (int64_t)ms * 1000000;
        while (mxop__now_ns() < end)
            mxop__lease_enter(&l); /* a call after another, as a spinning client makes them */
        mxop__lease_unmap(&l);
        _exit(0);
    }
    return pid;
}

/* A busy holder of the page in fd for `ms`, started and holding its slot, and
 * this process's own view of the page in *l. */
static pid_t holder_and_waiter(int fd, int ms, mxop__lease_t *l)
{
    int pp[2];
    cr_assert_eq(pipe(pp), 0);
    pid_t holder = busy_holder(fd, ms, pp[1]);
    char b;
    cr_assert_eq(read(pp[0], &b, 1), 1, "the holder process did not start");
    close(pp[0]);
    close(pp[1]);
    lease_on(l, fd);
    return holder;
}

static int exit_code(pid_t pid)
{
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TestSuite(lease, .timeout = 60);

Test(lease, a_holder_keeps_its_slot_while_nobody_waits)
{
    int fd = page_fd(1);
    mxop__lease_t l;
    lease_on(&l, fd);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(mxop__lease_enter(&l), 1);
    cr_assert_eq(l.state, MXOP__LEASE_HELD);
    cr_assert_eq(l.slot, 0);
    cr_assert_eq(l.waits, 0, "a lone process waited for its own slot");
    cr_assert_eq(l.page->slots[0].holder, (uint32_t)getpid());
    cr_assert_eq(l.page->handovers, 0);
    mxop__lease_unmap(&l);
    close(fd);
}

Test(lease, a_waiter_gets_the_slot_after_the_holders_quantum)
{
    int fd = page_fd(1);
    /* The holder calls for 5 s: far longer than a quantum (2 ms). */
    mxop__lease_t l;
    pid_t holder = holder_and_waiter(fd, 5000, &l);
    int64_t t0 = mxop__now_ns();
    cr_assert_eq(mxop__lease_enter(&l), 1, "the waiter went on without a slot");
    int64_t waited = mxop__now_ns() - t0;
    /* Waited for the quantum to end, or found the holder descheduled for longer than
     * MXOP__LEASE_STALE_NS (the two processes may share one CPU): either way, not for ever. */
    cr_assert_eq(l.gave_up, 0);
    cr_assert_lt(waited, (int64_t)MXOP__LEASE_WAIT_MAX_NS, "waited %lld ns", (long long)waited);
    cr_assert_eq(l.page->slots[0].holder, (uint32_t)getpid());
    kill(holder, SIGKILL);
    exit_code(holder);
    mxop__lease_unmap(&l);
    close(fd);
}

Test(lease, two_processes_take_turns)
{
    int fd = page_fd(1);
    /* Both call back to back for a while: about a hundred quanta each. */
    mxop__lease_t l;
    pid_t holder = holder_and_waiter(fd, 600, &l);
    int64_t end = mxop__now_ns() + 400 * (int64_t)1000000;
    uint64_t held = 0;
    while (mxop__now_ns() < end)
        held += (uint64_t)mxop__lease_enter(&l);
    uint64_t waits = l.waits, gave_up = l.gave_up, handovers = l.page->handovers;
    mxop__lease_unmap(&l);
    cr_assert_eq(exit_code(holder), 0, "the holder process failed");
    cr_assert_eq(gave_up, 0);
    cr_assert_gt(held, 0);
    /* Each turn of ours after the first began with a wait for the other's quantum to end.
     * How many turns fit in 400 ms depends on what else shares the CPUs (a loaded machine
     * deschedules either side for whole quanta): one wait and a turn each way prove it. */
    cr_assert_geq(waits, 1, "the two processes did not take turns (%llu waits, %llu handovers)",
                  (unsigned long long)waits, (unsigned long long)handovers);
    cr_assert_geq(handovers, 2, "only %llu handovers", (unsigned long long)handovers);
    close(fd);
}

Test(lease, a_dead_holder_loses_its_slot)
{
    int fd = page_fd(1);
    mxop__lease_t l;
    pid_t holder = holder_and_waiter(fd, 60000, &l);
    kill(holder, SIGKILL);
    exit_code(holder);
    cr_assert_eq(l.page->slots[0].holder, (uint32_t)holder, "the dead holder had no slot");
    cr_assert_eq(mxop__lease_enter(&l), 1, "the dead holder's slot was not taken");
    cr_assert_eq(l.gave_up, 0);
    cr_assert_eq(l.page->slots[0].holder, (uint32_t)getpid());
    mxop__lease_unmap(&l);
    close(fd);
}

Test(lease, leave_frees_the_slot)
{
    int fd = page_fd(1);
    mxop__lease_t l;
    lease_on(&l, fd);
    cr_assert_eq(mxop__lease_enter(&l), 1);
    mxop__lease_leave(&l);
    cr_assert_eq(l.page->slots[0].holder, 0, "a process that stopped spinning kept its slot");
    cr_assert_eq(l.state, MXOP__LEASE_FREE);
    mxop__lease_unmap(&l);
    close(fd);
}

Test(lease, a_failed_spin_keeps_a_slot_taken_for_its_call_only)
{
    int fd = page_fd(1);
    mxop__lease_t l;
    lease_on(&l, fd);
    /* Taken for this call: its worker may have slept through other turns; kept. */
    cr_assert_eq(mxop__lease_enter(&l), 1);
    mxop__lease_spin_failed(&l);
    cr_assert_eq(l.page->slots[0].holder, (uint32_t)getpid(), "a fresh slot was let go");
    /* Held from an earlier call: a failed spin now means a long op; let go. */
    cr_assert_eq(mxop__lease_enter(&l), 1);
    mxop__lease_spin_failed(&l);
    cr_assert_eq(l.page->slots[0].holder, 0, "a failed spin kept the slot");
    mxop__lease_unmap(&l);
    close(fd);
}

Test(lease, a_holder_that_never_lets_go_is_waited_for_only_up_to_the_bound)
{
    int fd = page_fd(1);
    mxop__lease_t l;
    lease_on(&l, fd);
    /*
     * A hostile process of the same uid (or a bug): the slot's holder says
     * its last call is an hour from now, so it never looks idle or gone,
     * and it never hands the slot over.
     */
    mxop__lease_slot_t *s = &l.page->slots[0];
    int64_t hour = 3600 * (int64_t)1000000000;
    atomic_store(&s->holder, (uint32_t)getppid());
    atomic_store(&s->since_ns, mxop__now_ns() + hour);
    atomic_store(&s->last_ns, mxop__now_ns() + hour);
    int64_t t0 = mxop__now_ns();
    cr_assert_eq(mxop__lease_enter(&l), 0, "took a slot another process holds");
    int64_t waited = mxop__now_ns() - t0;
    cr_assert_eq(l.gave_up, 1);
    cr_assert_geq(waited, (int64_t)MXOP__LEASE_STUCK_NS);
    cr_assert_lt(waited, (int64_t)MXOP__LEASE_WAIT_MAX_NS, "waited %lld ns", (long long)waited);
    /* For a while after, calls do not wait for it at all. */
    t0 = mxop__now_ns();
    for (int i = 0; i < 100; i++)
        cr_assert_eq(mxop__lease_enter(&l), 0);
    cr_assert_lt(mxop__now_ns() - t0, (int64_t)MXOP__LEASE_STUCK_NS,
                 "calls kept waiting for a slot that never frees");
    cr_assert_eq(l.gave_up, 1);
    cr_assert_eq(atomic_load(&s->holder), (uint32_t)getppid(), "the holder's slot was changed");
    mxop__lease_unmap(&l);
    close(fd);
}

Test(lease, a_page_that_is_not_a_lease_page_is_refused)
{
    mxop__lease_t l;
    uint32_t bad_slots[] = {0, MXOP__LEASE_SLOTS_MAX + 1};
    for (int i = 0; i < 2; i++) {
        int fd = page_fd(bad_slots[i]);
        memset(&l, 0, sizeof(l));
        cr_assert_eq(mxop__lease_map(&l, fd), -1, "%u slots accepted", bad_slots[i]);
        cr_assert_null(l.page);
        cr_assert_eq(mxop__lease_enter(&l), 0);
        close(fd);
    }
    int fd = page_fd(1);
    cr_assert_eq(ftruncate(fd, 64), 0);
    cr_assert_eq(mxop__lease_map(&l, fd), -1, "a page too small was accepted");
    close(fd);
    fd = memfd_create("not-a-lease", MFD_CLOEXEC);
    cr_assert_eq(ftruncate(fd, sizeof(mxop__lease_page_t)), 0);
    cr_assert_eq(mxop__lease_map(&l, fd), -1, "a page without the magic was accepted");
    close(fd);
}

Test(lease, a_slot_count_changed_under_a_session_takes_no_slot)
{
    int fd = page_fd(1);
    mxop__lease_t l;
    lease_on(&l, fd);
    cr_assert_eq(mxop__lease_enter(&l), 1);
    mxop__lease_leave(&l);
    /* Another process of the uid writes a count past the slots the page has. */
    l.page->n_slots = 1000;
    cr_assert_eq(mxop__lease_enter(&l), 0, "took a slot the page does not have");
    cr_assert_eq(l.gave_up, 1);
    cr_assert_eq(l.state, MXOP__LEASE_OFF);
    mxop__lease_unmap(&l);
    close(fd);
}

/* ---- through the daemon ---- */

static mxt_daemon_t daemon_;

static void dsetup(void)
{
    mxt_daemon_start(&daemon_, NULL);
}

static void dteardown(void)
{
    mxt_daemon_stop(&daemon_);
}

TestSuite(lease_daemon, .init = dsetup, .fini = dteardown, .timeout = 120);

Test(lease_daemon, sessions_of_one_uid_share_one_page)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    mxop_client_t *b = mxt_connect_with(&daemon_, libs);
    cr_assert_not_null(a->lease.page, "the session has no lease page");
    cr_assert_not_null(b->lease.page);
    cr_assert_geq(a->lease.page->n_slots, 1);
    /* One page: what one session's mapping holds, the other's shows. */
    atomic_fetch_add(&a->lease.page->handovers, 7);
    cr_assert_eq(atomic_load(&b->lease.page->handovers), atomic_load(&a->lease.page->handovers),
                 "two sessions of one uid were given different pages");
    char why[512];
    cr_assert_null(mxt_relu_calls(a, 1, 200, why, sizeof(why)), "%s", why);
    cr_assert_null(mxt_relu_calls(b, 2, 200, why, sizeof(why)), "%s", why);
    mxop_close(a);
    mxop_close(b);
}

Test(lease_daemon, a_page_that_never_frees_costs_calls_time_not_results)
{
    const char *libs[] = {"relu.so", NULL};
    mxop_client_t *a = mxt_connect_with(&daemon_, libs);
    mxop_client_t *b = mxt_connect_with(&daemon_, libs);
    cr_assert_not_null(a->lease.page);
    /* A process of the same uid holds the only slots for ever (its last call an hour away). */
    int64_t hour = 3600 * (int64_t)1000000000;
    for (uint32_t i = 0; i < a->lease.page->n_slots; i++) {
        atomic_store(&a->lease.page->slots[i].holder, (uint32_t)getppid());
        atomic_store(&a->lease.page->slots[i].since_ns, mxop__now_ns() + hour);
        atomic_store(&a->lease.page->slots[i].last_ns, mxop__now_ns() + hour);
    }
    char why[512];
    cr_assert_null(mxt_relu_calls(b, 2, 300, why, sizeof(why)), "%s", why);
    if (b->sess.chan == MXOP__CHAN_MBOX)
        cr_assert_geq(b->lease.gave_up, 1, "the calls did not meet the stuck page");
    /* The daemon and a new session are unaffected. */
    mxop_client_t *c = mxt_connect_with(&daemon_, libs);
    cr_assert_null(mxt_relu_calls(c, 3, 100, why, sizeof(why)), "%s", why);
    mxop_close(c);
    mxop_close(b);
    mxop_close(a);
}
