"""Protocol-neutral request and response objects shared by every frontend.

A frontend decodes its wire format into an ``InferRequest`` (tensors as numpy
arrays, views over the received bytes where possible), awaits
``Server.infer(request)`` and encodes the ``InferResponse`` it gets back.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class InferTensor:
    """One named tensor: wire datatype, shape, data.

    ``data`` is a numpy array of the given shape; for BYTES it is an object
    array of ``bytes``.
    """

    __slots__ = ("name", "datatype", "shape", "data", "parameters")

    def __init__(self, name: str, datatype: str, shape, data: np.ndarray | None,
                 parameters: dict[str, Any] | None = None):
        self.name = name
        self.datatype = datatype
        self.shape = list(shape)
        self.data = data
        self.parameters = parameters or {}

    def __repr__(self) -> str:
        return f"InferTensor({self.name!r}, {self.datatype}, {self.shape})"


class RequestedOutput:
    """An output the client asked for, with its per-output parameters
    (``binary_data``, ``classification``, shared memory ...)."""

    __slots__ = ("name", "parameters")

    def __init__(self, name: str, parameters: dict[str, Any] | None = None):
        self.name = name
        self.parameters = parameters or {}


class InferRequest:
    """One inference request as the core sees it.

    ``model_version`` is the string from the URL / RPC; "" means "let the
    version policy choose". ``outputs`` empty means "all outputs".
    ``priority`` 0 and ``timeout_us`` 0 mean "model default".
    """

    __slots__ = ("model_name", "model_version", "id", "inputs", "outputs",
                 "parameters", "priority", "timeout_us")

    def __init__(self, model_name: str, model_version: str = "", id: str = "",
                 inputs: list[InferTensor] | None = None,
                 outputs: list[RequestedOutput] | None = None,
                 parameters: dict[str, Any] | None = None,
                 priority: int = 0, timeout_us: int = 0):
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.inputs = inputs if inputs is not None else []
        self.outputs = outputs if outputs is not None else []
        self.parameters = parameters or {}
        self.priority = priority
        self.timeout_us = timeout_us


class InferResponse:
    """The result of one request: outputs in the order the client asked for
    them (or the model's config order when it asked for none)."""

    __slots__ = ("model_name", "model_version", "id", "outputs", "parameters")

    def __init__(self, model_name: str, model_version: str, id: str,
                 outputs: list[InferTensor], parameters: dict[str, Any] | None = None):
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.outputs = outputs
        self.parameters = parameters or {}
