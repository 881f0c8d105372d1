"""pip's build of mxop from the source tree (the metadata is in pyproject.toml).

build_py runs `make` for the daemon, the worker, the `mxop` command, libmxop
and the example op libraries, and copies them into the package: mxop/bin/,
mxop/lib/libmxop.so, mxop/plugins/.  The installed package finds them beside
itself (mxop/_lib.py), so nothing needs setting.

build_ext compiles mxop._fastcall and mxop._npalloc (mxop.allocator's NumPy
handler; CPython and NumPy headers of the build environment), then three
libraries the package loads with ctypes, each only where the *target*
environment has what it is built against:

  - mxop/_jaxffi.so, the XLA FFI handler of mxop.jax, against the FFI
    headers of that environment's jaxlib;
  - mxop/_torchops.so, torch.ops.mxop's C++ kernels, against that
    environment's torch (it looks for libtorch through torch's own import);
  - mxop/_torchalloc.so, mxop.allocator's torch CPU allocator, the same way.

The target environment is the interpreter pip runs this with; under pip's
build isolation its site-packages are hidden from this process, so it is
asked in a subprocess without pip's PYTHONPATH.  Without jax or torch there
(or with a compiler error) the part is skipped, and said so; mxop.jax then
refuses to load, and torch.ops.mxop's kernels stay in Python.

MXOP_WHEEL_MAKE_ARGS adds arguments to make (e.g. "-j4" or "B=build/pip-tree").
"""
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_ARGS = shlex.split(os.environ.get("MXOP_WHEEL_MAKE_ARGS", "-j2"))


def _say(msg):
    sys.stderr.write("mxop build: %s\n" % msg)


def _make_var(name):
    out = subprocess.run(["make", "-s", "--no-print-directory", "print-" + name] + MAKE_ARGS,
                         cwd=HERE, check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


class BuildPy(build_py):
    def run(self):
        super().run()
        subprocess.run(["make", "wheel-parts"] + MAKE_ARGS, cwd=HERE, check=True)
        b = os.path.join(HERE, _make_var("B"))
        pkg = os.path.join(self.build_lib, "mxop")
        for sub in ("bin", "lib", "plugins"):
            os.makedirs(os.path.join(pkg, sub), exist_ok=True)
        for prog in ("mxop-serverd", "mxop-worker", "mxop"):
            self.copy_file(os.path.join(b, "bin", prog), os.path.join(pkg, "bin", prog))
        # A wheel holds no symbolic links: libmxop.so alone (ctypes loads it by path).
        self.copy_file(os.path.join(b, "lib", "libmxop.so"), os.path.join(pkg, "lib", "libmxop.so"))
        for f in sorted(glob.glob(os.path.join(b, "plugins", "*.so"))):
            self.copy_file(f, os.path.join(pkg, "plugins", os.path.basename(f)))


def _target(code):
    """Runs `code` in the target environment (without pip's isolation); its
    stdout as JSON, or None when it fails (the module is not there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE",
                                                           "PYTHONHOME")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd="/")
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _compile(argv, what):
    r = subprocess.run(argv, cwd=HERE, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-6:])
        _say("%s not built: the compiler failed:\n%s" % (what, tail))
        return False
    return True


class BuildExt(build_ext):
    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "mxop")
        os.makedirs(pkg, exist_ok=True)
        cc = os.environ.get("CC", "cc")
        cxx = os.environ.get("CXX", "g++")
        jax = _target("import json, jax.ffi; print(json.dumps(jax.ffi.include_dir()))")
        if jax is None:
            _say("mxop/_jaxffi.so not built: jax is not installed in this environment "
                 "(mxop.jax needs it; install jax, then this package again)")
        else:
            _compile([cc, "-O2", "-std=c11", "-D_GNU_SOURCE", "-Iinclude", "-isystem", jax,
                      "-shared", "-fPIC", "python/mxop/_jaxffi.c",
                      "-o", os.path.join(pkg, "_jaxffi.so")], "mxop/_jaxffi.so")
        t = _target("import json, torch, torch.utils.cpp_extension as c; print(json.dumps("
                    "[c.include_paths(), c.library_paths(), int(torch._C._GLIBCXX_USE_CXX11_ABI)]))")
        if t is None:
            _say("mxop/_torchops.so not built: torch is not installed in this environment "
                 "(torch.ops.mxop's kernels stay in Python)")
        else:
            inc, libs, abi = t
            argv = [cxx, "-std=c++17", "-O2", "-D_GNU_SOURCE", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi,
                    "-Iinclude"] + ["-isystem" + d for d in inc] + [
                    "-shared", "-fPIC", "python/mxop/_torchops.cpp",
                    "-o", os.path.join(pkg, "_torchops.so")] + ["-L" + d for d in libs] + [
                    "-Wl,-rpath,$ORIGIN/../torch/lib", "-ltorch", "-ltorch_cpu", "-lc10"]
            _compile(argv, "mxop/_torchops.so (against torch in %s)" % libs[0])
            argv = [cxx, "-std=c++17", "-O2", "-D_GNU_SOURCE", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi,
                    "-Iinclude"] + ["-isystem" + d for d in inc] + [
                    "-shared", "-fPIC", "python/mxop/_torchalloc.cpp",
                    "-o", os.path.join(pkg, "_torchalloc.so")] + ["-L" + d for d in libs] + [
                    "-Wl,-rpath,$ORIGIN/../torch/lib", "-lc10"]
            _compile(argv, "mxop/_torchalloc.so (against torch in %s)" % libs[0])


def _numpy_include():
    import numpy

    return numpy.get_include()


setup(
    ext_modules=[Extension("mxop._fastcall", ["python/mxop/_fastcall.c"],
                           include_dirs=["include", _numpy_include()],
                           extra_compile_args=["-std=c11", "-D_GNU_SOURCE"],
                           optional=True),  # without it, calls take the ctypes path
                 Extension("mxop._npalloc", ["python/mxop/_npalloc.c"],
                           include_dirs=["include", _numpy_include()],
                           extra_compile_args=["-std=c11", "-D_GNU_SOURCE"],
                           optional=True)],  # without it, mxop.allocator says so
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
    options={"build": {"build_base": "build/pip"}},
)
