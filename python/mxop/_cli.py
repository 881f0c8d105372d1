"""The `mxop` command of a pip-installed package (its console script).

The command itself is the C program the wheel carries in mxop/bin/ (beside
the daemon and the worker, which it finds beside itself); this entry point
only puts it on PATH: it replaces the Python process with that program.
"""
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    prog = os.path.join(here, "bin", "mxop")
    if not os.access(prog, os.X_OK):
        sys.stderr.write("mxop: %s is missing: this copy of the package was installed without "
                         "its programs (install the wheel, or build the tree with make)\n" % prog)
        return 127
    os.execv(prog, [prog] + sys.argv[1:])
    return 127  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
