#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/etc/slurm/mxop-task-prolog.sh):
# what it prints as "export NAME=VALUE" lands in every task's environment.
# Every rank on the node gets the same socket: the job's one daemon there.
echo "export MXOP_SOCKET=${MXOP_RUNDIR:-/run/mxop}/job-${SLURM_JOB_ID}.sock"
