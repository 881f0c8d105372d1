"""mxop errors as Python exceptions: one class per MXOP_E* code.

The table below mirrors include/mxop/errors.h (an X-macro there).  The test
suite parses the header and checks every code, name and number here
against it and against the library's mxop_err_name, so the two cannot
drift apart silently.  A code this table does not know (a newer library)
still raises MxopError, with the library's own name for it.
"""

# (NAME in errors.h, number, Python class name, extra built-in base or None)
_TABLE = (
    ("INVAL", -1001, "InvalidArgument", ValueError),
    ("NOMEM", -1002, "OutOfMemory", MemoryError),
    ("IO", -1003, "IOFailure", None),
    ("PROTOCOL", -1004, "ProtocolError", None),
    ("VERSION", -1005, "VersionMismatch", None),
    ("FRAME_TOO_LARGE", -1006, "FrameTooLarge", None),
    ("DISCONNECTED", -1007, "Disconnected", ConnectionError),
    ("DENIED", -1008, "PermissionDenied", PermissionError),
    ("LIB_NOT_FOUND", -1009, "LibraryNotFound", None),
    ("LIB_OUTSIDE", -1010, "LibraryOutside", None),
    ("ABI", -1011, "AbiMismatch", None),
    ("LIB_INVALID", -1012, "LibraryInvalid", None),
    ("LIB_INIT", -1013, "LibraryInitFailed", None),
    ("UNKNOWN_OP", -1014, "UnknownOp", LookupError),
    ("ARITY", -1015, "ArityMismatch", ValueError),
    ("SHAPE", -1016, "ShapeMismatch", ValueError),
    ("DTYPE", -1017, "DtypeMismatch", TypeError),
    ("ATTR", -1018, "InvalidAttribute", ValueError),
    ("BOUNDS", -1019, "OutOfBounds", ValueError),
    ("UNKNOWN_REGION", -1020, "UnknownRegion", LookupError),
    ("UNKNOWN_STATE", -1021, "UnknownState", LookupError),
    ("STATE_LOST", -1022, "StateLost", None),
    ("NOT_SUPPORTED", -1023, "NotSupported", NotImplementedError),
    ("OP_FAILED", -1024, "OpFailed", None),
    ("WORKER_CRASHED", -1025, "WorkerCrashed", None),
    ("TIMEOUT", -1026, "Timeout", TimeoutError),
    ("NO_DEVICE", -1027, "NoDevice", None),
    ("SHM", -1028, "SharedMemoryError", MemoryError),
    ("LIMIT", -1029, "LimitReached", None),
    ("INTERNAL", -1030, "InternalError", None),
    ("INPUT_WRITTEN", -1031, "InputWritten", None),
    ("WORKER_OOM", -1032, "WorkerOutOfMemory", None),
    ("QUARANTINED", -1033, "Quarantined", None),
    ("DUPLICATE", -1034, "Duplicate", None),
    ("CUDA", -1035, "CudaError", None),
    ("READ_ONLY", -1040, "ReadOnly", PermissionError),
)


class MxopError(RuntimeError):
    """Base of every mxop error.

    code: the negative MXOP_E* number; name: "MXOP_ETIMEOUT";
    message: the library's detail (mxop_last_error), e.g.
    "op 'segv' (crash.so): worker killed by SIGSEGV".
    """

    code = 0
    name = "MXOP_E?"

    def __init__(self, code, message):
        RuntimeError.__init__(self, message)
        self.code = code
        self.message = message
        self.name = "MXOP_E" + _NAMES[code] if code in _NAMES else _lib_name(code)

    def __str__(self):
        return "%s: %s" % (self.name, self.message)

    def __reduce__(self):
        # Picklable (multiprocessing, torch.distributed): rebuild from the two fields.
        return (self.__class__, (self.code, self.message))


CLASSES = {}  # code -> class
_NAMES = {}  # code -> NAME without the MXOP_E prefix

for _name, _num, _cls, _extra in _TABLE:
    _bases = (MxopError,) if _extra is None else (MxopError, _extra)
    _c = type(_cls, _bases, {"__doc__": "MXOP_E%s (%d)." % (_name, _num), "code": _num,
                             "name": "MXOP_E" + _name, "__module__": __name__})
    globals()[_cls] = _c
    CLASSES[_num] = _c
    _NAMES[_num] = _name

# The exception classes' names, and the codes by their names in errors.h.
CLASS_NAMES = tuple(t[2] for t in _TABLE)
CODE_OF_NAME = {"MXOP_E" + t[0]: t[1] for t in _TABLE}

__all__ = ["MxopError", "error_class", "make_error"] + list(CLASS_NAMES)
del _name, _num, _cls, _extra, _bases, _c


# How libmxop names a code and says what it means, for codes the table above
# does not hold: handed over by _lib.py when it loads the library, so that
# this module imports nothing of the package (and _lib.py can import it).
_library_words = {"name": None, "message": None}


def use_library_words(name_of, message_of):
    """Called by _lib.py with libmxop's mxop_err_name and mxop_strerror."""
    _library_words["name"], _library_words["message"] = name_of, message_of


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
    return CLASSES.get(code, MxopError)


def make_error(code, message):
    """An exception instance for `code` with `message` (never empty)."""
    if not message:
        message = _ask_library("message", code) or "error %d" % code
    return CLASSES.get(code, MxopError)(code, message)
