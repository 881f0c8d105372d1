#!/bin/sh
# Runs the Python package's tests with the interpreter that sees Debian's
# numpy and torch.  Usage: run-python-tests.sh BUILD PYTHON
B=${1:?}
PY=${2:-/usr/bin/python3}
MXOP_BUILD_DIR="$B" PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q python/tests
rc=$?
# pytest's 5 means no tests were collected: the package has none yet.
[ $rc -eq 5 ] && exit 0
exit $rc
