"""Free TCP ports on 127.0.0.1 for the servers and tools tests start."""

from __future__ import annotations

import contextlib
import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now. The sockets that found them stay bound
    until all are found: ports looked up one at a time can come back equal
    (a server's HTTP and metrics ports once did, and it failed to start)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def free_port() -> int:
    return free_ports(1)[0]
