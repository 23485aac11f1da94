"""OpenAI's error object: every refusal on the OpenAI port is
``{"error": {"message", "type", "param", "code"}}`` with the HTTP status
OpenAI's API gives the same mistake (400 for a bad field, 404 for an
unknown model or route), never Triton's ``{"error": "..."}``."""

from __future__ import annotations

import orjson

from pyserver.kernel.errors import Code, ServerError

__all__ = ["OpenAIError", "error_body", "from_exception", "invalid", "model_not_found"]

# the error types OpenAI's clients tell apart, by HTTP status
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 405: "invalid_request_error",
          408: "timeout_error", 413: "invalid_request_error", 429: "rate_limit_error"}


def error_type(status: int) -> str:
    if status in _TYPES:
        return _TYPES[status]
    return "invalid_request_error" if status < 500 else "server_error"


class OpenAIError(Exception):
    """A request refused with ``status`` and OpenAI's error object."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None):  # noqa: A002 (OpenAI's name)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or error_type(status)

    def doc(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def body(self) -> bytes:
        return orjson.dumps(self.doc())


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400: the request itself is wrong."""
    return OpenAIError(400, message, param=param, code=code)


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(404, f"The model '{model}' does not exist or is not ready",
                       param="model", code="model_not_found")


# a server error's code -> (HTTP status, OpenAI error code)
_SERVER_CODES = {
    Code.INVALID_ARG: (400, "invalid_value"),
    Code.NOT_FOUND: (404, "not_found"),
    Code.ALREADY_EXISTS: (400, None),
    Code.UNSUPPORTED: (400, "unsupported"),
    Code.UNAVAILABLE: (503, "unavailable"),
    Code.CANCELLED: (400, "cancelled"),
    Code.INTERNAL: (500, None),
    Code.UNKNOWN: (500, None),
}


def from_exception(e: BaseException) -> OpenAIError:
    """What a failure anywhere below (the server refusing the request, the
    model failing it, a bug) is answered with."""
    if isinstance(e, OpenAIError):
        return e
    if isinstance(e, ServerError):
        status, code = _SERVER_CODES.get(e.code, (500, None))
        return OpenAIError(status, e.message, code=code)
    return OpenAIError(500, str(e) or type(e).__name__)


def error_body(message: str) -> bytes:
    """The HTTP stack's own refusals (limits, malformed requests, timeouts)
    in OpenAI's shape (HttpConnection.error_body)."""
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error",
                                   "param": None, "code": None}})
