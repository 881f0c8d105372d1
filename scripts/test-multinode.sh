#!/bin/sh
# Two nodes on this machine (make check-cluster, through test-cluster.sh):
# two network namespaces joined by a veth link (private test addresses
# 192.168.231.1 and .2, only inside the namespaces made here), each running
# its own mxop-serverd (one daemon per node, its socket per node), and a
# `torchrun --nnodes 2 --nproc-per-node 2` DDP job over gloo across them in
# which every rank calls mxop's gemm and relu through its own node's daemon.
# tests/multinode/ddp_grads.py checks that the gradients are equal on every
# rank and to a reference computed with PyTorch's own ops, and that each
# node's ranks shared one daemon.  Everything made here is removed at exit.
#
# It needs root (namespaces, veth) and torch 2.13: the interpreter in $PYTHON
# (the Makefile passes its virtual environment's, build/venv, which `make
# python` makes; that is also the default).
# Usage: test-multinode.sh BUILD
set -eu
B=${1:?usage: test-multinode.sh BUILD}
SRC=$(pwd)
fail() {
    echo "test-multinode: FAIL: $*" >&2
    exit 1
}
if [ "$(id -u)" != 0 ]; then
    echo "test-multinode: skipped: network namespaces need root"
    exit 0
fi
command -v ip >/dev/null || fail "ip (iproute2) is missing"
PY=${PYTHON:-$SRC/build/venv/bin/python3}
# A SANITIZE= build's libmxop needs its runtimes preloaded into the ranks.
. "$SRC/scripts/sanitizer-env.sh"
"$PY" -c 'import torch, numpy' 2>/dev/null || fail "$PY has no torch (make python makes build/venv)"

T=$(mktemp -d /tmp/mxop-nodes-XXXXXX)
ID=$$
NS0=mxop-n0-$ID NS1=mxop-n1-$ID
IF0=mxv0-$ID IF1=mxv1-$ID
DPIDS= RPIDS=
cleanup() {
    for p in $RPIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $RPIDS; do wait "$p" 2>/dev/null || true; done
    for p in $DPIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $DPIDS; do wait "$p" 2>/dev/null || true; done
    ip netns del "$NS0" 2>/dev/null || true
    ip netns del "$NS1" 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

# --- the two hosts ----------------------------------------------------------------
ip netns add "$NS0" && ip netns add "$NS1" || fail "ip netns add"
ip link add "$IF0" type veth peer name "$IF1" || fail "ip link add veth"
ip link set "$IF0" netns "$NS0" && ip link set "$IF1" netns "$NS1" || fail "moving the veth ends"
ip -n "$NS0" addr add 192.168.231.1/24 dev "$IF0"
ip -n "$NS1" addr add 192.168.231.2/24 dev "$IF1"
for n in "$NS0" "$NS1"; do
    ip -n "$n" link set lo up
done
ip -n "$NS0" link set "$IF0" up
ip -n "$NS1" link set "$IF1" up

# --- one daemon per node --------------------------------------------------------------
for i in 0 1; do
    eval ns=\$NS$i
    mkdir -p "$T/node$i"
    ip netns exec "$ns" "$B/bin/mxop-serverd" --socket "$T/node$i/mxop.sock" \
        --plugin-dir "$B/plugins" --log-file "$T/node$i/serverd.log" &
    DPIDS="$DPIDS $!"
done
for i in 0 1; do
    ok=0
    for _ in $(seq 1 150); do
        if [ -S "$T/node$i/mxop.sock" ] &&
            "$B/bin/mxop" health --ready --quiet --socket "$T/node$i/mxop.sock" 2>/dev/null; then
            ok=1
            break
        fi
        sleep 0.2
    done
    [ $ok = 1 ] || fail "node $i's daemon is not ready: $(cat "$T/node$i/serverd.log")"
done

# --- torchrun on both nodes -------------------------------------------------------------
PORT=$((29400 + ID % 500))
for i in 0 1; do
    eval ns=\$NS$i
    eval ifname=\$IF$i
    ip netns exec "$ns" env MXOP_SOCKET="$T/node$i/mxop.sock" MXOP_BUILD_DIR="$B" \
        PYTHONPATH="$SRC/python" LD_PRELOAD="$SAN_RT" GLOO_SOCKET_IFNAME="$ifname" OMP_NUM_THREADS=1 \
        timeout 400 "$PY" -m torch.distributed.run --nnodes 2 --node_rank "$i" \
        --nproc_per_node 2 --master_addr 192.168.231.1 --master_port "$PORT" \
        "$SRC/tests/multinode/ddp_grads.py" >"$T/node$i.out" 2>&1 &
    RPIDS="$RPIDS $!"
done
rc=0
for p in $RPIDS; do
    wait "$p" || rc=$?
done
RPIDS=
[ $rc = 0 ] || fail "torchrun failed ($rc): node 0: $(tail -30 "$T/node0.out") node 1: $(tail -30 "$T/node1.out")"
res=$(grep '^{"world"' "$T/node0.out" || true)
[ -n "$res" ] || fail "rank 0 printed no result: $(tail -30 "$T/node0.out")"
echo "test-multinode: $res"

# --- the daemons stop cleanly ---------------------------------------------------------
for p in $DPIDS; do kill -TERM "$p"; done
for p in $DPIDS; do
    wait "$p" || fail "a node's daemon did not stop cleanly"
done
DPIDS=
for i in 0 1; do
    [ ! -e "$T/node$i/mxop.sock" ] || fail "node $i's daemon left its socket"
done
echo "test-multinode: ok: torchrun --nnodes 2 over two namespace hosts, one mxop-serverd per node, gradients equal across ranks and to the reference"
