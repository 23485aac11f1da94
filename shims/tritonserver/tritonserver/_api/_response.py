"""Triton's tritonserver._api._response, for code that names it: pyserver.inprocess.response."""

from pyserver.inprocess.response import *  # noqa: F401,F403
