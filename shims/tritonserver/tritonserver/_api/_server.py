"""Triton's tritonserver._api._server, for code that names it: pyserver.inprocess.server."""

from pyserver.inprocess.server import *  # noqa: F401,F403
