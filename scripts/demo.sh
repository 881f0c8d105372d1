#!/bin/sh
# The main job: start a private mxop-serverd, train a small network whose
# matrix products and activations are custom ops served by it (one op
# crashes along the way), then stop the daemon.  Usage: demo.sh BUILD
set -u
B=${1:?usage: demo.sh BUILD}
dir=$(mktemp -d /tmp/mxop-demo-XXXXXX)
mkdir "$dir/plugins"
cp "$B/plugins/relu.so" "$B/plugins/gemm.so" "$B/tests/plugins/crash.so" "$dir/plugins/"
daemon_pid=""
cleanup() {
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null
        wait "$daemon_pid" 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

echo "demo: starting mxop-serverd on $dir/mxop.sock"
"$B/bin/mxop-serverd" --socket "$dir/mxop.sock" --plugin-dir "$dir/plugins" --log-level info &
daemon_pid=$!
i=0
while [ ! -S "$dir/mxop.sock" ]; do
    i=$((i + 1))
    if [ $i -gt 500 ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
        echo "demo: mxop-serverd did not start" >&2
        exit 1
    fi
    sleep 0.01
done

MXOP_SOCKET="$dir/mxop.sock" "$B/bin/train"
rc=$?
echo "demo: stopping mxop-serverd"
exit $rc
