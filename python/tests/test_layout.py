"""The ctypes mirrors match client.h, and the error table matches errors.h."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

import mxop
from mxop import _lib, errors

from conftest import SOURCE

INCLUDE = os.path.join(SOURCE, "include")


def test_struct_layouts_match_the_c_header(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "mxop/client.h"',
             "int main(void) {"]
    for cname, cls in _lib.STRUCTS:
        lines.append('printf("%s size %%zu\\n", sizeof(%s));' % (cname, cname))
        for f, _ in cls._fields_:
            lines.append('printf("%s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (cname, f, cname, f, cname, f))
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", INCLUDE, str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    want = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[1] == "size":
            want[(parts[0], None)] = int(parts[2])
        else:
            want[(parts[0], parts[1])] = (int(parts[2]), int(parts[3]))
    for cname, cls in _lib.STRUCTS:
        assert ctypes.sizeof(cls) == want[(cname, None)], cname
        for f, _ in cls._fields_:
            fd = getattr(cls, f)
            assert (fd.offset, fd.size) == want[(cname, f)], "%s.%s" % (cname, f)
    # The hot path's struct.Struct packing of mxop_array_t has the same size.
    assert _lib.ARRAY_STRUCT.size == want[("mxop_array_t", None)]


def test_array_packing_round_trips():
    a = _lib.MxopArray()
    buf = ctypes.create_string_buffer(_lib.ARRAY_SIZE)
    _lib.ARRAY_STRUCT.pack_into(buf, 0, 0x1234, 1, 3, 2, 3, 4, 0, 0, 0, 0, 0, 7, 4096, 192, 2)
    ctypes.memmove(ctypes.addressof(a), buf, _lib.ARRAY_SIZE)
    assert (a.data, a.dtype, a.ndim, list(a.shape)[:3], a.region, a.offset, a.nbytes, a.req) == \
        (0x1234, 1, 3, [2, 3, 4], 7, 4096, 192, 2)


def _header_table():
    text = open(os.path.join(INCLUDE, "mxop", "errors.h")).read()
    return [(m.group(1), int(m.group(2)))
            for m in re.finditer(r"XX\((\w+),\s*(-\d+),", text)]


def test_error_table_matches_errors_h():
    table = _header_table()
    assert len(table) >= 34
    assert [(n, c) for n, c, _, _ in errors._TABLE] == table
    for name, code in table:
        cls = errors.error_class(code)
        assert cls is not errors.MxopError and cls.code == code
        assert cls.name == "MXOP_E" + name
        assert mxop.err_name(code) == "MXOP_E" + name  # the library agrees
        e = errors.make_error(code, "detail")
        assert isinstance(e, mxop.MxopError) and e.code == code
        assert e.name == "MXOP_E" + name and e.message == "detail"
        assert str(e) == "MXOP_E%s: detail" % name


def test_unknown_code_is_a_plain_mxop_error():
    e = errors.make_error(-4242, "")
    assert type(e) is mxop.MxopError and e.code == -4242 and e.message


def test_errors_pickle():
    import pickle

    e = pickle.loads(pickle.dumps(mxop.WorkerCrashed(-1025, "boom")))
    assert isinstance(e, mxop.WorkerCrashed) and e.message == "boom"


def test_builtin_bases():
    assert issubclass(mxop.Timeout, TimeoutError)
    assert issubclass(mxop.InvalidArgument, ValueError)
    assert issubclass(mxop.ShapeMismatch, ValueError)
    assert issubclass(mxop.DtypeMismatch, TypeError)
    assert issubclass(mxop.Disconnected, ConnectionError)
