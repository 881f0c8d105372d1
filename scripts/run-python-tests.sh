#!/bin/sh
# Runs the Python package's tests.  Usage: run-python-tests.sh BUILD [PYTHON]
# The interpreter: PYTHON (the argument or the environment), else the virtual
# environment the Makefile makes (build/venv: torch 2.13, numpy, pytest; make
# builds the C extensions against it), else /usr/bin/python3.
# Every test module starts its own mxop-serverd from BUILD (bin/, plugins/,
# tests/plugins/); extra pytest arguments can be given in $PYTEST_ARGS.
B=${1:?usage: run-python-tests.sh BUILD [PYTHON]}
venv="$(pwd)/build/venv/bin/python3"
[ -x "$venv" ] || venv=/usr/bin/python3
PY=${2:-${PYTHON:-$venv}}
export MXOP_BUILD_DIR="$B"
export PYTHON="$PY"
export PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}"
# The tests start their own daemons: a socket from the environment would be ignored
# by most of them but picked up by the examples, so it is cleared.
unset MXOP_SOCKET MXOP_PLUGIN_DIR
# A sanitizer build of libmxop needs its runtimes loaded first into the interpreter.
. "$(dirname "$0")/sanitizer-env.sh"
if [ -n "$SAN_RT" ]; then
    export LD_PRELOAD="$SAN_RT${LD_PRELOAD:+ $LD_PRELOAD}"
    # Programs the tests link against the build's static libraries need the same flags.
    export MXOP_SANITIZE_CFLAGS="$SANFLAGS"
    echo "python tests: sanitizer runtimes preloaded: $SAN_RT"
fi
# No cache directory in the source tree.
"$PY" -m pytest -q -p no:cacheprovider $PYTEST_ARGS python/tests
rc=$?
# pytest's 5 means no tests were collected: the package has none yet.
[ $rc -eq 5 ] && exit 0
exit $rc
