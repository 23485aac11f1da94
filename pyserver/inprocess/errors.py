"""Triton's in-process API error classes, and the one mapping from the
server's ServerError codes to them (as Triton's binding maps
TRITONSERVER_Error codes: a code it has no class for is UnknownError)."""

from __future__ import annotations

from pyserver.kernel.errors import Code, ServerError

__all__ = ["AlreadyExistsError", "InternalError", "InvalidArgumentError", "NotFoundError",
           "TritonError", "UnavailableError", "UnknownError", "UnsupportedError", "api_error",
           "server_error"]


class TritonError(Exception):
    """Every error the API raises or puts on a response."""


class UnknownError(TritonError):
    pass


class InternalError(TritonError):
    pass


class NotFoundError(TritonError):
    pass


class InvalidArgumentError(TritonError):
    pass


class UnavailableError(TritonError):
    pass


class UnsupportedError(TritonError):
    pass


class AlreadyExistsError(TritonError):
    pass


_BY_CODE = {
    Code.INTERNAL: InternalError,
    Code.NOT_FOUND: NotFoundError,
    Code.INVALID_ARG: InvalidArgumentError,
    Code.UNAVAILABLE: UnavailableError,
    Code.UNSUPPORTED: UnsupportedError,
    Code.ALREADY_EXISTS: AlreadyExistsError,
}


def api_error(error: BaseException) -> TritonError:
    """The API's error for what the server raised or answered: a
    ServerError by its code (CANCELLED and UNKNOWN are UnknownError, as in
    Triton), an API error as it is, anything else InternalError."""
    if isinstance(error, TritonError):
        return error
    if isinstance(error, ServerError):
        return _BY_CODE.get(error.code, UnknownError)(error.message)
    return InternalError(str(error) or type(error).__name__)


def server_error(error: BaseException) -> ServerError:
    """The ServerError (Triton's code and text) for what the API raised:
    the inverse of api_error, for callers that answer in TRITONSERVER_Error
    codes (the C API, c_api.py). A TypeError of a badly typed option is
    INVALID_ARG; anything else INTERNAL."""
    if isinstance(error, ServerError):
        return error
    for code, cls in _BY_CODE.items():
        if type(error) is cls:
            return ServerError(code, str(error))
    if isinstance(error, (TypeError, ValueError)):
        return ServerError(Code.INVALID_ARG, str(error))
    return ServerError(Code.INTERNAL, str(error) or type(error).__name__)
