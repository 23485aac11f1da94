"""The OpenAI routes and their handlers, over pyserver's HTTP/1.1 stack.

``match(url)`` finds a target's handler; each handler is called as the
HTTP routes' are, ``handler(conn, method, headers, body, keep_alive,
*args)``, and answers through the connection (frontend.OpenAIConnection).

A completion is one ``Server.submit_stream`` request whatever the model
(decoupled or not), answered by a Generation: as one JSON document once
the final response came, or, with ``stream: true``, as server-sent
events written as the responses come (chunked), ending ``data: [DONE]``.
Bad input is an HTTP error with OpenAI's error object; what fails once the
events began is an error event (``data: {"error": ...}``), which OpenAI's
clients raise.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import NamedTuple
from urllib.parse import unquote

import orjson

from pyserver.frontends.http.framing import (
    JSON_HEADERS,
    Slot,
    StreamSlot,
    event_stream_head,
    sse_event,
)
from pyserver.frontends.openai import codec, schema
from pyserver.frontends.openai.errors import from_exception

GET = ("GET",)
POST = ("POST",)
DONE = b"data: [DONE]\n\n"


class Route(NamedTuple):
    handler: object
    methods: tuple
    args: tuple = ()


def match(url: bytes) -> Route | None:
    q = url.find(b"?")
    path = (url[:q] if q >= 0 else url).decode("utf-8", "replace")
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    route = _ROUTES.get(path)
    if route is not None:
        return route
    if path.startswith("/v1/models/") and len(path) > len("/v1/models/"):
        return Route(retrieve_model, GET, (unquote(path[len("/v1/models/"):]),))
    return None


# ------------------------------------------------------------------ models

def list_models(conn, method, headers, body, keep_alive):
    conn.call(conn.frontend.models_doc, (), keep_alive, orjson.dumps)


def retrieve_model(conn, method, headers, body, keep_alive, model):
    conn.call(conn.frontend.model_doc, (model,), keep_alive, orjson.dumps)


# ------------------------------------------------------------------ generation

def completions(conn, method, headers, body, keep_alive):
    _generate(conn, body, keep_alive, schema.parse_completion)


def chat_completions(conn, method, headers, body, keep_alive):
    _generate(conn, body, keep_alive, schema.parse_chat)


def _generate(conn, body: bytes, keep_alive: bool, parse) -> None:
    frontend = conn.frontend
    try:
        req = parse(schema.parse_body(body))
        io = frontend.model_io(req.model)
        chat = req.kind == "chat"
        prompt = frontend.chat_prompt(req.model, req.messages) if chat else req.prompt
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        infer = codec.generate_request(io, prompt, req, frontend.default_max_tokens, request_id)
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    echo = prompt if req.echo and not codec.model_echoes(io) else ""
    stops = [] if codec.model_stops(io) else req.stop
    limit = None
    if req.max_tokens is not None or io.vllm or "max_tokens" in io.inputs:
        limit = req.max_tokens if req.max_tokens is not None else frontend.default_max_tokens
    Generation(conn, req, request_id, keep_alive, echo, stops, limit).start(infer)


class Generation:
    """One completions or chat request in flight, from submit to its answer."""

    __slots__ = ("conn", "req", "id", "created", "keep_alive", "http10", "slot", "stream",
                 "parts", "stop", "limit", "prompt_tokens", "completion_tokens", "done",
                 "cancel_asked", "chat")

    def __init__(self, conn, req, request_id: str, keep_alive: bool, echo: str,
                 stops: list, limit: int | None):
        self.conn = conn
        self.req = req
        self.chat = req.kind == "chat"
        self.id = request_id
        self.created = int(time.time())
        self.keep_alive = keep_alive
        self.http10 = conn.http10
        self.slot = StreamSlot(not keep_alive) if req.stream else Slot(not keep_alive)
        self.stream = None  # the ResponseStream, once submitted
        self.parts: list[str] = []  # the text so far (not streaming)
        self.stop = codec.StopFilter(stops) if stops else None
        self.limit = limit  # max_tokens, when the model is told it
        self.prompt_tokens = None
        self.completion_tokens = None
        self.done = False
        self.cancel_asked = False
        if req.stream:
            self.slot.chunks.append(event_stream_head(keep_alive))
            if self.chat:  # the first chunk names the role
                self._event(self._chunk({"role": "assistant", "content": ""}, None))
        if echo:
            self._emit(echo)

    # -- the request ---------------------------------------------------------------

    def start(self, infer) -> None:
        conn = self.conn
        conn.pending.append(self.slot)
        conn.generations.add(self)
        try:
            self.stream = conn.server.submit_stream(infer, self.on_response)
        except Exception as e:
            # refused before anything was written: an HTTP error, not an event
            conn.generations.discard(self)
            self.done = True
            data = conn.error_data(e, self.keep_alive, self.http10)
            if self.req.stream:
                self.slot.chunks = data
                self.slot.done = True
            else:
                self.slot.data = data
            conn.answered()
            return
        if self.cancel_asked:
            self.cancel()
        conn.answered()

    def cancel(self) -> None:
        """Cancels the model's request (the client went away, or a stop
        sequence ended the text): a running model sees is_cancelled()."""
        self.cancel_asked = True
        if self.stream is not None:
            self.conn.server.cancel_stream(self.stream)

    def on_response(self, response, error, final) -> None:
        if self.done:
            return
        try:
            if error is not None:
                return self._fail(error)
            if response is not None:
                self._take(response)
                if self.done:
                    return
            if final:
                self._finish(None)
        except Exception as e:  # never leave the client waiting on a bug
            if not self.done:
                self._fail(e)

    # -- what comes back -----------------------------------------------------------

    def _take(self, response) -> None:
        n_in, n_out = codec.token_counts(response)
        if n_in is not None and self.prompt_tokens is None:
            self.prompt_tokens = n_in
        if n_out is not None:
            self.completion_tokens = (self.completion_tokens or 0) + n_out
        text = codec.text_output(response)
        if self.stop is None:
            if text:
                self._emit(text)
            return
        piece, hit = self.stop.feed(text)
        if piece:
            self._emit(piece)
        if hit:
            self.cancel()  # the rest is not wanted
            self._finish("stop")

    def _emit(self, text: str) -> None:
        if not self.req.stream:
            self.parts.append(text)
            return
        self._event(self._chunk({"content": text} if self.chat else text, None))
        self.conn.answered()

    def _event(self, doc) -> None:
        self.slot.add(sse_event(doc))

    def _chunk(self, piece, finish_reason) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": piece, "logprobs": None,
                      "finish_reason": finish_reason}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish_reason}
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.req.model,
                "choices": [choice]}

    def _usage(self) -> dict | None:
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None  # the model does not count
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}

    def _finish(self, reason: str | None) -> None:
        if self.stop is not None:
            rest = self.stop.flush()
            if rest:
                self._emit(rest)
        if reason is None:
            reason = "length" if self.limit is not None and self.completion_tokens is not None \
                and self.completion_tokens >= self.limit else "stop"
        usage = self._usage()
        if self.req.stream:
            self._event(self._chunk({} if self.chat else "", reason))
            if self.req.include_usage and usage is not None:
                last = self._chunk({}, None)
                last["choices"] = []
                last["usage"] = usage
                self._event(last)
            self.slot.add(DONE)
            self.slot.finish()
        else:
            text = "".join(self.parts)
            if self.chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text},
                          "logprobs": None, "finish_reason": reason}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            doc = {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                   "created": self.created, "model": self.req.model, "choices": [choice]}
            if usage is not None:
                doc["usage"] = usage
            self.slot.data = self.conn.build(200, JSON_HEADERS, orjson.dumps(doc),
                                             self.keep_alive, self.http10)
        self._close()

    def _fail(self, error) -> None:
        self.cancel()  # an error that is not the model's last word ends it too
        err = from_exception(error)
        if self.req.stream:  # the events began: the error is the last one
            self._event(err.doc())
            self.slot.finish()
        else:
            self.slot.data = self.conn.build(err.status, JSON_HEADERS, err.body(),
                                             self.keep_alive, self.http10)
        self._close()

    def _close(self) -> None:
        self.done = True
        self.conn.generations.discard(self)
        self.conn.answered()


# ------------------------------------------------------------------ embeddings

def embeddings(conn, method, headers, body, keep_alive):
    frontend = conn.frontend
    try:
        req = schema.parse_embedding(schema.parse_body(body))
        io = frontend.model_io(req.model)
        requests = [codec.embedding_request(io, text, req.dimensions)
                    for text in req.inputs]
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    conn.call(_embed, (conn.server, req, requests), keep_alive, orjson.dumps)


async def _embed(server, req, requests: list) -> dict:
    """Every input's request at once; the answer once all are back."""
    loop = asyncio.get_running_loop()
    futures, streams = [], []

    def collector(fut, got):
        def on_response(response, error, final):
            if fut.done():
                return
            if error is not None:
                fut.set_exception(error)
                return
            if response is not None and response.outputs:
                got.append(response)
            if final:
                fut.set_result(got)
        return on_response

    try:
        for request in requests:
            fut = loop.create_future()
            streams.append(server.submit_stream(request, collector(fut, [])))
            futures.append(fut)
        answers = await asyncio.gather(*futures)
    except BaseException:
        for stream in streams:
            server.cancel_stream(stream)
        raise
    data, prompt_tokens = [], 0
    for i, got in enumerate(answers):
        if not got:
            raise from_exception(RuntimeError(f"model '{req.model}' sent no response"))
        vector = codec.embedding_values(got[0], req.model)
        data.append({"object": "embedding", "index": i,
                     "embedding": codec.encode_embedding(vector, req.encoding_format)})
        counted, _ = codec.token_counts(got[0])
        prompt_tokens = None if counted is None or prompt_tokens is None \
            else prompt_tokens + counted
    doc = {"object": "list", "data": data, "model": req.model}
    if prompt_tokens is not None:
        doc["usage"] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return doc


_ROUTES = {
    "/v1/models": Route(list_models, GET),
    "/v1/completions": Route(completions, POST),
    "/v1/chat/completions": Route(chat_completions, POST),
    "/v1/embeddings": Route(embeddings, POST),
}
