#!/bin/sh
# The pip distribution: builds a wheel with `python -m build` and
# tests it from outside the checkout.  Usage: test-wheel.sh BUILD [build-only]
#
#  1. a fresh environment with the build tools, torch and jax builds the
#     wheel (--no-isolation, so that its _torchops.so and _jaxffi.so are
#     built against them) into BUILD/dist;
#  2. another fresh environment gets torch, jax and pytest, then the wheel;
#  3. from a directory outside the checkout, with no MXOP_* variable and no
#     PYTHONPATH: the README's Python quick start as written, the `mxop`
#     command from PATH, the embedded daemon's sandbox (`mxop status`), and a
#     subset of the binding tests (NumPy, errors, JAX, PyTorch) copied there
#     with the fixture op libraries they load.
# Everything lives in one temporary directory, removed at the end.
set -eu
B=${1:?usage: test-wheel.sh BUILD [build-only]}
MODE=${2:-test}
SRC=$(pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/mxop-wheel.XXXXXX")
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM
PIP_Q="-q --disable-pip-version-check"

echo "wheel: building in a fresh environment ($T/builder)"
python3 -m venv "$T/builder"
"$T/builder/bin/pip" install $PIP_Q build setuptools wheel -r python/requirements.txt
mkdir -p "$B/dist"
rm -f "$B"/dist/mxop-*.whl
"$T/builder/bin/python" -m build --wheel --no-isolation --outdir "$B/dist" "$SRC" >"$T/build.log" 2>&1 ||
    { tail -40 "$T/build.log"; exit 1; }
grep -A6 '^mxop build:' "$T/build.log" || true
WHL=$(ls "$B"/dist/mxop-*.whl)
echo "wheel: $WHL"
# What it must carry: the programs, libmxop, the op libraries, the extensions.
"$T/builder/bin/python" - "$WHL" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["mxop/bin/mxop-serverd", "mxop/bin/mxop-worker", "mxop/bin/mxop", "mxop/lib/libmxop.so",
        "mxop/plugins/relu.so", "mxop/plugins/gemm.so", "mxop/_jaxffi.so", "mxop/jax.py"]
missing = [n for n in need if n not in names]
assert not missing, "the wheel lacks %s" % missing
assert any(n.startswith("mxop/_fastcall") for n in names), "the wheel lacks _fastcall"
print("wheel: carries", ", ".join(need + sorted(n for n in names if "_fastcall" in n or "_torchops" in n)))
PY
[ "$MODE" = build-only ] && exit 0

echo "wheel: installing into a fresh environment ($T/venv)"
python3 -m venv "$T/venv"
"$T/venv/bin/pip" install $PIP_Q -r python/requirements.txt
"$T/venv/bin/pip" install $PIP_Q "$WHL"

# Outside the checkout, nothing set.
mkdir -p "$T/run/tests/plugins"
sed -n '/^## Quick start/,/^## /p' python/README.md |
    sed -n '/^```python/,/^```/p' | sed '1d;$d' >"$T/run/quickstart.py"
cp python/tests/conftest.py python/tests/test_numpy.py python/tests/test_errors.py \
   python/tests/test_jax.py python/tests/test_torch.py "$T/run/tests/"
cp "$B"/tests/plugins/*.so "$T/run/tests/plugins/"
# A wheel built from a SANITIZE= tree carries sanitized programs and libmxop:
# the interpreter then needs the runtimes preloaded (nothing else is set).
. "$SRC/scripts/sanitizer-env.sh"
cd "$T/run"
run() {
    env -u MXOP_BUILD_DIR -u PYTHONPATH -u MXOP_SOCKET -u MXOP_LIB -u MXOP_SERVERD \
        -u MXOP_PLUGIN_DIR -u MXOP_EMBEDDED_SOCKET -u MXOP_NO_FASTCALL PATH="$T/venv/bin:$PATH" \
        ${SAN_RT:+LD_PRELOAD="$SAN_RT"} "$@"
}
run python -c 'import mxop, sys; p = mxop.__file__; print("wheel: mxop from", p); sys.exit(not p.startswith(sys.argv[1]))' "$T/venv/"
echo "wheel: the README's quick start:"
run python quickstart.py
echo "wheel: mxop on PATH: $(run sh -c 'command -v mxop')"
run mxop run relu.so relu --input 4:f32 >/dev/null
# The embedded daemon from the wheel sandboxes its workers (docs: python/README.md).
run python -c '
import mxop, subprocess
c = mxop.connect(); c.load("relu.so")
out = subprocess.run(["mxop", "status", "--socket", c.path], capture_output=True, text=True).stdout
line = [ln for ln in out.splitlines() if ln.startswith("sandbox")]
assert line and line[0].startswith("sandbox strict"), out
print("wheel: embedded daemon:", line[0])
'
echo "wheel: binding tests from $T/run/tests"
run python -m pytest -q -p no:cacheprovider tests
