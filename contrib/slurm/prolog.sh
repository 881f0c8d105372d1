#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/mxop-prolog.sh, PrologFlags=Alloc
# so that it runs on every node of the job at allocation, as root): starts one
# mxop-serverd for the job on this node, which every rank of the job on the
# node shares (one daemon per node, not per rank).  Its socket is
# RUNDIR/job-ID.sock, group the job's, mode 0660; only root and the job's
# user and group are served.  The TaskProlog (task-prolog.sh) exports
# MXOP_SOCKET to the job's tasks; the Epilog (epilog.sh) stops the daemon.
# A non-zero exit drains the node in Slurm: the prolog fails only when the
# daemon cannot start or does not become ready.
#
# Settings (environment, or edit here): MXOP_RUNDIR (/run/mxop),
# MXOP_LOGDIR (/var/log/mxop), MXOP_SERVERD, MXOP_CLI, MXOP_CONFIG
# (/etc/mxop/mxop-serverd.conf if it exists), MXOP_READY_TIMEOUT_S (30).
set -eu
: "${SLURM_JOB_ID:?the Prolog runs with SLURM_JOB_ID set}"
: "${SLURM_JOB_UID:?the Prolog runs with SLURM_JOB_UID set}"
RUNDIR=${MXOP_RUNDIR:-/run/mxop}
LOGDIR=${MXOP_LOGDIR:-/var/log/mxop}
SERVERD=${MXOP_SERVERD:-mxop-serverd}
CLI=${MXOP_CLI:-mxop}
CONFIG=${MXOP_CONFIG:-/etc/mxop/mxop-serverd.conf}
GID=${SLURM_JOB_GID:-$(id -g "$SLURM_JOB_UID")}
SOCK=$RUNDIR/job-$SLURM_JOB_ID.sock
PIDFILE=$RUNDIR/job-$SLURM_JOB_ID.pid

mkdir -p "$RUNDIR" "$LOGDIR"
# Others pass through the directory to the socket; the socket's mode decides.
chmod 0755 "$RUNDIR"
set -- --socket "$SOCK" --socket-mode 0660 --socket-group "$GID" \
    --allow-uid "$SLURM_JOB_UID" --allow-gid "$GID" \
    --log-file "$LOGDIR/job-$SLURM_JOB_ID.log"
if [ -f "$CONFIG" ]; then
    set -- --config "$CONFIG" "$@"
else
    set -- --plugin-dir "${MXOP_PLUGIN_DIR:-/usr/lib/mxop/plugins}" "$@"
fi
# Detached from the prolog (its own session, no terminal, stdin closed):
# Slurm waits for the prolog, not for the daemon.
setsid "$SERVERD" "$@" </dev/null >/dev/null 2>>"$LOGDIR/job-$SLURM_JOB_ID.log" &
echo $! >"$PIDFILE"

# Ready: a worker starts with the sandbox applied (mxop health --ready).
deadline=$(($(date +%s) + ${MXOP_READY_TIMEOUT_S:-30}))
while :; do
    if [ -S "$SOCK" ] && "$CLI" health --ready --quiet --socket "$SOCK" --timeout-ms 5000; then
        exit 0
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "mxop prolog: mxop-serverd for job $SLURM_JOB_ID exited; see $LOGDIR/job-$SLURM_JOB_ID.log" >&2
        rm -f "$PIDFILE"
        exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "mxop prolog: mxop-serverd for job $SLURM_JOB_ID not ready in time" >&2
        kill "$(cat "$PIDFILE")" 2>/dev/null || true
        rm -f "$PIDFILE"
        exit 1
    fi
    sleep 0.2
done
