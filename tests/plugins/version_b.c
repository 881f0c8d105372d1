/*
 * tests/plugins/version_b.c - the second version of tests/plugins/version_a.c:
 * the same op "version", writing 2.0 (tests/test_reload.c).
 */
#define VERSION_VALUE 2.0
#include "mxop/op.h"
MXOP_PLUGIN("version", "2.0");
#include "version_a.c"
