#!/bin/sh
# Installs the Debian packages mxop's build, tests and bindings need, when
# any is missing.  Run by make; safe to run by hand.  Needs root (or sudo)
# only when something is missing.
set -e
# Python: python3-venv and python3-dev for the virtual environment the
# Makefile makes (build/venv: torch, numpy, pytest from python/requirements.txt);
# python3-numpy and python3-pytest for scripts run with /usr/bin/python3.
# Building against Debian's torch 1.13 instead (make PYTHON=/usr/bin/python3)
# needs python3-torch and libtorch-dev besides, which are not installed here.
PKGS="build-essential pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler
libcriterion-dev libopenblas-dev libseccomp-dev python3-numpy python3-pytest
python3-dev python3-venv
clang libclang-rt-14-dev
lintian patchelf"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
echo "mxop: installing missing Debian packages:$missing"
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "mxop: need root to install:$missing" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
