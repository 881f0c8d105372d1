"""The package's modules use each other only through public names.

Parses every python/mxop/*.py (ast) and fails on:
  - `from .x import _y`: a private name taken from another module;
  - `mod._y` where mod is a module of the package;
  - `obj._y` where obj is not self/cls and `_y` is not defined in the
    module making the access (a def, a class, a class-level name, a
    `self._y = ...` or a __slots__ entry there): a private attribute of
    another module's object;
  - a cycle of module-level imports between the package's modules.
Names of other libraries' objects (torch, ctypes) and the markers this
package puts on them are listed in FOREIGN below, with why.
"""

import ast
import os

import pytest

from conftest import SOURCE

PKG = os.path.join(SOURCE, "python", "mxop")

# Private names of other libraries' objects and markers the package sets
# on such objects; an access to them is no access to a module of ours.
FOREIGN = {
    "_share_fd_cpu_",  # torch's storage API: the fd of a shared storage
    "_storage",  # torch's TypedStorage -> UntypedStorage
    "_fields_",  # ctypes' Structure API
    "_asdict",  # Stats' dict form, named as namedtuple's (its public API)
    "_mxop",  # set on a ctypes buffer (or holder) under an array: its Block
    "_mxop_copy_of",  # set on a staging copy of a tensor: the tensor it copies
    "_dtypes",  # torch.ops.mxop_py._dtypes: a dispatcher op _torch_library.py defines
}

# Accesses another helper's branch removes: (file, name) -> that branch.  None now.
PENDING = {}


def _modules():
    return sorted(f for f in os.listdir(PKG) if f.endswith(".py"))


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_ours(node):
    """True for an import of this package (relative, or mxop...)."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "mxop"
    return any(a.name.split(".")[0] == "mxop" for a in node.names)


def _is_module(node, name):
    """True if `from <node.module> import name` names a module of the package
    (Python, or a C extension built from name.c)."""
    return not (node.module or "").replace("mxop", "", 1).strip(".") and any(
        os.path.exists(os.path.join(PKG, name + ext)) for ext in (".py", ".c"))


def _bindings(tree):
    """name -> "ours-module" / "foreign" for names bound by imports."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                nm = a.asname or a.name.split(".")[0]
                out[nm] = "ours-module" if a.name.split(".")[0] == "mxop" else "foreign"
        elif isinstance(node, ast.ImportFrom):
            ours = _is_ours(node)
            for a in node.names:
                nm = a.asname or a.name
                if not ours:
                    out[nm] = "foreign"
                elif _is_module(node, a.name):
                    out[nm] = "ours-module"  # from . import _lib
    return out


def _defined(tree):
    """Private names this module defines for its own objects."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            if isinstance(node, ast.ClassDef):
                for st in node.body:
                    targets = st.targets if isinstance(st, ast.Assign) else \
                        [st.target] if isinstance(st, ast.AnnAssign) else []
                    for t in targets:
                        if isinstance(t, ast.Name):
                            out.add(t.id)
                        if isinstance(t, ast.Name) and t.id == "__slots__":
                            for c in ast.walk(st.value):
                                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                                    out.add(c.value)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and \
                            x.value.id in ("self", "cls"):
                        out.add(x.attr)
    return out


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(fname, src):
    tree = ast.parse(src, fname)
    bound = _bindings(tree)
    defined = _defined(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _is_ours(node):
            for a in node.names:
                if _private(a.name) and not _is_module(node, a.name):
                    out.append((node.lineno, "from %s%s import %s" % (
                        "." * node.level, node.module or "", a.name), a.name))
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in ("self", "cls"):
            continue
        root = _root(v)
        kind = bound.get(root)
        if kind == "foreign":
            continue  # torch._C, forward_ad._current_level: other libraries' own
        if isinstance(v, ast.Name) and kind == "ours-module":
            out.append((node.lineno, "%s.%s (a private name of module %s)"
                        % (v.id, node.attr, v.id), node.attr))
            continue
        if node.attr in defined or node.attr in FOREIGN:
            continue
        out.append((node.lineno, "%s.%s (not defined in %s)"
                    % (ast.unparse(v), node.attr, fname), node.attr))
    return [(ln, what) for ln, what, name in out if (fname, name) not in PENDING]


@pytest.mark.parametrize("fname", _modules())
def test_no_private_names_across_modules(fname):
    with open(os.path.join(PKG, fname)) as f:
        src = f.read()
    bad = violations(fname, src)
    assert not bad, "%s reaches private names of other modules:\n%s" % (
        fname, "\n".join("  line %d: %s" % b for b in bad))


def test_the_checker_sees_what_it_forbids():
    # The rules above, on code that breaks each: the test cannot pass vacuously.
    src = ("from . import client as _cl\n"
           "from .client import _clients\n"
           "def f(c, op):\n"
           "    c._bufs(1, 1)\n"
           "    return _cl._fc, op._p\n")
    found = [what for _, what in violations("x.py", src)]
    assert len(found) == 4, found
    ok = ("import torch\n"
          "from . import _lib\n"
          "class A:\n"
          "    __slots__ = ('_x',)\n"
          "    def _m(self):\n"
          "        self._y = 1\n"
          "        return torch._C, self._x, _lib.lib, A()._m\n")
    assert violations("y.py", ok) == []


def _module_imports(fname):
    """The package modules `fname` imports at module level."""
    with open(os.path.join(PKG, fname)) as f:
        tree = ast.parse(f.read(), fname)
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return {m for m in out if os.path.exists(os.path.join(PKG, m + ".py"))}


def test_no_import_cycles():
    graph = {f[:-3]: _module_imports(f) for f in _modules() if f != "__init__.py"}
    cycles = []

    def visit(m, path):
        for n in graph.get(m, ()):
            if n in path:
                cycles.append(path[path.index(n):] + [n])
            elif n not in done:
                visit(n, path + [n])
        done.add(m)

    done = set()
    for m in graph:
        if m not in done:
            visit(m, [m])
    assert not cycles, "modules importing each other: %s" % (
        "; ".join(" -> ".join(c) for c in cycles))
