"""Triton's tritonserver._api._request, for code that names it: pyserver.inprocess.request."""

from pyserver.inprocess.request import *  # noqa: F401,F403
