"""torch dtypes <-> mxop dtype numbers (from the package's table of torch
dtype names, so the NumPy layer never imports torch)."""

import torch

from ._dtypes import CODE_OF_TORCH_NAME
from .errors import InvalidArgument

CODE_OF_TORCH = {getattr(torch, name): code for name, code in CODE_OF_TORCH_NAME.items()}
TORCH_OF = {v: k for k, v in CODE_OF_TORCH.items()}


def dtype_code(dtype):
    """The mxop dtype number of a torch dtype."""
    code = CODE_OF_TORCH.get(dtype)
    if code is None:
        raise InvalidArgument("torch dtype %s has no mxop equivalent" % dtype)
    return code

