"""Triton's private module layout, for code that reaches into it (Triton's
OpenAI frontend names tritonserver._api._response.InferenceResponse)."""

from tritonserver._api import (  # noqa: F401
    _datautils,
    _dlpack,
    _memorybuffer,
    _model,
    _request,
    _response,
    _server,
    _tensor,
)
