/*
 * shm/region.c - memfd regions: creation, checking, mapping, pre-faulting.
 */
#include "shm/region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxop/errors.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int mxop__region_create_fd(const char *name, size_t size, int *fd_out)
{
    return mxop__region_create_fd_sealable(name, size, 0, 0, fd_out);
}

size_t mxop__region_split(size_t size, int told)
{
    if (size < MXOP__REGION_SPLIT_MIN)
        return 0;
    size_t upper = told ? size / 8 : size / 2;
    return (size - upper) / MXOP__PREFAULT_MAX * MXOP__PREFAULT_MAX;
}

int mxop__region_reserve_pages(int fd, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    int err = posix_fallocate(fd, (off_t)off, (off_t)len);
    if (err == 0)
        return 0;
    errno = err;
    return MXOP_ESHM;
}

int mxop__region_create_fd_sealable(const char *name, size_t size, int sealable,
                                    size_t reserve_from, int *fd_out)
{
    if (size == 0 || reserve_from > size)
        return MXOP_EINVAL;
    int fd = memfd_create(name ? name : "mxop-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return MXOP_ESHM;
    if (ftruncate(fd, (off_t)size) != 0)
        goto err_fd;
    /*
     * Reserve the pages now: on a full /dev/shm (tmpfs) this fails here with
     * ENOSPC instead of raising SIGBUS in whichever process touches the page.
     */
    if (mxop__region_reserve_pages(fd, reserve_from, size - reserve_from) != 0)
        goto err_fd;
    /*
     * Nobody may shrink a region under a mapping (that too would SIGBUS).  A
     * sealable one stays open to more seals: the daemon seals it read-only
     * for good when its session runs an untrusted library (memconfine.c).
     */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | (sealable ? 0 : F_SEAL_SEAL)) != 0)
        goto err_fd;
    *fd_out = fd;
    return 0;

err_fd : {
    int saved = errno;
    close(fd);
    errno = saved;
}
    return MXOP_ESHM;
}

int mxop__region_check_fd(int fd, uint64_t size, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "region fd cannot be inspected: %s", strerror(errno));
        return MXOP_EINVAL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "region fd is not a memfd or shared memory file");
        return MXOP_EINVAL;
    }
    if (size == 0) {
        snprintf(err, errlen, "region size is 0");
        return MXOP_EINVAL;
    }
    if ((uint64_t)st.st_size < size) {
        snprintf(err, errlen, "region fd holds %lld bytes, fewer than the %llu declared",
                 (long long)st.st_size, (unsigned long long)size);
        return MXOP_EINVAL;
    }
    int acc = fcntl(fd, F_GETFL);
    if (acc < 0 || (acc & O_ACCMODE) != O_RDWR) {
        snprintf(err, errlen, "region fd is not open for reading and writing");
        return MXOP_EINVAL;
    }
    return 0;
}

int mxop__region_map(int fd, size_t size, int writable, void **base)
{
    int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return MXOP_ESHM;
    *base = p;
    return 0;
}

void mxop__region_unmap(void *base, size_t size)
{
    if (base != NULL && size > 0)
        munmap(base, size);
}

int mxop__region_prefault(void *base, size_t size, int writable)
{
    /*
     * A fresh shared mapping costs a page fault per page on first touch
     * (~2-6 us each on a VM: 30-100 ms for 64 MiB).  Populate the page
     * tables of the head now; see MXOP__PREFAULT_MAX for why not all.
     */
    if (size > MXOP__PREFAULT_MAX)
        size = MXOP__PREFAULT_MAX;
    if (madvise(base, size, writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    volatile unsigned char *p = base;
    for (size_t off = 0; off < size; off += (size_t)page) {
        if (writable)
            p[off] = p[off];
        else
            (void)p[off];
    }
    return 0;
}
