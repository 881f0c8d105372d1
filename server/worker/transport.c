/*
 * server/worker/transport.c - noticing at once that an op broke the
 * worker's transport.
 *
 * The worker's transport is a handful of descriptors: the supervisor and
 * data sockets (fds 3 and 4) and, once a client attached a mailbox, its two
 * eventfd bells.  strict's seccomp filter refuses closing or replacing fds
 * 3 and 4; nothing refuses an op that closes a bell, dup2()s /dev/null over
 * it, or (under basic and none) over the sockets.  A broken bell goes
 * unnoticed: a reply rung into /dev/null never wakes the client, which then
 * waits for the deadline, and a bell that is always readable spins the idle
 * worker.
 *
 * So the worker remembers what each bell was (device and inode) and looks
 * again every time it is about to sleep (two fstat() calls, on the slow
 * path only: a worker kept busy by a spinning client never gets there and
 * pays nothing).  Every break is seen there within one spin budget of the
 * call that made it: a request bell replaced by an always-readable file
 * wakes the worker at once and brings it back; a reply bell that rang into
 * nothing leaves a client asleep and the worker, its spin over, about to
 * sleep too.  A descriptor that is gone or is another file now ends the
 * worker at once with a note in the status page naming it: the daemon
 * answers the call with MXOP_EWORKER_CRASHED and that sentence, and starts
 * a new worker, within milliseconds rather than at deadline + grace.
 * The sockets (fds 3 and 4) are tracked too but need no looking at:
 * replacing or closing the worker's end closes the socket, and the peer
 * (daemon or client) sees it hang up.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/worker/worker.h"
#include "shm/worker_exit.h"

struct tracked {
    int fd; /* -1: not tracked */
    dev_t dev;
    ino_t ino;
    const char *what;
};

static struct tracked slots[MXOP__TRANSPORT_SLOTS] = {
    {-1, 0, 0, NULL}, {-1, 0, 0, NULL}, {-1, 0, 0, NULL}, {-1, 0, 0, NULL}};

void mxop__transport_track(int slot, int fd, const char *what)
{
    struct stat st;
    if (slot < 0 || slot >= MXOP__TRANSPORT_SLOTS || fd < 0 || fstat(fd, &st) != 0)
        return;
    slots[slot] = (struct tracked){fd, st.st_dev, st.st_ino, what};
}

void mxop__transport_untrack(int slot)
{
    if (slot >= 0 && slot < MXOP__TRANSPORT_SLOTS)
        slots[slot].fd = -1;
}

void mxop__transport_check(unsigned mask, const char *after)
{
    for (int i = 0; i < MXOP__TRANSPORT_SLOTS; i++) {
        const struct tracked *t = &slots[i];
        if (t->fd < 0 || !(mask & (1u << i)))
            continue;
        struct stat st;
        int gone = fstat(t->fd, &st) != 0;
        if (!gone && st.st_dev == t->dev && st.st_ino == t->ino)
            continue;
        char m[MXOP__STATUS_MSG_MAX];
        mxop__fmt(m, sizeof(m),
                  "the worker's transport was broken %s: it %s its %s (fd %d); the worker "
                  "cannot answer through it and is replaced",
                  after, gone ? "closed" : "put another file in place of", t->what, t->fd);
        mxop__fault_note(MXOP_EWORKER_CRASHED, m);
        _exit(MXOP__W_EXIT_TRANSPORT);
    }
}
