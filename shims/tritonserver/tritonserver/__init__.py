"""Triton's in-process Python API, served by pyserver (pyserver.inprocess):
this package only gives it Triton's import name."""

from pyserver.inprocess import *  # noqa: F401,F403
from pyserver.inprocess import __all__  # noqa: F401
from pyserver.inprocess import errors as _errors
from pyserver.inprocess.tensor import parse_device_or_memory_type  # noqa: F401

# As Triton's package shows them: tritonserver.InvalidArgumentError, ...
for _name in _errors.__all__:
    _cls = getattr(_errors, _name)
    if isinstance(_cls, type):
        _cls.__module__ = "tritonserver"
del _name, _cls, _errors

__version__ = "0.1.0+pyserver"

from tritonserver import _api  # noqa: E402,F401  (tritonserver._api._response, as in Triton)
