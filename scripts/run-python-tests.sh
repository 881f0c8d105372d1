#!/bin/sh
# Runs the Python package's tests with the interpreter that sees Debian's
# numpy and torch.  Usage: run-python-tests.sh BUILD [PYTHON]
# Every test module starts its own mxop-serverd from BUILD (bin/, plugins/,
# tests/plugins/); extra pytest arguments can be given in $PYTEST_ARGS.
B=${1:?usage: run-python-tests.sh BUILD [PYTHON]}
PY=${2:-${PYTHON:-/usr/bin/python3}}
export MXOP_BUILD_DIR="$B"
export PYTHON="$PY"
export PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}"
# The tests start their own daemons: a socket from the environment would be ignored
# by most of them but picked up by the examples, so it is cleared.
unset MXOP_SOCKET MXOP_PLUGIN_DIR
# No cache directory in the source tree.
"$PY" -m pytest -q -p no:cacheprovider $PYTEST_ARGS python/tests
rc=$?
# pytest's 5 means no tests were collected: the package has none yet.
[ $rc -eq 5 ] && exit 0
exit $rc
