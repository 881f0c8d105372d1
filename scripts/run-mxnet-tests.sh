#!/bin/sh
# Runs the MXNet proxy tests (python/tests/mxnet_proxy) with MXNet 1.9.1's own
# virtual environment.  Usage: run-mxnet-tests.sh BUILD VENV
# Extra pytest arguments can be given in $PYTEST_ARGS.
B=${1:?usage: run-mxnet-tests.sh BUILD VENV}
VENV=${2:?usage: run-mxnet-tests.sh BUILD VENV}
export MXOP_BUILD_DIR="$B"
export PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}"
unset MXOP_SOCKET MXOP_PLUGIN_DIR MXOP_MXNET_LIBS MXOP_MXNET_CONFIG MXOP_MXNET_PREFIX
# A SANITIZE= build's libmxop and proxy need their runtimes preloaded into MXNet's Python.
. "$(dirname "$0")/sanitizer-env.sh"
[ -n "$SAN_RT" ] && export LD_PRELOAD="$SAN_RT${LD_PRELOAD:+ $LD_PRELOAD}"
# python/tests/mxnet_proxy imports python/tests/conftest.py (the daemon fixture).
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --rootdir=python/tests $PYTEST_ARGS python/tests/mxnet_proxy
