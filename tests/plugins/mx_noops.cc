/*
 * tests/plugins/mx_noops.cc - a version-11 MXNet extension library with no
 * ops, run for its initialize() alone (like MXNet's init_lib example):
 * MXNet loads it, so mxop does too.
 */
#include "mx_abi.h"

static const fx::Op *fx_ops(int *n)
{
    *n = 0;
    return nullptr;
}

static int fx_init(int)
{
    return fx::OK;
}
