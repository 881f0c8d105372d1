"""torch dtypes <-> mxop dtype numbers: libmxop's framework names
("float32") are torch's dtype names less "torch.".  The two dicts are filled
in place when the package's tables are (_dtypes.on_fill)."""

import torch

from . import _dtypes
from .errors import InvalidArgument

CODE_OF_TORCH = {}  # torch dtype -> code
TORCH_OF = {}  # code -> torch dtype


def _fill():
    for code, name in enumerate(_dtypes.FRAMEWORK_NAMES):
        d = getattr(torch, name, None)
        if isinstance(d, torch.dtype):
            CODE_OF_TORCH[d] = code
            TORCH_OF[code] = d


_dtypes.on_fill(_fill)


def dtype_code(dtype):
    """The mxop dtype number of a torch dtype."""
    if not CODE_OF_TORCH:
        _dtypes.count()
    code = CODE_OF_TORCH.get(dtype)
    if code is None:
        raise InvalidArgument("torch dtype %s has no mxop equivalent" % dtype)
    return code

