#!/bin/sh
# Installs mxop, or removes exactly what an install put there.
#
#   install.sh install    (make install)
#   install.sh uninstall  (make uninstall)
#
# The Makefile passes the directories in the environment: DESTDIR PREFIX
# BINDIR LIBDIR INCLUDEDIR LIBEXECDIR PLUGINDIR SYSTEMDUNITDIR SYSCONFDIR
# DATADIR PYTHONDIR, and B (the build directory), VERSION.
#
# An install records every file, link and directory it created in a
# manifest, $(DATADIR)/mxop/install-manifest (one "f PATH", "l PATH" or
# "d PATH" a line, paths without DESTDIR).  Uninstall removes the files and
# links it lists, then the directories it lists that are empty by then,
# deepest first, and the manifest: nothing that was there before the
# install is touched (but the byte-code Python compiled from the modules it
# installed, __pycache__/NAME.*.pyc).  The example config file is installed
# only where none is, so that an administrator's file survives both.
set -eu
: "${B:?}" "${PREFIX:?}" "${BINDIR:?}" "${LIBDIR:?}" "${INCLUDEDIR:?}" "${LIBEXECDIR:?}"
: "${PLUGINDIR:?}" "${SYSTEMDUNITDIR:?}" "${SYSCONFDIR:?}" "${DATADIR:?}" "${VERSION:?}"
DESTDIR=${DESTDIR:-}
MANIFEST=$DATADIR/mxop/install-manifest
SOVER=0

new=$(mktemp)
trap 'rm -f "$new"' EXIT

# Creates directory $1 (without DESTDIR) and its missing parents, recording those it created.
mkdirs() {
    d=$1 missing=
    while [ "$d" != / ] && [ "$d" != . ] && [ ! -d "$DESTDIR$d" ]; do
        missing="$d
$missing"
        d=$(dirname "$d")
    done
    printf '%s' "$missing" | while IFS= read -r x; do
        [ -n "$x" ] || continue
        mkdir -m 755 "$DESTDIR$x"
        echo "d $x" >>"$new"
    done
}

# Installs file $2 as $3 (a full path without DESTDIR) with mode $1.
inst() {
    mkdirs "$(dirname "$3")"
    install -m "$1" "$2" "$DESTDIR$3"
    echo "f $3" >>"$new"
}

# Makes $2 (a full path) a symbolic link to $1.
link() {
    mkdirs "$(dirname "$2")"
    ln -sfn "$1" "$DESTDIR$2"
    echo "l $2" >>"$new"
}

# A unit or config file with the installed paths in it.
subst() {
    tmp=$(mktemp)
    sed -e "s|@BINDIR@|$BINDIR|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" \
        -e "s|@PLUGINDIR@|$PLUGINDIR|g" -e "s|@LIBEXECDIR@|$LIBEXECDIR|g" "$2" >"$tmp"
    inst "$1" "$tmp" "$3"
    rm -f "$tmp"
}

do_install() {
    [ -z "$DESTDIR" ] || mkdir -p "$DESTDIR"
    inst 755 "$B/bin/mxop-serverd" "$BINDIR/mxop-serverd"
    inst 755 "$B/bin/mxop" "$BINDIR/mxop"
    inst 755 "$B/bin/mxop-worker" "$LIBEXECDIR/mxop-worker"
    # The real file, the soname link the loader follows, the link the linker follows.
    inst 755 "$B/lib/libmxop.so" "$LIBDIR/libmxop.so.$VERSION"
    link "libmxop.so.$VERSION" "$LIBDIR/libmxop.so.$SOVER"
    link "libmxop.so.$SOVER" "$LIBDIR/libmxop.so"
    inst 644 "$B/lib/libmxop.a" "$LIBDIR/libmxop.a"
    inst 644 "$B/lib/libmxop-inproc.a" "$LIBDIR/libmxop-inproc.a"
    for h in include/mxop/*.h include/mxop/*.hpp; do
        inst 644 "$h" "$INCLUDEDIR/mxop/$(basename "$h")"
    done
    # The .pc files name the directories of this install, whatever the build was made for.
    for pc in mxop mxop-plugin; do
        tmp=$(mktemp)
        sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@LIBDIR@|$LIBDIR|g" -e "s|@INCLUDEDIR@|$INCLUDEDIR|g" \
            -e "s|@VERSION@|$VERSION|g" -e "s|@PLUGINDIR@|$PLUGINDIR|g" "scripts/$pc.pc.in" >"$tmp"
        inst 644 "$tmp" "$LIBDIR/pkgconfig/$pc.pc"
        rm -f "$tmp"
    done
    for p in "$B"/plugins/*.so; do
        [ -f "$p" ] && inst 755 "$p" "$PLUGINDIR/$(basename "$p")"
    done
    subst 644 contrib/systemd/mxop-serverd.service "$SYSTEMDUNITDIR/mxop-serverd.service"
    subst 644 contrib/systemd/mxop-serverd.socket "$SYSTEMDUNITDIR/mxop-serverd.socket"
    if [ ! -e "$DESTDIR$SYSCONFDIR/mxop/mxop-serverd.conf" ]; then
        subst 644 contrib/mxop-serverd.conf "$SYSCONFDIR/mxop/mxop-serverd.conf"
    fi
    # The Python package, with the C extensions the build made beside it
    # (the package loads them from its own directory).
    if [ -n "${PYTHONDIR:-}" ]; then
        for f in python/mxop/*.py; do
            inst 644 "$f" "$PYTHONDIR/mxop/$(basename "$f")"
        done
        for so in _fastcall.so _torchops.so _npalloc.so _torchalloc.so; do
            [ -f "$B/python/$so" ] && inst 755 "$B/python/$so" "$PYTHONDIR/mxop/$so"
        done
    fi
    for m in contrib/man/*.1; do
        inst 644 "$m" "$DATADIR/man/man1/$(basename "$m")"
    done
    if [ -f docs/operations.md ]; then
        inst 644 docs/operations.md "$DATADIR/doc/mxop/operations.md"
    fi
    mkdirs "$(dirname "$MANIFEST")"
    # A second install over the first: keep what the first created, too.
    if [ -f "$DESTDIR$MANIFEST" ]; then
        cat "$DESTDIR$MANIFEST" "$new" | awk '!seen[$0]++' >"$new.all"
    else
        awk '!seen[$0]++' "$new" >"$new.all"
    fi
    install -m 644 "$new.all" "$DESTDIR$MANIFEST"
    rm -f "$new.all"
    echo "installed $(grep -c '^[fl] ' "$DESTDIR$MANIFEST") files and links; manifest $DESTDIR$MANIFEST"
}

do_uninstall() {
    if [ ! -f "$DESTDIR$MANIFEST" ]; then
        echo "nothing to uninstall: no manifest at $DESTDIR$MANIFEST" >&2
        exit 1
    fi
    n=0
    while read -r kind path; do
        case $kind in
        f | l)
            if [ -e "$DESTDIR$path" ] || [ -L "$DESTDIR$path" ]; then
                rm -f "$DESTDIR$path"
                n=$((n + 1))
            fi
            # The byte-code Python wrote for a module we installed: left behind,
            # its __pycache__ keeps the package's directory, and `import mxop`
            # then finds an empty namespace package.
            case $path in
            *.py)
                pyc=$DESTDIR$(dirname "$path")/__pycache__
                rm -f "$pyc/$(basename "$path" .py)".*.pyc
                rmdir "$pyc" 2>/dev/null || true
                ;;
            esac
            ;;
        esac
    done <"$DESTDIR$MANIFEST"
    rm -f "$DESTDIR$MANIFEST"
    echo "removed $n files and links"
}

case ${1:-} in
install) do_install ;;
uninstall)
    # The directory list is read before the manifest goes.
    if [ -f "$DESTDIR$MANIFEST" ]; then
        sed -n 's/^d //p' "$DESTDIR$MANIFEST" | sort -r >"$new"
    fi
    do_uninstall
    # Directories deepest first (reverse order puts a/b before a); one that holds something
    # else stays.
    while IFS= read -r d; do
        [ -n "$d" ] && rmdir "$DESTDIR$d" 2>/dev/null || true
    done <"$new"
    ;;
*)
    echo "usage: install.sh install|uninstall" >&2
    exit 2
    ;;
esac
