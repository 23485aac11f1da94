"""HTTP/1.1 KServe v2 frontend (Triton's HTTP/REST API), by concern.

frontend    HttpFrontend: the listening socket, the settings connections share
connection  HttpConnection: one asyncio.Protocol over llhttp, dispatch, the
            answers' queue in request order (keep-alive, pipelining)
routes      the route table: a target's handler, API group and methods;
            --http-restricted-api
admin       health, metadata, config, readiness, statistics, repository,
            settings and shared-memory handlers
infer       the infer handler (decode once, submit, answer as the batch completes)
generate    the generate extension's handlers
framing     status lines, shared bodies, the answer slots

The infer body codec is compiled (engine/protocol/http_codec.pyx), the generate
codec http_generate.py.
"""

from pyserver.frontends.http.frontend import HttpFrontend
from pyserver.frontends.http.routes import RESTRICTED_API_GROUPS, parse_restricted_api

__all__ = ["HttpFrontend", "RESTRICTED_API_GROUPS", "parse_restricted_api"]
