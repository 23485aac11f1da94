"""gRPC connection keepalive and ping policing, with the settings (and
defaults) of Triton's command line, which are gRPC core's channel arguments:

- ``--grpc-keepalive-time`` (ms, 2 h): how often the server PINGs a client;
  ``--grpc-keepalive-timeout`` (ms, 20 s): a PING not acknowledged in that
  time closes the connection (a client that vanished without a FIN).
  Without calls in flight it pings only with
  ``--grpc-keepalive-permit-without-calls``, and at most
  ``--grpc-http2-max-pings-without-data`` (2; 0: no limit) PINGs go out
  while no HEADERS or DATA frame does.
- A client's PINGs: one that comes sooner than
  ``--grpc-http2-min-recv-ping-interval-without-data`` (ms, 5 min; 2 h when
  no call is in flight and pings without calls are not permitted) after the
  previous one, with no HEADERS or DATA sent between them, is a strike;
  past ``--grpc-http2-max-ping-strikes`` (2; 0: no limit) the connection
  gets GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") and closes.
- ``--grpc-max-connection-age`` (ms, none): then GOAWAY, so the client
  reconnects (calls in flight finish); ``--grpc-max-connection-age-grace``
  (ms, none): then the connection closes whatever is still running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyserver.engine.protocol.http2 import ENHANCE_YOUR_CALM
from pyserver.kernel.flags import parse_bool

log = logging.getLogger("pyserver")

__all__ = ["ConnectionKeepalive", "KeepaliveOptions", "add_cli_arguments", "options_from_args"]

_IDLE_PING_INTERVAL_S = 2 * 3600.0  # gRPC core's when pings without calls are not permitted


@dataclass(frozen=True)
class KeepaliveOptions:
    time_ms: int = 7200000
    timeout_ms: int = 20000
    permit_without_calls: bool = False
    max_pings_without_data: int = 2
    min_recv_ping_interval_without_data_ms: int = 300000
    max_ping_strikes: int = 2
    max_connection_age_ms: int | None = None
    max_connection_age_grace_ms: int | None = None


class ConnectionKeepalive:
    """The policy for one ``http2.Connection``: set as ``conn.keepalive``,
    ``start(loop)`` once it is open; the connection calls ``ping_received``
    and ``ping_acked`` for PING frames and ``stop`` when it goes away."""

    def __init__(self, conn, options: KeepaliveOptions):
        self._conn = conn
        self._options = options
        self._loop = None
        self._timers: dict[str, object] = {}
        self._pings_without_data = 0
        self._frames_at_ping = 0  # frames_sent when we last pinged
        self._strikes = 0
        self._last_ping_recv: float | None = None
        self._frames_at_recv = 0  # frames_sent at the client's last PING

    def start(self, loop) -> None:
        self._loop = loop
        opts = self._options
        if opts.time_ms > 0:
            self._schedule("keepalive", opts.time_ms, self._keepalive_due)
        if opts.max_connection_age_ms is not None and opts.max_connection_age_ms > 0:
            self._schedule("age", opts.max_connection_age_ms, self._age_reached)

    def stop(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._conn = None

    def _schedule(self, name: str, delay_ms: int, callback) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        self._timers[name] = self._loop.call_later(delay_ms / 1000.0, callback)

    # -- the server's own pings ------------------------------------------------------

    def _keepalive_due(self) -> None:
        conn = self._conn
        if conn is None:
            return
        opts = self._options
        self._schedule("keepalive", opts.time_ms, self._keepalive_due)
        if conn.frames_sent != self._frames_at_ping:
            self._pings_without_data = 0
            self._frames_at_ping = conn.frames_sent
        if conn.open_streams == 0 and not opts.permit_without_calls:
            return
        if opts.max_pings_without_data and \
                self._pings_without_data >= opts.max_pings_without_data:
            return
        self._pings_without_data += 1
        if "ack" not in self._timers:
            self._schedule("ack", opts.timeout_ms, self._ack_missed)
        conn.ping()

    def ping_acked(self) -> None:
        handle = self._timers.pop("ack", None)
        if handle is not None:
            handle.cancel()

    def _ack_missed(self) -> None:
        self._timers.pop("ack", None)
        conn = self._conn
        if conn is not None:
            log.info("gRPC: keepalive PING not acknowledged within %d ms; closing the "
                     "connection", self._options.timeout_ms)
            conn.close()

    # -- the client's pings --------------------------------------------------------

    def ping_received(self) -> None:
        conn = self._conn
        if conn is None:
            return
        opts = self._options
        if conn.frames_sent != self._frames_at_recv:  # calls went out since: a clean slate
            self._frames_at_recv = conn.frames_sent
            self._strikes = 0
            self._last_ping_recv = None
        now = self._loop.time()
        interval = _IDLE_PING_INTERVAL_S \
            if conn.open_streams == 0 and not opts.permit_without_calls \
            else opts.min_recv_ping_interval_without_data_ms / 1000.0
        too_soon = self._last_ping_recv is not None and now < self._last_ping_recv + interval
        self._last_ping_recv = now
        if not too_soon:
            return
        self._strikes += 1
        if opts.max_ping_strikes and self._strikes > opts.max_ping_strikes:
            log.info("gRPC: a client sent too many PINGs without calls between them; "
                     "GOAWAY(ENHANCE_YOUR_CALM)")
            conn.goaway(ENHANCE_YOUR_CALM, b"too_many_pings")

    # -- connection age --------------------------------------------------------------

    def _age_reached(self) -> None:
        self._timers.pop("age", None)
        conn = self._conn
        if conn is None:
            return
        conn.shutdown()  # GOAWAY(NO_ERROR): calls in flight finish, new ones reconnect
        grace = self._options.max_connection_age_grace_ms
        if grace is not None and grace >= 0:
            self._schedule("grace", grace, self._grace_over)

    def _grace_over(self) -> None:
        self._timers.pop("grace", None)
        if self._conn is not None:
            self._conn.close()


def add_cli_arguments(group) -> None:
    d = KeepaliveOptions()
    group.add_argument("--grpc-keepalive-time", type=int, default=d.time_ms, metavar="MS",
                       help="PING clients this often (default 7200000)")
    group.add_argument("--grpc-keepalive-timeout", type=int, default=d.timeout_ms, metavar="MS",
                       help="close a connection whose PING is not acknowledged in this time")
    group.add_argument("--grpc-keepalive-permit-without-calls", type=parse_bool,
                       default=d.permit_without_calls,
                       help="PING (and accept PINGs) while no call is in flight")
    group.add_argument("--grpc-http2-max-pings-without-data", type=int,
                       default=d.max_pings_without_data, metavar="N",
                       help="PINGs sent while no data goes out (0: no limit)")
    group.add_argument("--grpc-http2-min-recv-ping-interval-without-data", type=int,
                       default=d.min_recv_ping_interval_without_data_ms, metavar="MS",
                       help="a client PING sooner than this after its last, with no data "
                       "between, is a strike")
    group.add_argument("--grpc-http2-max-ping-strikes", type=int, default=d.max_ping_strikes,
                       metavar="N", help="strikes before GOAWAY (0: no limit)")
    group.add_argument("--grpc-max-connection-age", type=int, default=None, metavar="MS",
                       help="GOAWAY a connection this old (clients reconnect)")
    group.add_argument("--grpc-max-connection-age-grace", type=int, default=None, metavar="MS",
                       help="after --grpc-max-connection-age, close it this much later")


def options_from_args(args) -> KeepaliveOptions:
    for flag, value in (("--grpc-keepalive-time", args.grpc_keepalive_time),
                        ("--grpc-keepalive-timeout", args.grpc_keepalive_timeout),
                        ("--grpc-http2-max-pings-without-data",
                         args.grpc_http2_max_pings_without_data),
                        ("--grpc-http2-min-recv-ping-interval-without-data",
                         args.grpc_http2_min_recv_ping_interval_without_data),
                        ("--grpc-http2-max-ping-strikes", args.grpc_http2_max_ping_strikes),
                        ("--grpc-max-connection-age", args.grpc_max_connection_age),
                        ("--grpc-max-connection-age-grace", args.grpc_max_connection_age_grace)):
        if value is not None and value < 0:
            raise ValueError(f"{flag} must be >= 0, not {value}")
    return KeepaliveOptions(
        args.grpc_keepalive_time, args.grpc_keepalive_timeout,
        args.grpc_keepalive_permit_without_calls, args.grpc_http2_max_pings_without_data,
        args.grpc_http2_min_recv_ping_interval_without_data, args.grpc_http2_max_ping_strikes,
        args.grpc_max_connection_age, args.grpc_max_connection_age_grace)
