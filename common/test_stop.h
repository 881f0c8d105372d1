/*
 * common/test_stop.h - a hook for tests only: a worker's start stopped at
 * a named stage.
 *
 * tests/test_loop_blocking.c must stop a worker at a precise stage of its
 * start (between clone and exec, before its own set-up, before its
 * sandbox) to show that the daemon's loop never waits for it; no real,
 * observable event marks those stages from outside.  So, only when the
 * environment holds
 *
 *     MXOP_TEST_STOP=STAGE:SESSION:GENERATION   (0 for "any")
 *     MXOP_TEST_STOP_DIR=DIR                    (optional)
 *
 * does the process at that stage of that worker get SIGSTOP: the daemon
 * sends it to a new child at "exec"; the worker raises it itself at
 * "start" and "sandbox" (which a pid 1 of its own namespace cannot: use
 * --sandbox basic for those).  With DIR, the first match creates
 * DIR/STAGE-SESSION-GENERATION and only a match that creates it stops, so
 * each stage stops once and the test sees that it was reached.  Nothing
 * sets these variables but a test; docs/operations.md says so.
 */
#ifndef MXOP_COMMON_TEST_STOP_H
#define MXOP_COMMON_TEST_STOP_H

#include <stdbool.h>
#include <stdint.h>

/* True when the test hook asks for a stop at `stage` of this worker (see above). */
bool mxop__test_stop_wanted(const char *stage, uint64_t session, uint32_t generation);

#endif
