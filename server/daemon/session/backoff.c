/*
 * server/daemon/session/backoff.c - how long a session waits before it starts a
 * worker again after failures in a row (a respawn, a warm spare).
 */
#include "server/daemon/session/session.h"

uint64_t mxop__backoff_ms(int failures)
{
    if (failures <= 1)
        return 0;
    uint64_t ms = MXOP__BACKOFF_FIRST_MS;
    for (int i = 2; i < failures && ms < MXOP__BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < MXOP__BACKOFF_MAX_MS ? ms : MXOP__BACKOFF_MAX_MS;
}
