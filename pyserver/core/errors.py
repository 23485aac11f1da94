"""Triton's error codes and the one exception type that carries them.

Frontends map ``ServerError.code`` to an HTTP status or a gRPC status code; the
message is sent as is, so texts here and at raise sites follow Triton's wording.
"""

from __future__ import annotations

import enum


class Code(enum.IntEnum):
    # Values match csrc/include/pyserver/status.h (and TRITONSERVER_Error_Code).
    OK = 0
    UNKNOWN = 1
    INTERNAL = 2
    NOT_FOUND = 3
    INVALID_ARG = 4
    UNAVAILABLE = 5
    UNSUPPORTED = 6
    ALREADY_EXISTS = 7
    CANCELLED = 8


# Triton's http_server.cc HttpCodeFromError.
HTTP_STATUS = {
    Code.UNKNOWN: 400,
    Code.INTERNAL: 500,
    Code.NOT_FOUND: 404,
    Code.INVALID_ARG: 400,
    Code.UNAVAILABLE: 503,
    Code.UNSUPPORTED: 501,
    Code.ALREADY_EXISTS: 400,
    Code.CANCELLED: 400,
}

# gRPC status code numbers (grpc_utils.cc mapping).
GRPC_STATUS = {
    Code.UNKNOWN: 2,
    Code.INTERNAL: 13,
    Code.NOT_FOUND: 5,
    Code.INVALID_ARG: 3,
    Code.UNAVAILABLE: 14,
    Code.UNSUPPORTED: 12,
    Code.ALREADY_EXISTS: 6,
    Code.CANCELLED: 1,
}


class ServerError(Exception):
    """An error with a Triton code; ``str(err)`` is the client-visible message."""

    __slots__ = ("code", "message")

    def __init__(self, code: Code, message: str):
        super().__init__(message)
        self.code = Code(code)
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    @property
    def grpc_status(self) -> int:
        return GRPC_STATUS.get(self.code, 13)

    def __repr__(self) -> str:
        return f"ServerError({self.code.name}, {self.message!r})"


def invalid_arg(msg: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, msg)


def not_found(msg: str) -> ServerError:
    return ServerError(Code.NOT_FOUND, msg)


def unavailable(msg: str) -> ServerError:
    return ServerError(Code.UNAVAILABLE, msg)


def internal(msg: str) -> ServerError:
    return ServerError(Code.INTERNAL, msg)
