#!/bin/sh
# mxop under a cluster's own tools (make check-cluster, part of make check):
#   1. contrib/kubernetes/*.yaml validated against the Kubernetes schemas by
#      kubernetes-validate (a PyPI package that ships the schemas: no network
#      at check time), and a broken copy refused, so the check can fail;
#   2. contrib/slurm/: the prolog starts a job's daemon that the job's user
#      (and only that user's group) reaches and that is ready, the task
#      prolog names its socket, the epilog stops it leaving nothing behind;
#   3. two nodes made of network namespaces, torchrun DDP across them
#      (test-multinode.sh).  The upgrade test is tests/test_upgrade.c.
# Usage: test-cluster.sh BUILD
# The validator's venv is BUILD/k8s-venv, made on first use (pip, from the
# package registry); later runs need no network.
set -eu
B=${1:?usage: test-cluster.sh BUILD}
SRC=$(pwd)
T=$(mktemp -d /tmp/mxop-cluster-XXXXXX)
chmod 755 "$T"
cleanup() {
    if [ -f "$T/run/job-$JOB.pid" ]; then
        kill -KILL "$(cat "$T/run/job-$JOB.pid")" 2>/dev/null || true
    fi
    rm -rf "$T"
}
JOB=t$$
trap cleanup EXIT
fail() {
    echo "test-cluster: FAIL: $*" >&2
    exit 1
}
pass() { echo "test-cluster: ok: $*"; }

# --- 1. Kubernetes manifests --------------------------------------------------
KV=$B/k8s-venv/bin/kubernetes-validate
if [ ! -x "$KV" ]; then
    python3 -m venv "$B/k8s-venv" || fail "cannot make the validator's venv $B/k8s-venv"
    "$B/k8s-venv/bin/pip" install -q kubernetes-validate==1.37.0 >/dev/null 2>&1 ||
        fail "pip install kubernetes-validate (needs the package registry once)"
fi
K8S_VERSION=1.33.0
for f in contrib/kubernetes/*.yaml; do
    out=$("$KV" --strict --quiet -k "$K8S_VERSION" "$f" 2>&1) || fail "$f: $out"
done
# A field the schema does not know must be refused: the check can fail.
sed 's/^      nodeSelector:/      nodeSelectorr:/' contrib/kubernetes/daemonset.yaml >"$T/broken.yaml"
if "$KV" --strict --quiet -k "$K8S_VERSION" "$T/broken.yaml" >/dev/null 2>&1; then
    fail "kubernetes-validate accepted a DaemonSet with an unknown field"
fi
pass "contrib/kubernetes/*.yaml valid for Kubernetes $K8S_VERSION (strict); a broken copy refused"

# --- 2. Slurm prolog / epilog ---------------------------------------------------
if [ "$(id -u)" != 0 ]; then
    echo "test-cluster: skipped the Slurm part: the prolog runs as root"
else
    export SLURM_JOB_ID=$JOB SLURM_JOB_UID=65533 SLURM_JOB_GID=65533
    export MXOP_RUNDIR=$T/run MXOP_LOGDIR=$T/log MXOP_SERVERD=$B/bin/mxop-serverd \
        MXOP_CLI=$B/bin/mxop MXOP_CONFIG=$T/none.conf MXOP_PLUGIN_DIR=$B/plugins
    sh contrib/slurm/prolog.sh || fail "the prolog failed: $(cat "$T/log/job-$JOB.log" 2>/dev/null)"
    eval "$(sh contrib/slurm/task-prolog.sh)"
    [ "$MXOP_SOCKET" = "$T/run/job-$JOB.sock" ] || fail "the task prolog exported $MXOP_SOCKET"
    [ -S "$MXOP_SOCKET" ] || fail "no socket at $MXOP_SOCKET"
    pid=$(cat "$T/run/job-$JOB.pid")
    as_job() { setpriv --reuid 65533 --regid 65533 --clear-groups "$@"; }
    as_job "$B/bin/mxop" health --ready --socket "$MXOP_SOCKET" >/dev/null ||
        fail "the job's user cannot use its daemon"
    if setpriv --reuid 65532 --regid 65532 --clear-groups "$B/bin/mxop" health --live \
        --socket "$MXOP_SOCKET" >/dev/null 2>&1; then
        fail "another user reached the job's daemon"
    fi
    sh contrib/slurm/epilog.sh || fail "the epilog failed"
    ! kill -0 "$pid" 2>/dev/null || fail "the job's daemon $pid still runs after the epilog"
    left=$(ls -A "$T/run")
    [ -z "$left" ] || fail "the epilog left $left in the run directory"
    grep -q "stopped" "$T/log/job-$JOB.log" || fail "the daemon did not stop cleanly: $(cat "$T/log/job-$JOB.log")"
    pass "Slurm: the prolog starts a ready per-node daemon for the job's user only, the epilog stops it, nothing left"
fi

# --- 3. many nodes ---------------------------------------------------------------
sh "$SRC/scripts/test-multinode.sh" "$B" || fail "test-multinode.sh"
