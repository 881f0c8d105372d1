#!/bin/sh
# Builds mxop's Debian packages with dpkg-deb into BUILD/deb/.
# Usage: make-deb.sh BUILD VERSION   (make deb)
#
#   mxop-serverd   the daemon, the worker, the mxop command, the systemd units,
#                  the example config (a conffile) and the example op libraries
#   libmxop0       the client library (the real file and its soname link)
#   libmxop-dev    headers, mxop.pc, mxop-plugin.pc, libmxop.so, the static libraries
#   python3-mxop   the Python package (NumPy and PyTorch bindings)
#
# Everything is installed once into a staging root by scripts/install.sh
# with Debian's directories, then split between the packages by path.
set -eu
B=${1:?usage: make-deb.sh BUILD VERSION}
VERSION=${2:?usage: make-deb.sh BUILD VERSION}
ARCH=$(dpkg --print-architecture)
OUT=$B/deb
rm -rf "$OUT"
mkdir -p "$OUT"
stage=$OUT/stage
DESTDIR=$stage PREFIX=/usr BINDIR=/usr/bin LIBDIR=/usr/lib INCLUDEDIR=/usr/include \
    LIBEXECDIR=/usr/libexec/mxop PLUGINDIR=/usr/lib/mxop/plugins \
    SYSTEMDUNITDIR=/lib/systemd/system SYSCONFDIR=/etc DATADIR=/usr/share B=$B VERSION=$VERSION \
    sh scripts/install.sh install >/dev/null
# dpkg keeps its own list of a package's files.
rm -f "$stage/usr/share/mxop/install-manifest"
rmdir "$stage/usr/share/mxop"

# move PKG PATH...: moves staged paths into package PKG's tree.
move() {
    pkg=$1
    shift
    for p in "$@"; do
        for src in "$stage"/$p; do
            [ -e "$src" ] || [ -L "$src" ] || continue
            rel=${src#"$stage"/}
            mkdir -p "$OUT/$pkg/$(dirname "$rel")"
            mv "$src" "$OUT/$pkg/$rel"
        done
    done
}

move mxop-serverd usr/bin usr/libexec usr/lib/mxop lib/systemd etc usr/share/doc
move libmxop0 "usr/lib/libmxop.so.*"
move libmxop-dev usr/include usr/lib/pkgconfig usr/lib/libmxop.so "usr/lib/*.a"
py=$OUT/python3-mxop/usr/lib/python3/dist-packages/mxop
mkdir -p "$py"
cp python/mxop/*.py "$py/"
# The C extensions the build made (the package loads them from beside itself):
# with them the package is of this architecture.
PYARCH=all
for so in _fastcall.so _torchops.so; do
    if [ -f "$B/python/$so" ]; then
        install -m 755 "$B/python/$so" "$py/$so"
        PYARCH=$ARCH
    fi
done
left=$(find "$stage" -type f -o -type l)
if [ -n "$left" ]; then
    echo "make-deb.sh: staged files no package took:" >&2
    echo "$left" >&2
    exit 1
fi
rm -rf "$stage"

# control PKG ARCH DEPENDS DESCRIPTION
control() {
    mkdir -p "$OUT/$1/DEBIAN"
    size=$(du -sk "$OUT/$1" | cut -f1)
    cat >"$OUT/$1/DEBIAN/control" <<CTL
Package: $1
Version: $VERSION
Architecture: $2
Maintainer: mxop developers <mxop@localhost>
Installed-Size: $size
Depends: $3
Section: science
Priority: optional
Homepage: file:///usr/share/doc/mxop
Description: $4
CTL
}

control mxop-serverd "$ARCH" \
    "libc6, libuv1, libprotobuf-c1, libseccomp2, libstdc++6, libopenblas0 | libblas3" \
    "mxop op server: custom deep-learning ops in sandboxed worker processes
 mxop-serverd loads op libraries in worker processes confined by namespaces,
 cgroups, Landlock and seccomp, and serves clients over a Unix socket.  With
 the mxop command and systemd units (socket activation)."
echo /etc/mxop/mxop-serverd.conf >"$OUT/mxop-serverd/DEBIAN/conffiles"
control libmxop0 "$ARCH" "libc6, libprotobuf-c1" \
    "mxop client library
 libmxop talks to mxop-serverd: loads op libraries, shares tensors and calls ops."
# The loader's cache learns the new library.
echo "activate-noawait ldconfig" >"$OUT/libmxop0/DEBIAN/triggers"
control libmxop-dev "$ARCH" "libmxop0 (= $VERSION), libprotobuf-c-dev" \
    "mxop client library and op-library ABI: development files
 Headers, pkg-config files (mxop, mxop-plugin) and static libraries."
control python3-mxop "$PYARCH" "python3, python3-numpy, libmxop0 (= $VERSION)" \
    "mxop for Python: NumPy and PyTorch proxy ops
 The mxop package calls ops of mxop-serverd from NumPy and PyTorch."

for pkg in mxop-serverd libmxop0 libmxop-dev python3-mxop; do
    a=$ARCH
    [ "$pkg" = python3-mxop ] && a=$PYARCH
    dpkg-deb --root-owner-group -Zxz --build "$OUT/$pkg" "$OUT/${pkg}_${VERSION}_$a.deb" >/dev/null
    rm -rf "${OUT:?}/$pkg"
    echo "  DEB     $OUT/${pkg}_${VERSION}_$a.deb"
done
