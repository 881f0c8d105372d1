/*
 * server/daemon/core/lease_pages.c - one spin-lease page per client uid
 * (shm/lease_page.h).  Pages are per uid, not per daemon, so that one
 * user's clients cannot hold another user's turns: other local users are
 * not trusted (docs/security.md).  A page is made at the first session of
 * its uid and kept until the daemon stops; the daemon itself never reads
 * it after setting its slot count.
 */
#include "server/daemon/core/lease_pages.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm/lease_page.h"

/* A slot per pair of CPUs this daemon may run on: a spinning call wants its thread and its worker.
 */
static uint32_t slots_for_cpus(void)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0) {
        long on = sysconf(_SC_NPROCESSORS_ONLN);
        n = on > 0 ? (int)on : 1;
    }
    n /= 2;
    return n < 1 ? 1 : n > MXOP__LEASE_SLOTS_MAX ? MXOP__LEASE_SLOTS_MAX : (uint32_t)n;
}

static int page_new(void)
{
    int fd = memfd_create("mxop-lease", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, sizeof(mxop__lease_page_t)) != 0) {
        close(fd);
        return -1;
    }
    mxop__lease_page_t *p =
        mmap(NULL, sizeof(mxop__lease_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -1;
    }
    p->n_slots = slots_for_cpus();
    p->magic = MXOP__LEASE_MAGIC;
    munmap(p, sizeof(*p));
    return fd;
}

int mxop__lease_page_fd(mxop__lease_pages_t *t, uid_t uid)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].uid == uid)
            return t->e[i].fd;
    if (t->n == MXOP__LEASE_UIDS)
        return -1;
    int fd = page_new();
    if (fd < 0)
        return -1;
    t->e[t->n].uid = uid;
    t->e[t->n].fd = fd;
    t->n++;
    return fd;
}

void mxop__lease_pages_free(mxop__lease_pages_t *t)
{
    for (int i = 0; i < t->n; i++)
        close(t->e[i].fd);
    t->n = 0;
}
