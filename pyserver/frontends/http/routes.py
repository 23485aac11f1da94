"""The HTTP route table: which handler a request target goes to, the
restricted-API group that guards it and the methods it takes.

``match(url)`` returns a Route or None (404). The connection then applies
the group's restriction (403), the methods (405) and calls
``route.handler(conn, method, headers, body, keep_alive, *route.args)``.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote

from pyserver.frontends.http import admin
from pyserver.frontends.http.generate import generate, generate_stream
from pyserver.frontends.http.infer import infer
from pyserver.frontends.restricted import parse_restricted
from pyserver.runtime.shared_memory import CUDA, SYSTEM

# restricted_features.h RESTRICTED_CATEGORY_NAMES
RESTRICTED_API_GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config",
                         "model-repository", "statistics", "trace", "logging")

GET = ("GET",)
POST = ("POST",)
GET_POST = ("GET", "POST")


class Route(NamedTuple):
    handler: object  # handler(conn, method, headers, body, keep_alive, *args)
    group: str  # the restricted-API group
    methods: tuple
    args: tuple = ()


# /v2/models/<model>[/versions/<version>]/<kind>
_MODEL_ROUTES = {
    "": (admin.model_metadata, "metadata", GET),
    "config": (admin.model_config, "model-config", GET),
    "ready": (admin.model_ready, "health", GET),
    "stats": (admin.statistics, "statistics", GET),
    "infer": (infer, "inference", POST),
    "generate": (generate, "inference", POST),
    "generate_stream": (generate_stream, "inference", POST),
    "trace/setting": (admin.trace_settings, "trace", GET_POST),
}
_SERVER_METADATA = Route(admin.server_metadata, "metadata", GET)
_ALL_STATS = Route(admin.statistics, "statistics", GET, ("", ""))
_TRACE = Route(admin.trace_settings, "trace", GET_POST)
_LOGGING = Route(admin.log_settings, "logging", GET_POST)


def match(url: bytes) -> Route | None:
    """The route of a request target (its query string ignored), or None."""
    q = url.find(b"?")
    if q >= 0:
        url = url[:q]
    parts = url.decode("utf-8", "replace").split("/")
    n = len(parts)
    if n < 2 or parts[0] or parts[1] != "v2":
        return None
    if n == 2:  # /v2
        return _SERVER_METADATA
    section = parts[2]
    if section == "models" and n >= 4:
        return _model_route(parts)
    if section == "health" and n == 4 and (parts[3] == "live" or parts[3] == "ready"):
        return Route(admin.health, "health", GET, (parts[3],))
    if section == "systemsharedmemory" or section == "cudasharedmemory":
        return _shared_memory_route(SYSTEM if section == "systemsharedmemory" else CUDA,
                                    parts[3:])
    if section == "repository":
        return _repository_route(parts[3:])
    if section == "trace" and n == 4 and parts[3] == "setting":
        return _TRACE
    if section == "logging" and n == 3:
        return _LOGGING
    return None


def _model_route(parts: list) -> Route | None:
    n = len(parts)
    model = parts[3]
    if not model:
        return None
    if n == 4 and model == "stats":  # /v2/models/stats: every model
        return _ALL_STATS
    if "%" in model:
        model = unquote(model)
    version = ""
    i = 4
    if n >= 6 and parts[4] == "versions":
        version = parts[5]
        if not (version.isdigit() and version.isascii()):
            return None
        i = 6
    if i == n:
        kind = ""
    elif i + 1 == n:
        kind = parts[i]
    elif i + 2 == n and parts[i] == "trace" and parts[i + 1] == "setting" and i == 4:
        kind = "trace/setting"
    else:
        return None
    entry = _MODEL_ROUTES.get(kind)
    if entry is None:
        return None
    return Route(entry[0], entry[1], entry[2], (model, version))


def _shared_memory_route(kind: str, rest: list) -> Route | None:
    if len(rest) == 1:
        region, action = "", rest[0]
    elif len(rest) == 3 and rest[0] == "region" and rest[1]:
        region, action = unquote(rest[1]), rest[2]
    else:
        return None
    if action not in ("status", "register", "unregister"):
        return None
    return Route(admin.shared_memory, "shared-memory", GET if action == "status" else POST,
                 (kind, region, action))


def _repository_route(rest: list) -> Route | None:
    # /v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))
    k = len(rest)
    if k == 1 and rest[0] == "index":
        args = ("index", None, None)
    elif k == 2 and rest[1] == "index" and rest[0]:
        args = ("index", None, rest[0])
    elif k == 3 and rest[0] == "models" and rest[1] and rest[2] in ("load", "unload"):
        args = (rest[2], rest[1], None)
    elif k == 4 and rest[0] and rest[1] == "models" and rest[2] and rest[3] in ("load", "unload"):
        args = (rest[3], rest[2], rest[0])
    else:
        return None
    return Route(admin.repository, "model-repository", POST, args)


def parse_restricted_api(values) -> dict:
    """``--http-restricted-api`` values ("<api-1>,<api-2>:<key>=<value>", the
    flag may repeat) -> {group: (header key, header value)}. Raises
    ValueError with Triton's texts (command_line_parser.cc)."""
    return parse_restricted(values, "--http-restricted-api", "api", RESTRICTED_API_GROUPS)
