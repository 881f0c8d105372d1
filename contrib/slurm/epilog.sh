#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/mxop-epilog.sh): stops the job's
# mxop-serverd on this node.  SIGTERM lets calls in flight finish
# (drain-timeout-ms), then the daemon stops its workers, removes its socket and
# exits; after MXOP_STOP_TIMEOUT_S (60) it is killed, workers and all (their
# process groups).  Always exits 0 once nothing of the job's daemon is left.
set -u
: "${SLURM_JOB_ID:?the Epilog runs with SLURM_JOB_ID set}"
RUNDIR=${MXOP_RUNDIR:-/run/mxop}
SOCK=$RUNDIR/job-$SLURM_JOB_ID.sock
PIDFILE=$RUNDIR/job-$SLURM_JOB_ID.pid
[ -f "$PIDFILE" ] || exit 0
pid=$(cat "$PIDFILE")
# Only our daemon: the pid file's process must be mxop-serverd serving this socket.
if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--socket $SOCK"; then
    kill -TERM "$pid" 2>/dev/null || true
    waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$((${MXOP_STOP_TIMEOUT_S:-60} * 10))" ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "mxop epilog: mxop-serverd $pid did not stop; killing it and its workers" >&2
        # Workers run in process groups of their own, children of the daemon.
        for w in $(pgrep -P "$pid" 2>/dev/null); do kill -KILL -- "-$w" 2>/dev/null || true; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
fi
rm -f "$PIDFILE" "$SOCK"
exit 0
