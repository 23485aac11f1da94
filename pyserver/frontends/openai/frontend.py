"""OpenAIFrontend: OpenAI's API on its own port, over the same HTTP/1.1
stack as Triton's endpoint (keep-alive, pipelining, limits, slow-client
bounds), with its own routes (routes.py) and OpenAI's error object for
every refusal, the stack's own included.

A client that goes away cancels what it asked for: when the connection is
lost, or when a streaming client closes its side, each of its generations
still in flight is cancelled through ``Server.cancel_stream`` (a queued
request leaves the queue, a running model sees ``is_cancelled()``).
"""

from __future__ import annotations

import time

from pyserver.frontends.http.connection import HttpConnection
from pyserver.frontends.http.framing import JSON_HEADERS, build
from pyserver.frontends.http.frontend import HttpFrontend
from pyserver.frontends.openai import chat, codec, routes
from pyserver.frontends.openai.errors import OpenAIError, error_body, from_exception, model_not_found

DEFAULT_PORT = 9000
# as Triton's OpenAI frontend (--default-max-tokens)
DEFAULT_MAX_TOKENS = 16
OWNED_BY = "Triton Inference Server"


class OpenAIConnection(HttpConnection):
    __slots__ = ("generations",)

    error_body = staticmethod(error_body)

    def __init__(self, frontend):
        super().__init__(frontend)
        self.generations: set = set()  # routes.Generation in flight

    def _dispatch(self, method: str, url: bytes, headers: dict, body: bytes, keep_alive: bool):
        route = routes.match(url)
        if route is None:
            path = url.split(b"?", 1)[0].decode("utf-8", "replace")
            e = OpenAIError(404, f"Invalid URL ({method} {path})", code="unknown_url")
            return self.respond(404, JSON_HEADERS, e.body(), keep_alive)
        if method not in route.methods:
            e = OpenAIError(405, f"Method {method} is not allowed for this URL; use "
                                 f"{' or '.join(route.methods)}.", code="method_not_allowed")
            return self.respond(405, JSON_HEADERS, e.body(), keep_alive)
        return route.handler(self, method, headers, body, keep_alive, *route.args)

    def respond_exception(self, e: BaseException, keep_alive: bool):
        err = from_exception(e)
        self.respond(err.status, JSON_HEADERS, err.body(), keep_alive)

    def error_data(self, e: BaseException, keep_alive: bool, http10: bool,
                   headers=JSON_HEADERS) -> list:
        err = from_exception(e)
        return build(err.status, headers, err.body(), keep_alive, http10)

    # -- a client that goes away ---------------------------------------------------

    def cancel_generations(self, streaming_only: bool = False) -> None:
        for generation in list(self.generations):
            if not streaming_only or generation.req.stream:
                generation.cancel()

    def connection_lost(self, exc):
        self.cancel_generations()
        super().connection_lost(exc)

    def eof_received(self):
        # A stream's reader that closes its side is gone (as nginx takes
        # it); a plain request may still be read, as on the HTTP port.
        self.cancel_generations(streaming_only=True)
        return super().eof_received()


class OpenAIFrontend(HttpFrontend):
    """OpenAI's API (``/v1/models``, ``/v1/completions``,
    ``/v1/chat/completions``, ``/v1/embeddings``) on ``host:port``.

    ``default_max_tokens``: what a request that sets none asks for;
    ``chat_template``: a chat.ChatTemplate used for every model instead of
    the one in its folder. Other keywords are HttpFrontend's."""

    connection_class = OpenAIConnection
    infer_lane = False  # its routes are its own

    def __init__(self, server, host: str = "0.0.0.0", port: int = DEFAULT_PORT, *,
                 default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 chat_template: chat.ChatTemplate | None = None, **http_options):
        super().__init__(server, host, port, **http_options)
        self.default_max_tokens = default_max_tokens
        self.chat_template = chat_template
        self._created: dict = {}  # model -> when it was first listed (OpenAI's "created")
        # model -> (its config, ModelIO, chat template or None): read again
        # when the model (re)loads, which gives it a new config object
        self._models: dict = {}

    # -- models ----------------------------------------------------------------------

    def _ready_names(self) -> list[str]:
        return sorted({row["name"] for row in self.server.repository_index(ready_only=True)})

    def _entry(self, name: str) -> dict:
        created = self._created.get(name)
        if created is None:
            created = self._created[name] = int(time.time())
        return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}

    def models_doc(self) -> dict:
        return {"object": "list", "data": [self._entry(n) for n in self._ready_names()]}

    def model_doc(self, name: str) -> dict:
        if not self.server.model_ready(name):
            raise model_not_found(name)
        return self._entry(name)

    def _model(self, name: str) -> list:
        if not name or not self.server.model_ready(name):
            raise model_not_found(name)
        config = self.server.model_config(name)
        known = self._models.get(name)
        if known is None or known[0] is not config:
            known = [config, codec.ModelIO(name, config), None]
            self._models[name] = known
        return known

    def model_io(self, name: str) -> codec.ModelIO:
        """How to talk to model ``name``; 404 unless it is ready."""
        return self._model(name)[1]

    def chat_prompt(self, name: str, messages: list) -> str:
        template = self.chat_template
        if template is None:
            known = self._model(name)
            if known[2] is None:
                known[2] = chat.find_template(self.server.model_folder(name)) or False
            template = known[2] or None
        if template is None:
            return chat.default_prompt(messages)
        return template.render(messages, name)
