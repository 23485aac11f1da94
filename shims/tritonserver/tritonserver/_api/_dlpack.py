"""Triton's tritonserver._api._dlpack, for code that names it: pyserver.inprocess.enums."""

from pyserver.inprocess.enums import *  # noqa: F401,F403
