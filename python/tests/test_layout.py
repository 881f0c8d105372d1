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
    # The package holds the names (and its classes); the numbers are the library's.
    assert [n for n, _, _ in errors._TABLE] == [n for n, _ in table]
    assert errors.LIB_NOT_FOUND == dict(table)["LIB_NOT_FOUND"]
    for name, code in table:
        assert errors.code_of("MXOP_E" + name) == code
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


def test_an_error_made_with_its_message_alone_has_its_class_code():
    table = dict(_header_table())
    e = mxop.InvalidArgument("bad thing")
    assert e.code == table["INVAL"] and e.name == "MXOP_EINVAL" and e.message == "bad thing"
    assert str(e) == "MXOP_EINVAL: bad thing"
    e = mxop.Timeout("late")
    assert e.code == table["TIMEOUT"] and isinstance(e, TimeoutError)
    # (code, message) as before: a class may carry another code (the library's name then).
    e = mxop.InvalidArgument(table["ARITY"], "3 outputs, out= gave 2")
    assert e.code == table["ARITY"] and e.name == "MXOP_EARITY"
    with pytest.raises(TypeError):
        mxop.InvalidArgument()


def test_codes_learned_from_the_names_alone_are_the_same():
    # A libmxop without mxop_err_code: the codes come from mxop_err_name.
    dll = _lib.lib.load()
    before = dict(errors.CLASSES)
    try:
        errors.use_library_words(dll.mxop_err_name, dll.mxop_strerror)
        assert errors.CLASSES == before and len(before) == len(_header_table())
    finally:
        errors.use_library_words(dll.mxop_err_name, dll.mxop_strerror, dll.mxop_err_code)


def test_the_package_holds_no_error_numbers():
    # Every number comes from libmxop; errors.LIB_NOT_FOUND alone is written
    # down (a library that cannot be loaded cannot say it).
    pkg = os.path.join(SOURCE, "python", "mxop")
    numbers = {str(c) for _, c in _header_table()}
    found = []
    for f in sorted(os.listdir(pkg)):
        if not f.endswith(".py"):
            continue
        for i, line in enumerate(open(os.path.join(pkg, f)), 1):
            if (f, line.strip()) == ("errors.py", "LIB_NOT_FOUND = -1009"):
                continue
            found += ["%s:%d: %s" % (f, i, line.strip()) for n in re.findall(r"-\d+", line)
                      if n in numbers]
    assert not found, "\n".join(found)


def test_errors_pickle():
    import pickle

    e = pickle.loads(pickle.dumps(mxop.WorkerCrashed(-1025, "boom")))
    assert isinstance(e, mxop.WorkerCrashed) and e.message == "boom"
    e = pickle.loads(pickle.dumps(mxop.WorkerCrashed("boom")))
    assert isinstance(e, mxop.WorkerCrashed) and e.code == -1025 and e.message == "boom"


def test_builtin_bases():
    assert issubclass(mxop.Timeout, TimeoutError)
    assert issubclass(mxop.InvalidArgument, ValueError)
    assert issubclass(mxop.ShapeMismatch, ValueError)
    assert issubclass(mxop.DtypeMismatch, TypeError)
    assert issubclass(mxop.Disconnected, ConnectionError)
