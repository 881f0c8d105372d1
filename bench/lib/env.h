/*
 * bench/lib/env.h - where a benchmark runs: its build directory and the machine.
 */
#ifndef MXOP_BENCH_LIB_ENV_H
#define MXOP_BENCH_LIB_ENV_H

#include <stddef.h>

/**
 * The build directory: argv[1] if given, else two levels above the
 * program (BUILD/bin/bench_x).  0, or -1 when it cannot be told.
 */
int mxb_build_dir(int argc, char **argv, char *buf, size_t len);

/** "2 CPUs online, AMD EPYC, Linux 6.1.0" into buf. */
void mxb_machine_line(char *buf, size_t len);

#endif /* MXOP_BENCH_LIB_ENV_H */
