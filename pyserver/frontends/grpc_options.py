"""The gRPC endpoint's transport options, as Triton's command line names them:
TLS (``--grpc-use-ssl``, ``--grpc-use-ssl-mutual``, ``--grpc-server-cert``,
``--grpc-server-key``, ``--grpc-root-cert``), response compression
(``--grpc-infer-response-compression-level``), ``--reuse-grpc-port``,
``--grpc-header-forward-pattern``, ``--grpc-max-response-pool-size``,
``--grpc-infer-thread-count`` (the socket pump's threads, listener.py) and
keepalive (grpc_keepalive.py).

TLS is asyncio's own (the event loop wraps the HTTP/2 protocol in its SSL
transport); gRPC clients insist on ALPN selecting ``h2``, so the context
offers it.
"""

from __future__ import annotations

import ssl

from pyserver.kernel.flags import parse_bool

__all__ = ["COMPRESSION_LEVELS", "add_cli_arguments", "frontend_options", "tls_context"]

# Triton's level names; gRPC leaves the mapping to the implementation, and
# here each is a zlib level for gzip-compressed responses.
COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 6, "high": 9}


class GrpcOptionError(ValueError):
    """A gRPC transport option that cannot be used; the message says why."""


def tls_context(server_cert: str, server_key: str, root_cert: str | None = None,
                mutual: bool = False) -> ssl.SSLContext:
    """A server TLS context for gRPC; with ``mutual`` the client must present
    a certificate signed by ``root_cert``."""
    if not server_cert or not server_key:
        raise GrpcOptionError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    if mutual and not root_cert:
        raise GrpcOptionError("--grpc-use-ssl-mutual needs --grpc-root-cert")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(server_cert, server_key)
        if root_cert:
            ctx.load_verify_locations(root_cert)
    except (OSError, ssl.SSLError) as err:
        raise GrpcOptionError(f"cannot load the gRPC TLS certificates: {err}") from err
    if mutual:
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2"])
    return ctx


def add_cli_arguments(parser) -> None:

    group = parser.add_argument_group("gRPC transport")
    group.add_argument("--grpc-use-ssl", type=parse_bool, default=False,
                       help="serve gRPC over TLS")
    group.add_argument("--grpc-use-ssl-mutual", type=parse_bool, default=False,
                       help="serve gRPC over TLS and require client certificates")
    group.add_argument("--grpc-server-cert", default="", help="PEM certificate chain file")
    group.add_argument("--grpc-server-key", default="", help="PEM private key file")
    group.add_argument("--grpc-root-cert", default="",
                       help="PEM CA certificates that sign client certificates")
    group.add_argument("--grpc-infer-response-compression-level", default="none",
                       choices=sorted(COMPRESSION_LEVELS),
                       help="gzip responses for clients that accept it")
    group.add_argument("--reuse-grpc-port", type=parse_bool, default=False,
                       help="let several servers listen on the gRPC port (SO_REUSEPORT)")
    group.add_argument("--grpc-header-forward-pattern", default="", metavar="REGEX",
                       help="gRPC metadata whose key this matches (case-insensitive unless it "
                       "starts with (?-i)) become request parameters")
    group.add_argument("--grpc-max-response-pool-size", type=_positive_int, default=0,
                       metavar="N",
                       help="at most N responses of one streamed request on their way to the "
                       "client; a decoupled model that sends more waits (default: no bound)")
    from pyserver.frontends.listener import thread_count
    group.add_argument("--grpc-infer-thread-count", type=thread_count, default=0, metavar="N",
                       help="threads of their own that read and write the gRPC connections "
                       "(a socket pump; TLS connections stay on the event loop); 0: the event "
                       "loop does")
    from pyserver.frontends import grpc_keepalive
    grpc_keepalive.add_cli_arguments(group)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        import argparse
        raise argparse.ArgumentTypeError(
            "Error: --grpc-max-response-pool-size must be greater than 0.")
    return value


def frontend_options(args) -> dict:
    """GrpcFrontend keyword arguments from the parsed command line."""
    from pyserver.frontends.grpc_keepalive import options_from_args
    options = {"response_compression":
               COMPRESSION_LEVELS[args.grpc_infer_response_compression_level],
               "reuse_port": args.reuse_grpc_port, "keepalive": options_from_args(args),
               "max_response_pool_size": args.grpc_max_response_pool_size,
               "io_threads": args.grpc_infer_thread_count}
    if args.grpc_header_forward_pattern:  # GrpcFrontend compiles (and checks) it
        options["header_forward_pattern"] = args.grpc_header_forward_pattern
    if args.grpc_use_ssl or args.grpc_use_ssl_mutual:
        options["ssl_context"] = tls_context(
            args.grpc_server_cert, args.grpc_server_key, args.grpc_root_cert or None,
            mutual=args.grpc_use_ssl_mutual)
    return options
