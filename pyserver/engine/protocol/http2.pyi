from typing import Any, Callable

UNARY: int
STREAMING: int
OK: int
CANCELLED: int
UNKNOWN: int
DEADLINE_EXCEEDED: int
RESOURCE_EXHAUSTED: int
UNIMPLEMENTED: int
INTERNAL: int
UNAVAILABLE: int
NO_ERROR: int
CANCEL: int
REFUSED_STREAM: int
ENHANCE_YOUR_CALM: int

def percent_encode(message: str, limit: int = 0) -> bytes: ...

class Stream:
    id: int
    connection: Connection
    route: tuple[int, Callable[[Stream, bytes | None], Any]] | None
    path: bytes | None
    headers: list[tuple[bytes, bytes]] | None
    encoding: bytes | None
    half_closed: bool
    closed: bool
    finished: bool
    reset_code: int
    cancel_callback: Callable[[], Any] | None
    data: Any
    @property
    def timeout(self) -> float | None: ...
    def header(self, name: bytes) -> bytes | None: ...
    def send_message(self, payload: bytes, framed: bool = ...) -> bool: ...
    def respond(self, payload: bytes, framed: bool = ...) -> bool: ...
    def finish(self, status: int = ..., message: str | None = ...) -> bool: ...
    def reset(self, error_code: int = ...) -> bool: ...

class Connection:
    routes: dict[bytes, tuple[int, Callable[[Stream, bytes | None], Any]]]
    capture_headers: bool
    max_message_size: int
    max_header_list_size: int
    response_compression: int
    open_streams: int
    pending_bytes: int
    frames_sent: int
    keepalive: Any
    def __init__(self, routes: dict[bytes, tuple[int, Callable[[Stream, bytes | None], Any]]], *,
                 max_message_size: int = ..., capture_headers: bool = ...,
                 max_concurrent_streams: int = ..., initial_window_size: int = ...,
                 connection_window_size: int = ..., max_frame_size: int = ...,
                 max_header_list_size: int = ..., response_compression: int = ...,
                 on_open: Callable[[Connection], Any] | None = ...,
                 on_close: Callable[[Connection], Any] | None = ...) -> None: ...
    def connection_made(self, transport: Any) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> bool: ...
    def connection_lost(self, exc: BaseException | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def shutdown(self) -> None: ...
    def close(self) -> None: ...
    def ping(self) -> None: ...
    def goaway(self, error_code: int, debug: bytes = ...) -> None: ...
