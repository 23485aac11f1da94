"""Triton's tritonserver._api._memorybuffer, for code that names it: pyserver.inprocess.tensor."""

from pyserver.inprocess.tensor import *  # noqa: F401,F403
