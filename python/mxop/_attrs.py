"""Op attributes: what an op declares (AttrDecl) and the strings values travel as."""

import ctypes

from . import _lib
from ._lib import lib


def attr_value(v):
    """The string an attribute value travels as.

    Booleans as "1"/"0" (what host->attr_bool reads), integral floats as
    integers, so that 1, 1.0 and True give one cache key and one string."""
    if v is True:
        return "1"
    if v is False:
        return "0"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 2**63 else repr(v)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)):
        # A list attribute: "2,3" is what host->attr_int_list reads.
        return ",".join(attr_value(x) for x in v)
    return str(v)


def attr_value_mxnet(v):
    """The string an MXNet extension library's op gets: what MXNet passes,
    str(v), so True is "True", 1.0 is "1.0" and [2, 3] is "[2, 3]"."""
    return v.decode() if isinstance(v, bytes) else str(v)


class AttrDecl(tuple):
    """One attribute an op declares: (name, type, default, required, doc).

    type is "int", "float", "bool", "string", "int_list" or "float_list";
    default is the declared default as a Python value (None when there is
    none)."""

    __slots__ = ()

    def __new__(cls, name, type, default, required, doc):
        return tuple.__new__(cls, (name, type, default, required, doc))

    name = property(lambda self: self[0])
    type = property(lambda self: self[1])
    default = property(lambda self: self[2])
    required = property(lambda self: self[3])
    doc = property(lambda self: self[4])

    def __repr__(self):
        return "AttrDecl(name=%r, type=%r, default=%r, required=%r, doc=%r)" % tuple(self)


def parse_default(type_name, text):
    """A declared default (a string in the type's syntax) as a Python value."""
    if text is None:
        return None
    if type_name == "int":
        return int(text)
    if type_name == "float":
        return float(text)
    if type_name == "bool":
        return text.strip().lower() in ("1", "true")
    if type_name in ("int_list", "float_list"):
        body = text.strip()
        if body[:1] in "([" and body[-1:] in ")]":
            body = body[1:-1]
        conv = int if type_name == "int_list" else float
        return tuple(conv(x) for x in body.split(",") if x.strip())
    return text


def op_attrs(handle):
    """The declarations of the op at `handle`, as a tuple of AttrDecl."""
    out = []
    for i in range(max(lib.mxop_op_attr_count(handle), 0)):
        a = _lib.MxopAttrInfo()
        a.struct_size = ctypes.sizeof(a)
        if lib.mxop_op_attr(handle, i, ctypes.addressof(a)) != 0:
            break
        t = _lib.ATTR_TYPE_NAMES.get(a.type, "unknown")
        dflt = a.default_value.decode() if a.default_value is not None else None
        try:
            dflt = parse_default(t, dflt)
        except ValueError:
            pass
        out.append(AttrDecl(a.name.decode(), t, dflt, bool(a.required), (a.doc or b"").decode()))
    return tuple(out)
