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
# What makes the packages lintian-clean (make check runs lintian on them):
# binaries stripped, libmxop.so.* mode 0644 with a shlibs file, the
# Depends computed by dpkg-shlibdeps (versioned), a copyright file and a
# changelog per package, no absolute RUNPATH, maintainer scripts from
# contrib/debian/ (the units enabled and started; byte-code removed).  The
# tags that remain are warnings, explained in contrib/debian/lintian-overrides.
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

move mxop-serverd usr/bin usr/libexec usr/lib/mxop lib/systemd etc usr/share/doc usr/share/man
move libmxop0 "usr/lib/libmxop.so.*"
move libmxop-dev usr/include usr/lib/pkgconfig usr/lib/libmxop.so "usr/lib/*.a"
# Kept out of every package: where the packages are installed, a maintainer
# script removes the byte-code Python leaves (python3-mxop.prerm).
py=$OUT/python3-mxop/usr/lib/python3/dist-packages/mxop
mkdir -p "$py"
cp python/mxop/*.py "$py/"
# The C extensions the build made (the package loads them from beside itself):
# with them the package is of this architecture.
PYARCH=all
for so in _fastcall.so _torchops.so _npalloc.so _torchalloc.so; do
    if [ -f "$B/python/$so" ]; then
        install -m 644 "$B/python/$so" "$py/$so"
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

# Stripped ELF objects (debug symbols are for a -dbgsym package, not here);
# shared objects 0644; the CUDA example's build-tree RUNPATH removed (the
# installed one finds libcudart through the loader's path, as CUDA's own
# ld.so.conf.d entry sets it up).
for pkg in mxop-serverd libmxop0 python3-mxop; do
    find "$OUT/$pkg" -type f | while IFS= read -r f; do
        head -c 4 "$f" | grep -q 'ELF' || continue
        case $f in
        *.so | *.so.*)
            strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
            chmod 644 "$f"
            ;;
        *) strip --remove-section=.comment --remove-section=.note "$f" ;;
        esac
        if readelf -d "$f" | grep -q 'R*PATH'; then
            command -v patchelf >/dev/null ||
                { echo "make-deb.sh: $f has a RUNPATH and patchelf is missing" >&2; exit 1; }
            patchelf --remove-rpath "$f"
        fi
    done
done
find "$OUT/libmxop-dev" -name '*.a' -exec strip --strip-debug {} +
# Manual pages compressed, as policy asks.
find "$OUT/mxop-serverd/usr/share/man" -type f -name '*.1' -exec gzip -9n {} +

MAINTAINER=${DEB_MAINTAINER:-"mxop maintainers <maintainers@users.noreply.a-seed-106e5a36.example>"}
DATE=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")

# Per package: the copyright file and the changelog Debian policy asks for.
docs() {
    d=$OUT/$1/usr/share/doc/$1
    mkdir -p "$d"
    install -m 644 contrib/debian/copyright "$d/copyright"
    sed -e "s|@VERSION@|$VERSION|g" -e "s|@MAINTAINER@|$MAINTAINER|g" -e "s|@DATE@|$DATE|g" \
        contrib/debian/changelog | gzip -9n >"$d/changelog.gz"
    chmod 644 "$d/changelog.gz"
    if [ -f "contrib/debian/$1.lintian-overrides" ]; then
        mkdir -p "$OUT/$1/usr/share/lintian/overrides"
        install -m 644 "contrib/debian/$1.lintian-overrides" \
            "$OUT/$1/usr/share/lintian/overrides/$1"
    fi
}

# The versioned Depends of the ELF objects given, from the shlibs and
# symbols files of the installed libraries (dpkg-shlibdeps wants a
# debian/control beside it).
SHL=$OUT/shlibdeps
mkdir -p "$SHL/debian"
printf 'Source: mxop\n\nPackage: mxop\nArchitecture: any\n' >"$SHL/debian/control"
shlibdeps() {
    (cd "$SHL" && dpkg-shlibdeps -O "$@" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

# control PKG ARCH DEPENDS DESCRIPTION [EXTRA-FIELDS]
control() {
    docs "$1"
    mkdir -p "$OUT/$1/DEBIAN"
    size=$(du -sk "$OUT/$1" | cut -f1)
    {
        echo "Package: $1"
        echo "Version: $VERSION"
        echo "Architecture: $2"
        echo "Maintainer: $MAINTAINER"
        echo "Installed-Size: $size"
        echo "Depends: $3"
        [ -z "${5:-}" ] || printf '%s\n' "$5"
        echo "Section: science"
        echo "Priority: optional"
        echo "Description: $4"
    } >"$OUT/$1/DEBIAN/control"
    for script in postinst prerm postrm; do
        if [ -f "contrib/debian/$1.$script" ]; then
            install -m 755 "contrib/debian/$1.$script" "$OUT/$1/DEBIAN/$script"
        fi
    done
}

# The daemon's objects, but the CUDA example: libcudart comes with the CUDA
# toolkit, not a Debian package (the example needs it only where it is used).
srv_elf=$(find "$OUT/mxop-serverd" -type f \( -path '*/bin/*' -o -path '*/libexec/*' -o -name '*.so' \) \
    ! -name 'relu_cuda.so' | sort)
# shellcheck disable=SC2086
srv_deps=$(shlibdeps $srv_elf)
[ -n "$srv_deps" ] || { echo "make-deb.sh: dpkg-shlibdeps found nothing for mxop-serverd" >&2; exit 1; }
lib_deps=$(shlibdeps "$OUT/libmxop0/usr/lib/libmxop.so.$VERSION")
py_deps=
[ -f "$py/_fastcall.so" ] && py_deps=$(shlibdeps "$py/_fastcall.so")

control mxop-serverd "$ARCH" "$srv_deps" \
    "mxop op server: custom deep-learning ops in sandboxed workers
 mxop-serverd loads op libraries in worker processes confined by
 namespaces, cgroups, Landlock and seccomp, and serves clients over a Unix
 socket.  With the mxop command and systemd units (socket activation)." \
    "Recommends: libmxop0 (= $VERSION)"
echo /etc/mxop/mxop-serverd.conf >"$OUT/mxop-serverd/DEBIAN/conffiles"
control libmxop0 "$ARCH" "$lib_deps" \
    "mxop client library
 libmxop talks to mxop-serverd: it loads op libraries, shares tensors
 and calls ops."
# The loader's cache learns the new library; other packages' objects that
# link it depend on this version or later.
echo "activate-noawait ldconfig" >"$OUT/libmxop0/DEBIAN/triggers"
echo "libmxop 0 libmxop0 (>= $VERSION)" >"$OUT/libmxop0/DEBIAN/shlibs"
control libmxop-dev "$ARCH" "libmxop0 (= $VERSION), libprotobuf-c-dev" \
    "mxop client library and op-library ABI: development files
 Headers, pkg-config files (mxop, mxop-plugin) and static libraries."
# python3-mxop carries C extensions (_fastcall.so, _torchops.so), so it is of
# this architecture; without them (a build without a compiler for them) "all".
# _torchops.so is loaded only once torch is imported: torch is recommended.
control python3-mxop "$PYARCH" \
    "python3, python3-numpy, libmxop0 (= $VERSION)${py_deps:+, $py_deps}" \
    "mxop for Python: NumPy and PyTorch proxy ops
 The mxop package calls ops of mxop-serverd from NumPy and PyTorch." \
    "Recommends: python3-torch"
rm -rf "$SHL"

for pkg in mxop-serverd libmxop0 libmxop-dev python3-mxop; do
    a=$ARCH
    [ "$pkg" = python3-mxop ] && a=$PYARCH
    dpkg-deb --root-owner-group -Zxz --build "$OUT/$pkg" "$OUT/${pkg}_${VERSION}_$a.deb" >/dev/null
    rm -rf "${OUT:?}/$pkg"
    echo "  DEB     $OUT/${pkg}_${VERSION}_$a.deb"
done
