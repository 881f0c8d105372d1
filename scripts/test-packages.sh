#!/bin/sh
# The packages, checked end to end (make check-packages, part of make check):
#   1. libmxop.so exports the public API only, every function the Python
#      package binds, and has the soname libmxop.so.0;
#   2. the uninstalled mxop.pc / mxop-plugin.pc build a client and an op library
#      from the build tree, and the client runs against a daemon; they hold no
#      absolute path, so the same works from a copy of the tree elsewhere;
#   3. make install into a temporary root installs mxop, the units, the
#      library's links and the Python package with its C extensions (which
#      it loads from beside itself), its .pc files build the same client and op library,
#      and make uninstall removes exactly what it installed (a file that was
#      there before stays);
#   4. make deb's packages, unpacked with dpkg-deb -x into a temporary root:
#      the daemon started from there (finding its worker there) serves a C
#      client built with the unpacked headers, .pc and library, and the
#      unpacked Python package;
#   5. lintian finds no error and no warning in them (the overrides in
#      contrib/debian/*.lintian-overrides say why each ignored tag is);
#   6. dpkg installs them into a throw-away root (dpkg --root, maintainer
#      scripts run outside a chroot with DPKG_ROOT set), Python byte-code is
#      written there, and dpkg --purge leaves nothing but dpkg's own database.
# Usage: test-packages.sh BUILD [PYTHON]
set -eu
B=${1:?usage: test-packages.sh BUILD [PYTHON]}
PY=${2:-/usr/bin/python3}
SRC=$(pwd)
# A SANITIZE= build's libraries need the sanitizer's runtime: the clients built
# here link it, and Python preloads it.
. "$SRC/scripts/sanitizer-env.sh"
T=$(mktemp -d /tmp/mxop-pkg-XXXXXX)
DPID=
cleanup() {
    if [ -n "$DPID" ]; then
        kill "$DPID" 2>/dev/null || true
        wait "$DPID" 2>/dev/null || true
    fi
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "test-packages: FAIL: $*" >&2
    exit 1
}
pass() { echo "test-packages: ok: $*"; }

# --- 1. exported symbols ---------------------------------------------------
so=$B/lib/libmxop.so
# The defined dynamic symbols, without their version (name@@MXOP_0).
syms() { nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//'; }
bad=$(syms | grep -v '^mxop_[a-z]' | grep -v '^MXOP_0$' || true)
[ -z "$bad" ] || fail "libmxop.so exports internal symbols: $(echo "$bad" | head -5 | tr '\n' ' ')"
n=$(syms | grep -c '^mxop_[a-z]')
for s in $(syms | grep '^mxop_[a-z]'); do
    grep -qw "$s" include/mxop/*.h || fail "$s is exported but in no public header"
done
need=$("$PY" -c "
import sys; sys.path.insert(0, 'python')
from mxop._lib import _PROTOTYPES
print(' '.join(sorted(_PROTOTYPES)))")
for s in $need; do
    syms | grep -qx "$s" ||
        fail "python/mxop/_lib.py binds $s, which libmxop.so does not export"
done
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libmxop.so.0 ] || fail "soname is '$soname', not libmxop.so.0"
pass "libmxop.so exports $n public functions and nothing else; soname $soname"

# A client and an op library, built the way users build them.
cat >"$T/client.c" <<'C'
#include <stdio.h>
#include <mxop/client.h>
int main(int argc, char **argv)
{
    mxop_client_t *c;
    if (mxop_connect(argv[1], NULL, &c) != 0) {
        fprintf(stderr, "connect: %s\n", mxop_connect_error());
        return 1;
    }
    int rc = mxop_load_library(c, "relu.so");
    const mxop_op_t *op = NULL;
    if (rc == 0)
        mxop_op_find(c, "relu", &op);
    int64_t shape[1] = {5};
    mxop_array_t x, y;
    if (op == NULL || mxop_array_alloc(c, MXOP_F32, 1, shape, &x) != 0 ||
        mxop_array_alloc(c, MXOP_F32, 1, shape, &y) != 0) {
        fprintf(stderr, "setup: %s\n", mxop_last_error(c));
        return 1;
    }
    float *xf = x.data, *yf = y.data;
    for (int i = 0; i < 5; i++)
        xf[i] = (float)(i - 2);
    rc = mxop_forward(c, op, NULL, &x, 1, &y, 1);
    if (rc != 0) {
        fprintf(stderr, "forward: %s\n", mxop_last_error(c));
        return 1;
    }
    printf("relu:");
    for (int i = 0; i < 5; i++)
        printf(" %g", yf[i]);
    printf("\n");
    mxop_close(c);
    return argc > 2 ? 0 : 0;
}
C
cat >"$T/plugin.c" <<'C'
#include <mxop/op.h>
MXOP_PLUGIN("pkgtest", "1.0");
C

# start_daemon SERVERD PLUGINDIR [ARGS...]: a daemon on $T/d.sock, logging to $T/d.log.
start_daemon() {
    serverd=$1 plugins=$2
    shift 2
    rm -f "$T/d.sock"
    "$serverd" --socket "$T/d.sock" --plugin-dir "$plugins" "$@" 2>"$T/d.log" &
    DPID=$!
    i=0
    while [ ! -S "$T/d.sock" ]; do
        i=$((i + 1))
        [ $i -lt 200 ] || fail "$serverd did not start: $(cat "$T/d.log")"
        kill -0 "$DPID" 2>/dev/null || fail "$serverd exited: $(cat "$T/d.log")"
        sleep 0.05
    done
}
stop_daemon() {
    kill -TERM "$DPID"
    wait "$DPID" || fail "the daemon did not exit 0: $(cat "$T/d.log")"
    DPID=
}
expect_relu() {
    out=$("$@" "$T/d.sock") || fail "client failed: $out $(cat "$T/d.log")"
    [ "$out" = "relu: 0 0 0 1 2" ] || fail "client printed '$out'"
}

# --- 2. from the build tree (the uninstalled .pc files) ----------------------
export PKG_CONFIG_PATH="$B"
cflags=$(pkg-config --cflags mxop) && libs=$(pkg-config --libs mxop) ||
    fail "pkg-config mxop (uninstalled) failed"
cc $SANFLAGS $cflags "$T/client.c" -o "$T/client-tree" $libs || fail "building with mxop-uninstalled.pc"
cc $(pkg-config --cflags mxop-plugin) -shared -fPIC "$T/plugin.c" -o "$T/plugin-tree.so" ||
    fail "building with mxop-plugin-uninstalled.pc"
mkdir "$T/plugins"
cp "$B/plugins/relu.so" "$T/plugins/"
start_daemon "$B/bin/mxop-serverd" "$T/plugins"
LD_LIBRARY_PATH="$B/lib" expect_relu "$T/client-tree"
stop_daemon
pass "the uninstalled mxop.pc and mxop-plugin.pc build a client and an op library; the client runs"

# --- 2b. the same from a moved tree: the .pc files hold no absolute path -----
for pc in "$B"/*-uninstalled.pc; do
    ! grep -q "$SRC" "$pc" || fail "$pc names the tree it was built in ($SRC): $(grep "$SRC" "$pc")"
done
# The tree moved: its headers, the build's libraries and .pc files, at the same
# places relative to each other, somewhere else.
relB=$(realpath --relative-to="$SRC" "$B")
M="$T/moved/tree"
mkdir -p "$M/$relB"
cp -r "$SRC/include" "$M/"
cp -r "$B/lib" "$M/$relB/"
cp "$B"/*-uninstalled.pc "$M/$relB/"
cflags=$(PKG_CONFIG_PATH="$M/$relB" pkg-config --cflags mxop) &&
    libs=$(PKG_CONFIG_PATH="$M/$relB" pkg-config --libs mxop) ||
    fail "pkg-config mxop (uninstalled, moved) failed"
case "$cflags $libs" in
*"$SRC"*) fail "the moved tree's mxop.pc still points at $SRC: $cflags $libs" ;;
*"$M/"*) ;;
*) fail "the moved tree's mxop.pc does not point into it: $cflags $libs" ;;
esac
cc $SANFLAGS $cflags "$T/client.c" -o "$T/client-moved" $libs || fail "building with a moved mxop-uninstalled.pc"
cc $(PKG_CONFIG_PATH="$M/$relB" pkg-config --cflags mxop-plugin) -shared -fPIC "$T/plugin.c" \
    -o "$T/plugin-moved.so" || fail "building with a moved mxop-plugin-uninstalled.pc"
[ "$(PKG_CONFIG_PATH="$M/$relB" pkg-config --variable=plugindir mxop-plugin)" = "$M/$relB/plugins" ] ||
    fail "the moved mxop-plugin.pc's plugindir is not in the moved tree"
start_daemon "$B/bin/mxop-serverd" "$T/plugins"
LD_LIBRARY_PATH="$M/$relB/lib" expect_relu "$T/client-moved"
stop_daemon
pass "the build tree's .pc files name no absolute path: a moved tree builds a client and an op library with them"

# --- 3. make install / make uninstall ---------------------------------------
R=$T/root
mkdir -p "$R/usr/local/bin"
echo keep >"$R/usr/local/bin/someone-elses"
make -s --no-print-directory -C "$SRC" B="$B" install DESTDIR="$R" PREFIX=/usr/local >/dev/null ||
    fail "make install"
for f in usr/local/bin/mxop usr/local/bin/mxop-serverd usr/local/libexec/mxop/mxop-worker \
    usr/local/lib/libmxop.so.0 usr/local/lib/libmxop.so usr/local/include/mxop/client.h \
    usr/local/lib/pkgconfig/mxop.pc usr/local/lib/systemd/system/mxop-serverd.service \
    usr/local/lib/systemd/system/mxop-serverd.socket usr/local/etc/mxop/mxop-serverd.conf; do
    [ -e "$R/$f" ] || fail "make install did not install /$f"
done
[ "$(readlink "$R/usr/local/lib/libmxop.so.0")" = "libmxop.so.$(sed -n 's/^#define MXOP_VERSION_STRING "\(.*\)"/\1/p' include/mxop/client.h)" ] ||
    fail "libmxop.so.0 does not link to the versioned file"
grep -q "ExecStart=/usr/local/bin/mxop-serverd --config /usr/local/etc/mxop/mxop-serverd.conf" \
    "$R/usr/local/lib/systemd/system/mxop-serverd.service" || fail "the unit's paths were not filled in"
export PKG_CONFIG_PATH="$R/usr/local/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$R"
cc $SANFLAGS $(pkg-config --cflags mxop) "$T/client.c" -o "$T/client-inst" $(pkg-config --libs mxop) ||
    fail "building with the installed mxop.pc"
cc $(pkg-config --cflags mxop-plugin) -shared -fPIC "$T/plugin.c" -o "$T/plugin-inst.so" ||
    fail "building with the installed mxop-plugin.pc"
start_daemon "$R/usr/local/bin/mxop-serverd" "$R/usr/local/lib/mxop/plugins"
LD_LIBRARY_PATH="$R/usr/local/lib" expect_relu "$T/client-inst"
# The installed Python package loads the C extensions installed beside it
# (no MXOP_BUILD_DIR): _fastcall.so, and _torchops.so for torch.ops.mxop.
PYDIR=/usr/local/lib/python$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages
for f in "$PYDIR/mxop/__init__.py" "$PYDIR/mxop/torch.py"; do
    [ -e "$R$f" ] || fail "make install did not install $f"
done
want=""
for so in _fastcall.so _torchops.so; do
    if [ -f "$B/python/$so" ]; then
        [ -e "$R$PYDIR/mxop/$so" ] || fail "make install did not install $PYDIR/mxop/$so"
        want="$want $so"
    fi
done
out=$(cd "$T" && env -u MXOP_BUILD_DIR -u MXOP_NO_FASTCALL LD_PRELOAD="$SAN_RT" PYTHONPATH="$R$PYDIR" \
    MXOP_LIB="$R/usr/local/lib/libmxop.so.0" WANT="$want" "$PY" -c "
import os, numpy as np, mxop
from mxop import _fast
here = os.path.dirname(os.path.abspath(mxop.__file__))
assert here == '$R$PYDIR/mxop', here
c = mxop.connect('$T/d.sock')
relu = c.load('relu.so').relu
print(' '.join('%g' % v for v in relu(np.arange(-2, 3, dtype=np.float32))))
want = os.environ['WANT'].split()
if '_fastcall.so' in want:
    assert os.path.dirname(_fast.load().__file__) == here, _fast.load()
if '_torchops.so' in want and not os.environ.get('LD_PRELOAD'):
    import torch, mxop.torch as mt
    from mxop import _torch_library as tl
    mt.TorchOp(relu)
    x = torch.tensor([-1.0, 2.0])
    assert [torch.ops.mxop.relu(x).tolist() for _ in range(3)][2] == [0.0, 2.0]
    assert os.path.dirname(tl.cpp()._name) == here and tl.cpp_calls() >= 2, tl.cpp()
c.close()") || fail "the installed Python package: $out"
[ "$out" = "0 0 0 1 2" ] || fail "the installed python package printed '$out'"
stop_daemon
unset PKG_CONFIG_SYSROOT_DIR
# Byte-code, as any import by a user who may write there leaves it: uninstall removes it too.
"$PY" -m compileall -q "$R$PYDIR/mxop" >/dev/null || fail "compileall of the installed package"
[ -d "$R$PYDIR/mxop/__pycache__" ] || fail "compileall wrote no __pycache__"
make -s --no-print-directory -C "$SRC" B="$B" uninstall DESTDIR="$R" PREFIX=/usr/local >/dev/null ||
    fail "make uninstall"
left=$(cd "$R" && find . -mindepth 1 | sort | tr '\n' ' ')
[ "$left" = "./usr ./usr/local ./usr/local/bin ./usr/local/bin/someone-elses " ] ||
    fail "make uninstall left or removed the wrong things: $left"
pass "make install installs mxop, the units, the library's links, the Python package with its C extensions; its .pc files and package work; make uninstall removes exactly that"

# --- 4. make deb, unpacked ---------------------------------------------------
make -s --no-print-directory -C "$SRC" B="$B" deb >/dev/null || fail "make deb"
D=$T/deb
mkdir "$D"
for p in mxop-serverd libmxop0 libmxop-dev python3-mxop; do
    deb=$(ls "$B"/deb/${p}_*.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] || fail "make deb built no $p package"
    dpkg-deb -x "$deb" "$D" || fail "dpkg-deb -x $deb"
done
start_daemon "$D/usr/bin/mxop-serverd" "$D/usr/lib/mxop/plugins"
grep -q "worker $D/usr/libexec/mxop/mxop-worker" "$T/d.log" ||
    fail "the unpacked daemon does not use the unpacked worker: $(cat "$T/d.log")"
export PKG_CONFIG_PATH="$D/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
cc $SANFLAGS $(pkg-config --cflags mxop) "$T/client.c" -o "$T/client-deb" $(pkg-config --libs mxop) ||
    fail "building with the packaged headers and mxop.pc"
unset PKG_CONFIG_SYSROOT_DIR
LD_LIBRARY_PATH="$D/usr/lib" expect_relu "$T/client-deb"
out=$(cd "$T" && LD_PRELOAD="$SAN_RT" PYTHONPATH="$D/usr/lib/python3/dist-packages" MXOP_LIB="$D/usr/lib/libmxop.so.0" \
    "$PY" -c "
import numpy as np, mxop
assert mxop.__file__.startswith('$D'), mxop.__file__
c = mxop.connect('$T/d.sock')
relu = c.load('relu.so').relu
print(' '.join('%g' % v for v in relu(np.arange(-2, 3, dtype=np.float32))))
c.close()") || fail "the packaged Python package: $out"
[ "$out" = "0 0 0 1 2" ] || fail "python printed '$out'"
for so in $want; do
    [ -e "$D/usr/lib/python3/dist-packages/mxop/$so" ] || fail "python3-mxop has no mxop/$so"
done
stop_daemon
pass "make deb's packages unpacked: the daemon runs its own worker and serves a C client and Python"

# --- 5. lintian --------------------------------------------------------------
command -v lintian >/dev/null || fail "lintian is not installed (scripts/install-deps.sh installs it)"
tags=$(lintian --fail-on none "$B"/deb/*.deb 2>&1 | grep -E '^[EW]: ' || true)
[ -z "$tags" ] || fail "lintian: $tags"
pass "lintian: no error or warning in make deb's packages"

# --- 6. dpkg --root: install, byte-code, purge --------------------------------
P=$T/dpkgroot
mkdir -p "$P/var/lib/dpkg/info" "$P/var/lib/dpkg/updates" "$P/var/lib/dpkg/triggers"
: >"$P/var/lib/dpkg/status"
: >"$P/var/lib/dpkg/available"
# The root has no libc, python3 or libuv of its own: dependencies are not checked
# there (--force-depends), and the scripts run here with DPKG_ROOT set.
DPKG="dpkg --root=$P --force-script-chrootless --force-depends --force-not-root --log=/dev/null"
$DPKG -i "$B"/deb/*.deb >"$T/dpkg.log" 2>&1 || fail "dpkg --root -i: $(cat "$T/dpkg.log")"
for f in usr/bin/mxop-serverd usr/lib/libmxop.so.0 lib/systemd/system/mxop-serverd.socket \
    etc/mxop/mxop-serverd.conf usr/lib/python3/dist-packages/mxop/__init__.py \
    usr/share/doc/libmxop0/copyright; do
    [ -e "$P/$f" ] || fail "dpkg --root -i did not install /$f"
done
[ "$($DPKG -l libmxop0 2>/dev/null | awk '/^ii/ {print $2}')" = libmxop0 ] ||
    fail "libmxop0 is not installed in the throw-away root"
"$PY" -m compileall -q "$P/usr/lib/python3/dist-packages/mxop" >/dev/null
[ -d "$P/usr/lib/python3/dist-packages/mxop/__pycache__" ] || fail "compileall wrote no __pycache__"
$DPKG --purge python3-mxop libmxop-dev mxop-serverd libmxop0 >>"$T/dpkg.log" 2>&1 ||
    fail "dpkg --root --purge: $(cat "$T/dpkg.log")"
left=$(cd "$P" && find . -mindepth 1 ! -path './var' ! -path './var/lib' ! -path './var/lib/dpkg' \
    ! -path './var/lib/dpkg/*' | sort | tr '\n' ' ')
[ -z "$left" ] || fail "dpkg --purge left files in the throw-away root: $left"
pass "dpkg --root installs the packages and --purge leaves nothing behind (byte-code included)"
