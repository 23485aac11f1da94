"""Triton's tritonserver._api._model, for code that names it: pyserver.inprocess.model."""

from pyserver.inprocess.model import *  # noqa: F401,F403
