/*
 * common/test_stop.c - see test_stop.h: the test-only hook that stops a
 * worker's start at a named stage.
 */
#include "common/test_stop.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool mxop__test_stop_wanted(const char *stage, uint64_t session, uint32_t generation)
{
    const char *v = getenv("MXOP_TEST_STOP");
    if (v == NULL || v[0] == '\0')
        return false;
    char want[32];
    unsigned long long ws = 0;
    unsigned long wg = 0;
    if (sscanf(v, "%31[a-z]:%llu:%lu", want, &ws, &wg) < 1 || strcmp(want, stage) != 0)
        return false;
    if ((ws != 0 && ws != session) || (wg != 0 && wg != generation))
        return false;
    const char *dir = getenv("MXOP_TEST_STOP_DIR");
    if (dir == NULL || dir[0] == '\0')
        return true;
    char path[512];
    int n = snprintf(path, sizeof(path), "%s/%s-%llu-%lu", dir, stage, (unsigned long long)session,
                     (unsigned long)generation);
    if (n < 0 || (size_t)n >= sizeof(path))
        return false;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}
