/*
 * tests/plugins/no_init.c - a valid mxop_plugin_info but no
 * mxop_plugin_init: refused at load with MXOP_ELIB_INVALID.
 */
#include "mxop/op.h"

MXOP_PLUGIN("no_init", "1.0");
