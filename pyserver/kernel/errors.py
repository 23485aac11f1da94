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


class GrpcStatus(enum.IntEnum):
    """gRPC's status codes (the numbers on the wire, grpc-status)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


# Triton's grpc_utils.cc mapping of its codes to gRPC's.
GRPC_STATUS = {
    Code.UNKNOWN: GrpcStatus.UNKNOWN,
    Code.INTERNAL: GrpcStatus.INTERNAL,
    Code.NOT_FOUND: GrpcStatus.NOT_FOUND,
    Code.INVALID_ARG: GrpcStatus.INVALID_ARGUMENT,
    Code.UNAVAILABLE: GrpcStatus.UNAVAILABLE,
    Code.UNSUPPORTED: GrpcStatus.UNIMPLEMENTED,
    Code.ALREADY_EXISTS: GrpcStatus.ALREADY_EXISTS,
    Code.CANCELLED: GrpcStatus.CANCELLED,
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
        return GRPC_STATUS.get(self.code, GrpcStatus.INTERNAL)

    @property
    def grpc_message(self) -> str:
        """The message a gRPC client gets (the same text, unless a subclass
        says otherwise)."""
        return self.message

    def __repr__(self) -> str:
        return f"ServerError({self.code.name}, {self.message!r})"


# Triton's names of the codes (TRITONSERVER_ErrorCodeString), which its core
# puts before a message where it keeps one as a state's reason.
CODE_NAMES = {
    Code.UNKNOWN: "Unknown",
    Code.INTERNAL: "Internal",
    Code.NOT_FOUND: "Not found",
    Code.INVALID_ARG: "Invalid argument",
    Code.UNAVAILABLE: "Unavailable",
    Code.UNSUPPORTED: "Unsupported",
    Code.ALREADY_EXISTS: "Already exists",
    Code.CANCELLED: "Cancelled",
}


class VersionLoadError(ServerError):
    """One version of a model failed to load (its instances, its files):
    ``version`` says which, ``state_reason`` is the reason Triton's index
    keeps for it ("Internal: ...")."""

    __slots__ = ("version",)

    def __init__(self, version: int, code: Code, message: str):
        super().__init__(code, message)
        self.version = version

    @property
    def state_reason(self) -> str:
        return f"{CODE_NAMES.get(self.code, 'Unknown')}: {self.message}"


DECOUPLED_HTTP = "HTTP end point doesn't support models with decoupled transaction policy"
DECOUPLED_GRPC = "ModelInfer RPC doesn't support models with decoupled transaction policy"


class DecoupledModelError(ServerError):
    """A unary call to a decoupled model: one response per call cannot carry
    its 0..N responses. The message is the HTTP endpoint's text; gRPC
    ModelInfer answers ``grpc_message`` (Triton's two texts)."""

    __slots__ = ()

    def __init__(self):
        super().__init__(Code.UNSUPPORTED, DECOUPLED_HTTP)

    @property
    def grpc_message(self) -> str:
        return DECOUPLED_GRPC


def unknown_load_parameter(key: str) -> ServerError:
    """A model load parameter other than config and file:<path> (Triton
    answers this with an INTERNAL error; it is the client's mistake)."""
    return ServerError(Code.INVALID_ARG, f"unexpected load parameter '{key}': a model load "
                                         "takes 'config' and 'file:<path>'")


def json_type_error(message: str) -> ServerError:
    """A JSON field of the wrong type or missing, as TritonJson reports it
    ("attempt to access JSON non-... as ..."): INTERNAL, so HTTP 500, as
    Triton's HTTP frontend answers every TritonJson accessor failure
    (qa/L0_http asserts the 500)."""
    return ServerError(Code.INTERNAL, message)


# The JSON parser's complaints (orjson's and the standard library's) in the
# words of rapidjson, which Triton's HTTP frontend parses with; one that
# depends on where the parser was (a document cut short) keeps its own.
_RAPIDJSON_WORDS = (
    ("zero-length", "The document is empty."),
    ("input data is empty", "The document is empty."),
    ("expected a string key", "Missing a name for object member."),
    ("Expecting property name", "Missing a name for object member."),
    ("expected ':'", "Missing a colon after a name of object member."),
    ("Expecting ':'", "Missing a colon after a name of object member."),
    ("expected ',' or '}'", "Missing a comma or '}' after an object member."),
    ("expected ',' or ']'", "Missing a comma or ']' after an array element."),
    ("content after document", "The document root must not be followed by other values."),
    ("Extra data", "The document root must not be followed by other values."),
    ("decimal point", "Missing fraction part in number."),
    ("exponent", "Missing exponent in number."),
    ("escape", "Invalid escape character in string."),
    ("invalid literal", "Invalid value."),
    ("Expecting value", "Invalid value."),
    ("unexpected character", "Invalid value."),
)


def json_parse_error(err) -> ServerError:
    """A request body that is not JSON (``err``: a JSONDecodeError of orjson
    or the standard library, or the UnicodeDecodeError of bytes that are not
    UTF-8): TritonJson's text, "failed to parse the request JSON buffer:
    <what> at <offset>", and its code, INTERNAL (HTTP 500)."""
    if isinstance(err, UnicodeDecodeError):
        what, pos = "Invalid value.", err.start
    else:
        what, pos = err.msg, err.pos
        for words, rapidjson in _RAPIDJSON_WORDS:
            if words in what:
                what = rapidjson
                break
    return ServerError(Code.INTERNAL, f"failed to parse the request JSON buffer: {what} at {pos}")


def request_json_too_large(size: int, limit: int) -> str:
    """Triton's text for a JSON request body past --http-max-input-size
    (every route's body but infer's, whose binary tensors may pass it)."""
    return (f"request JSON size of {size} bytes exceeds the maximum allowed input size of "
            f"{limit} bytes. Use --http-max-input-size to increase the limit.")


def shape_too_large(name: str, shape) -> str:
    """The text for an input whose shape no array can have: its non-zero
    dimensions times the element size pass 2^63-1 bytes (a zero dimension
    does not make [0, 2^63-1] allocatable)."""
    dims = ",".join(str(d) for d in shape)
    return (f"invalid shape for input '{name}': shape [{dims}] is larger than any tensor "
            f"can be (its non-zero dimensions exceed {(1 << 63) - 1} bytes)")


def invalid_arg(msg: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, msg)


def not_found(msg: str) -> ServerError:
    return ServerError(Code.NOT_FOUND, msg)


def not_running() -> ServerError:
    """What a server that has stopped (or not started) answers: UNAVAILABLE
    "Server is not running", one text for the server's own calls, its C
    API and its backends' BLS."""
    return ServerError(Code.UNAVAILABLE, "Server is not running")


def unavailable(msg: str) -> ServerError:
    return ServerError(Code.UNAVAILABLE, msg)


def internal(msg: str) -> ServerError:
    return ServerError(Code.INTERNAL, msg)


def request_prefix(request_id: str) -> str:
    """What Triton puts before a request's error texts (LogRequest())."""
    return "[request id: " + (request_id or "<id_unknown>") + "] "
