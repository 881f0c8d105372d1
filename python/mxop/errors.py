"""mxop errors as Python exceptions: one class per MXOP_E* code.

The table below holds what is Python's own: each code's NAME in
include/mxop/errors.h, its exception class and an extra built-in base.  The
numbers are libmxop's: learned from its mxop_err_name when _lib.py loads it
(or, asked before that, by loading it then).  The test suite parses the
header and checks every name here against it and against the library.  A
code this table does not know (a newer library) still raises MxopError,
with the library's own name for it.

An exception is made with its message alone, InvalidArgument("..."), which
takes the class's code, or with (code, message), as pickling does.
"""

# (NAME in errors.h, Python class name, extra built-in base or None)
_TABLE = (
    ("INVAL", "InvalidArgument", ValueError),
    ("NOMEM", "OutOfMemory", MemoryError),
    ("IO", "IOFailure", None),
    ("PROTOCOL", "ProtocolError", None),
    ("VERSION", "VersionMismatch", None),
    ("FRAME_TOO_LARGE", "FrameTooLarge", None),
    ("DISCONNECTED", "Disconnected", ConnectionError),
    ("DENIED", "PermissionDenied", PermissionError),
    ("LIB_NOT_FOUND", "LibraryNotFound", None),
    ("LIB_OUTSIDE", "LibraryOutside", None),
    ("ABI", "AbiMismatch", None),
    ("LIB_INVALID", "LibraryInvalid", None),
    ("LIB_INIT", "LibraryInitFailed", None),
    ("UNKNOWN_OP", "UnknownOp", LookupError),
    ("ARITY", "ArityMismatch", ValueError),
    ("SHAPE", "ShapeMismatch", ValueError),
    ("DTYPE", "DtypeMismatch", TypeError),
    ("ATTR", "InvalidAttribute", ValueError),
    ("BOUNDS", "OutOfBounds", ValueError),
    ("UNKNOWN_REGION", "UnknownRegion", LookupError),
    ("UNKNOWN_STATE", "UnknownState", LookupError),
    ("STATE_LOST", "StateLost", None),
    ("NOT_SUPPORTED", "NotSupported", NotImplementedError),
    ("OP_FAILED", "OpFailed", None),
    ("WORKER_CRASHED", "WorkerCrashed", None),
    ("TIMEOUT", "Timeout", TimeoutError),
    ("NO_DEVICE", "NoDevice", None),
    ("SHM", "SharedMemoryError", MemoryError),
    ("LIMIT", "LimitReached", None),
    ("INTERNAL", "InternalError", None),
    ("INPUT_WRITTEN", "InputWritten", None),
    ("WORKER_OOM", "WorkerOutOfMemory", None),
    ("QUARANTINED", "Quarantined", None),
    ("DUPLICATE", "Duplicate", None),
    ("CUDA", "CudaError", None),
    ("READ_ONLY", "ReadOnly", PermissionError),
)

# The one number Python holds itself: the code of a libmxop that cannot be
# loaded, which is then not there to say it (the tests check it against
# errors.h).
LIB_NOT_FOUND = -1009
# Without mxop_err_code, libmxop's names are read over the codes (0, -CODE_SPAN).
CODE_SPAN = 4096


class _ErrorClass(type):
    """The type of the exception classes: a class's code is libmxop's number
    for its NAME (0 for MxopError itself)."""

    @property
    def code(cls):
        short = getattr(cls, "short_name", None)
        if short is None:
            return 0
        return _code_of(short)


class MxopError(RuntimeError, metaclass=_ErrorClass):
    """Base of every mxop error.

    code: the negative MXOP_E* number; name: "MXOP_ETIMEOUT";
    message: the library's detail (mxop_last_error), e.g.
    "op 'segv' (crash.so): worker killed by SIGSEGV".
    """

    name = "MXOP_E?"

    def __init__(self, *args):
        if len(args) == 1:
            code, message = type(self).code, args[0]
        elif len(args) == 2:
            code, message = args
        else:
            raise TypeError("%s(message) or %s(code, message), got %d arguments"
                            % ((type(self).__name__,) * 2 + (len(args),)))
        RuntimeError.__init__(self, message)
        self.code = code
        self.message = message
        short = _learned()["names"].get(code)
        if short is None and code is not None and code == type(self).code:
            short = getattr(type(self), "short_name", None)  # no libmxop to ask
        self.name = "MXOP_E" + short if short else _lib_name(code)

    def __str__(self):
        return "%s: %s" % (self.name, self.message)

    def __reduce__(self):
        # Picklable (multiprocessing, torch.distributed): rebuild from the two fields.
        return (self.__class__, (self.code, self.message))


CLASSES = {}  # code -> class, once the numbers are learned

for _name, _cls, _extra in _TABLE:
    _bases = (MxopError,) if _extra is None else (MxopError, _extra)
    globals()[_cls] = type(_cls, _bases, {"__doc__": "MXOP_E%s." % _name, "short_name": _name,
                                          "name": "MXOP_E" + _name, "__module__": __name__})

# The exception classes' names.
CLASS_NAMES = tuple(t[1] for t in _TABLE)

__all__ = ["MxopError", "error_class", "make_error", "code_of"] + list(CLASS_NAMES)
del _name, _cls, _extra, _bases


# libmxop's mxop_err_name and mxop_strerror, handed over by _lib.py when it
# loads the library, and how to load it: so that this module imports nothing
# of the package (and _lib.py can import it).
_library_words = {"name": None, "message": None, "load": None}
_codes = {"codes": {}, "names": {}}  # NAME -> code, code -> NAME


def use_library_words(name_of, message_of, code_of=None):
    """Called by _lib.py with libmxop's mxop_err_name, mxop_strerror and
    mxop_err_code: the codes of the table's names are learned from it now
    (without mxop_err_code, by reading the names of the codes in use)."""
    _library_words["name"], _library_words["message"] = name_of, message_of
    codes = {}
    if code_of is not None:
        for short, _, _ in _TABLE:
            code = code_of(short.encode())
            if code:
                codes[short] = code
    else:
        for code in range(-1, -CODE_SPAN, -1):
            n = _ask_library("name", code)
            if n.startswith("MXOP_E") and n != "MXOP_E?":
                codes[n[6:]] = code
    _codes["codes"] = codes
    _codes["names"] = {code: short for short, code in codes.items()}
    CLASSES.clear()
    for short, cls, _ in _TABLE:
        if short in codes:
            CLASSES[codes[short]] = globals()[cls]


def use_loader(load):
    """Called by _lib.py with the function that loads libmxop (on first need)."""
    _library_words["load"] = load


def _learned():
    """The codes by name and the names by code (empty while libmxop cannot be loaded)."""
    if not _codes["codes"] and _library_words["name"] is None and \
            _library_words["load"] is not None and not _codes.get("loading"):
        _codes["loading"] = True  # the loader's own error must not ask again
        try:
            _library_words["load"]()  # calls use_library_words
        except Exception:  # no libmxop: the codes stay unknown
            pass
        finally:
            _codes["loading"] = False
    return _codes


def _code_of(short):
    code = _learned()["codes"].get(short)
    if code is None and short == "LIB_NOT_FOUND":
        return LIB_NOT_FOUND
    return code


def code_of(name):
    """The number of an error by its name ("MXOP_ETIMEOUT"), or None."""
    return _code_of(name[6:]) if name.startswith("MXOP_E") else None


def _ask_library(what, code):
    f = _library_words[what]
    try:
        w = f(code) if f is not None else None
        return w.decode() if w else ""
    except Exception:  # a library that misbehaves must not hide the error itself
        return ""


def _lib_name(code):
    return _ask_library("name", code) or "MXOP_E?"


def error_class(code):
    """The exception class of an MXOP_E* code (MxopError for an unknown one)."""
    _learned()
    return CLASSES.get(code, MxopError)


def make_error(code, message):
    """An exception instance for `code` with `message` (never empty)."""
    if not message:
        message = _ask_library("message", code) or "error %d" % code
    return error_class(code)(code, message)
