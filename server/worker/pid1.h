/*
 * server/worker/pid1.h - the worker as its processes' reaper (pid 1 of its
 * pid namespace, or their subreaper).
 */
#ifndef MXOP_SERVER_WORKER_PID1_H
#define MXOP_SERVER_WORKER_PID1_H

/* Installs the SIGCHLD handler that wakes the idle worker to reap.  0 or a negative errno. */
int mxop__pid1_install(void);

/* Reaps every child that has exited; called only while no op or load runs. */
void mxop__pid1_reap(void);

#endif
