"""pip's build of the package (the metadata is in pyproject.toml).

It adds the C extensions `make` built (build/python/_fastcall.so,
_torchops.so, _npalloc.so and _torchalloc.so, or those under
$MXOP_BUILD_DIR/python) to the package, so that an installed package loads
them from beside itself.  Where they were not
built the package is pure Python and takes its ctypes and Python-kernel paths.
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

EXTENSIONS = ("_fastcall.so", "_torchops.so", "_npalloc.so", "_torchalloc.so")


class BuildPy(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.environ.get("MXOP_BUILD_DIR") or os.path.join(here, "..", "build")
        for name in EXTENSIONS:
            src = os.path.join(build, "python", name)
            if os.path.exists(src):
                self.copy_file(src, os.path.join(self.build_lib, "mxop", name))


setup(cmdclass={"build_py": BuildPy})
