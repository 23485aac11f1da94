"""OpenAI's API on its own port, driven by the official ``openai`` client
(and raw HTTP where the wire itself is the point) against small decoupled
Python models that generate text the way Triton's OpenAI frontend expects
(tests/models/openai): models, completions and chat (one answer and
server-sent events), the usage counts, chat templates from the model
folder, stop sequences, embeddings, concurrent clients, a client that goes
away mid-stream (its model request is cancelled) and OpenAI's error
object for every bad request."""

import http.client
import importlib.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pyserver.frontends.openai import OpenAIFrontend
from tests.integration.conftest import RunningServer, use_execution_mode
from tests.ports import free_port, free_ports

openai = pytest.importorskip("openai")

MODELS = Path(__file__).resolve().parents[1] / "models" / "openai"
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m.role }}> {{ m.content }} {% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


class OpenAIServer:
    """A Server with its HTTP endpoint and the OpenAI frontend, in process."""

    def __init__(self, repo, **frontend_kwargs):
        self.repo = Path(repo)
        self.running = RunningServer(repo)
        self.frontend = OpenAIFrontend(self.running.server, "127.0.0.1", 0, **frontend_kwargs)
        try:
            self.running.call(self.frontend.start())
        except BaseException:
            self.running.close()
            raise
        self.port = self.frontend.port
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def client(self, **kwargs):
        return openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=0,
                             timeout=60, **kwargs)

    def async_client(self):
        return openai.AsyncOpenAI(base_url=self.base_url, api_key="unused", max_retries=0,
                                  timeout=60)

    def post(self, path, doc, conn=None):
        """(status, parsed body) of a raw POST."""
        return self.request("POST", path, doc, conn)

    def request(self, method, path, doc=None, conn=None):
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        body = doc if isinstance(doc, bytes) or doc is None else json.dumps(doc)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if own:
            conn.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data

    def seen(self, model):
        return json.loads((self.repo / model / "last_request.json").read_text())

    def close(self):
        try:
            self.running.call(self.frontend.stop())
        finally:
            self.running.close()


def write_repo(root: Path, mode: str = "process") -> Path:
    for name in ("tiny_llm", "vllm_like", "tiny_embed"):
        shutil.copytree(MODELS / name, root / name)
    # tiny_llm again, with a chat template of its own
    templated = root / "templated_llm"
    shutil.copytree(MODELS / "tiny_llm", templated)
    config = templated / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "tiny_llm"', 'name: "templated_llm"'))
    (templated / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": CHAT_TEMPLATE, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    use_execution_mode(root, mode)
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = OpenAIServer(write_repo(tmp_path_factory.mktemp("openai")))
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(served):
    return served.client()


def error_of(status_and_body):
    status, body = status_and_body
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return status, body["error"]


# ------------------------------------------------------------------ models

def test_models_are_listed_and_retrieved(client):
    models = list(client.models.list())
    assert [m.id for m in models] == ["templated_llm", "tiny_embed", "tiny_llm", "vllm_like"]
    assert all(m.object == "model" and m.owned_by == "Triton Inference Server"
               and isinstance(m.created, int) and m.created > 0 for m in models)
    one = client.models.retrieve("tiny_llm")
    assert one.id == "tiny_llm"
    assert one.created == next(m.created for m in models if m.id == "tiny_llm")  # stable
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no_such_model")
    assert e.value.code == "model_not_found"


# ------------------------------------------------------------------ completions

def test_completion_answers_text_usage_and_finish_reason(served, client):
    r = client.completions.create(model="tiny_llm", prompt="a b c", max_tokens=5,
                                  temperature=0.25, seed=7)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.model == "tiny_llm" and isinstance(r.created, int)
    assert len(r.choices) == 1
    assert r.choices[0].text == " a b c a b"
    assert r.choices[0].index == 0
    assert r.choices[0].finish_reason == "length"  # it made max_tokens tokens
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 5, 8)
    seen = served.seen("tiny_llm")
    assert seen["text_input"] == "a b c" and seen["stream"] is False
    assert seen["max_tokens"] == 5 and seen["temperature"] == 0.25 and seen["seed"] == 7


def test_completion_without_max_tokens_asks_for_the_default(served, client):
    r = client.completions.create(model="tiny_llm", prompt="x")
    assert r.choices[0].text == " x" * 16
    assert served.seen("tiny_llm")["max_tokens"] == 16


def test_streamed_completion_matches_the_plain_one(client):
    whole = client.completions.create(model="tiny_llm", prompt="one two three", max_tokens=7)
    chunks = list(client.completions.create(model="tiny_llm", prompt="one two three",
                                            max_tokens=7, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len([t for t in texts if t]) == 7  # one event per token the model sent
    assert "".join(texts) == whole.choices[0].text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "length" and reasons.count(None) == len(reasons) - 1
    assert all(c.object == "text_completion" and c.id == chunks[0].id for c in chunks)
    # the usage chunk comes last, with no choices
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 3 + 7
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_ends_with_done_on_the_wire(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"model": "tiny_llm", "prompt": "p q", "max_tokens": 2, "stream": True}))
    r = conn.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type").startswith("text/event-stream")
    events = r.read().decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events[:-1])
    # the connection is kept for the next request
    status, body = served.request("GET", "/v1/models", conn=conn)
    assert status == 200 and body["object"] == "list"
    conn.close()


def test_echo_puts_the_prompt_first(served, client):
    r = client.completions.create(model="tiny_llm", prompt="e f", max_tokens=2, echo=True)
    assert r.choices[0].text == "e f e f"  # the frontend's echo: the model cannot
    chunks = client.completions.create(model="tiny_llm", prompt="e f", max_tokens=2,
                                       echo=True, stream=True)
    assert "".join(c.choices[0].text for c in chunks) == "e f e f"
    r = client.completions.create(model="vllm_like", prompt="e f", max_tokens=2, echo=True)
    assert r.choices[0].text == "e f e f"  # the model's own (exclude_input_in_output)
    assert served.seen("vllm_like")["exclude_input_in_output"] is False


def test_stop_sequences_cut_the_text(client):
    # tiny_llm takes no stop words: the frontend cuts, across tokens
    r = client.completions.create(model="tiny_llm", prompt="a b c d", max_tokens=12,
                                  stop=["c d"])
    assert r.choices[0].text == " a b "
    assert r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model="tiny_llm", prompt="a b c d",
                                            max_tokens=12, stop=["c d", "zz"], stream=True))
    assert "".join(c.choices[0].text for c in chunks) == " a b "
    assert chunks[-1].choices[0].finish_reason == "stop"
    # a stop sequence never met holds nothing back
    r = client.chat.completions.create(model="tiny_llm", max_tokens=3, stop="nowhere",
                                       messages=[{"role": "user", "content": "u"}])
    assert r.choices[0].message.content == " user: u assistant:"


def test_vllm_convention_gets_sampling_parameters_as_json(served, client):
    r = client.completions.create(model="vllm_like", prompt="a b c", max_tokens=6,
                                  temperature=0.5, top_p=0.9, seed=3, stop=["c"],
                                  frequency_penalty=0.1, extra_body={"top_k": 4,
                                                                     "ignore_eos": True})
    assert r.choices[0].text == " a b"  # the model stopped itself
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (3, 2)  # UINT32 counts
    seen = served.seen("vllm_like")
    assert seen["sampling_parameters"] == {"max_tokens": 6, "temperature": 0.5, "top_p": 0.9,
                                           "seed": 3, "stop": ["c"], "frequency_penalty": 0.1,
                                           "top_k": 4, "ignore_eos": True}
    assert seen["exclude_input_in_output"] is True
    chunks = list(client.completions.create(model="vllm_like", prompt="a b c", max_tokens=6,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == " a b c a b c"
    assert chunks[-1].usage.completion_tokens == 6  # summed over the stream


# ------------------------------------------------------------------ chat

def test_chat_completion_with_the_default_template(served, client):
    r = client.chat.completions.create(
        model="tiny_llm", max_completion_tokens=6,
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": [{"type": "text", "text": "hi"},
                                               {"type": "text", "text": " there"}]}])
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    msg = r.choices[0].message
    assert msg.role == "assistant"
    assert msg.content == " system: be brief user: hi there"
    assert served.seen("tiny_llm")["text_input"] == \
        "system: be brief\nuser: hi there\nassistant:"
    assert r.usage.prompt_tokens == 7 and r.usage.completion_tokens == 6
    assert r.choices[0].finish_reason == "length"


def test_streamed_chat_matches_the_plain_one(client):
    messages = [{"role": "user", "content": "tell me"}]
    whole = client.chat.completions.create(model="tiny_llm", messages=messages, max_tokens=5)
    chunks = list(client.chat.completions.create(model="tiny_llm", messages=messages,
                                                 max_tokens=5, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices[0].delta.content]
    assert len(content) == 5
    assert "".join(content) == whole.choices[0].message.content
    reasons = [c.choices[0].finish_reason for c in chunks]
    assert reasons[-1] == "length" and reasons.count(None) == len(reasons) - 1


def test_chat_template_comes_from_the_model_folder(served, client):
    client.chat.completions.create(model="templated_llm", max_tokens=1, messages=[
        {"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert served.seen("templated_llm")["text_input"] == "<system> S <user> U <assistant>"


def test_chat_template_that_refuses_the_messages_is_a_400(tmp_path):
    shutil.copytree(MODELS / "tiny_llm", tmp_path / "tiny_llm")
    (tmp_path / "tiny_llm" / "chat_template.jinja").write_text(
        "{% if messages[0].role != 'user' %}{{ raise_exception('users speak first') }}"
        "{% endif %}{{ bos_token }}{% for m in messages %}{{ m.content }};{% endfor %}")
    (tmp_path / "tiny_llm" / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "chat_template": "ignored: the .jinja file wins"}))
    s = OpenAIServer(tmp_path)
    try:
        client = s.client()
        client.chat.completions.create(model="tiny_llm", max_tokens=1,
                                       messages=[{"role": "user", "content": "x"}])
        assert s.seen("tiny_llm")["text_input"] == "<s>x;"
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny_llm", messages=[
                {"role": "assistant", "content": "x"}])
        assert "users speak first" in e.value.message and e.value.param == "messages"
    finally:
        s.close()


# ------------------------------------------------------------------ embeddings

def test_embeddings_as_floats_and_base64(client):
    # the client asks for base64 unless told, and decodes it
    r = client.embeddings.create(model="tiny_embed", input=["hello world", "x"])
    assert r.object == "list" and r.model == "tiny_embed"
    assert [d.index for d in r.data] == [0, 1]
    assert r.data[0].embedding == [11.0, 2.0, 104.0, 0.5]
    assert r.data[1].embedding == [1.0, 1.0, 120.0, 0.5]
    assert r.usage.prompt_tokens == 3 and r.usage.total_tokens == 3
    r = client.embeddings.create(model="tiny_embed", input="abc", encoding_format="float")
    assert r.data[0].embedding == [3.0, 1.0, 97.0, 0.5]


def test_embedding_errors(served):
    status, err = error_of(served.post("/v1/embeddings", {"model": "tiny_llm", "input": "a"}))
    # tiny_llm is decoupled but answers text, not a vector
    assert status == 500 and "no embedding" in err["message"]
    status, err = error_of(served.post("/v1/embeddings", {"model": "tiny_embed",
                                                          "input": [1, 2, 3]}))
    assert status == 400 and err["param"] == "input"
    status, err = error_of(served.post("/v1/embeddings", {"model": "tiny_embed", "input": []}))
    assert status == 400 and err["code"] == "empty_array"
    status, err = error_of(served.post("/v1/embeddings", {"model": "tiny_embed", "input": "a",
                                                          "encoding_format": "int8"}))
    assert status == 400 and err["param"] == "encoding_format"
    status, err = error_of(served.post("/v1/embeddings", {"model": "tiny_embed", "input": "a",
                                                          "dimensions": 2}))
    assert status == 400 and err["param"] == "dimensions"


# ------------------------------------------------------------------ many clients

def test_concurrent_clients_each_get_their_own_text(served):
    errors, results = [], {}

    def one(i):
        try:
            c = served.client()
            word = f"w{i}"
            if i % 2:
                chunks = c.chat.completions.create(
                    model="tiny_llm", max_tokens=4, stream=True,
                    messages=[{"role": "user", "content": word}])
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
            else:
                text = c.completions.create(model="tiny_llm", prompt=word,
                                            max_tokens=4).choices[0].text
            results[i] = (word, text)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert len(results) == 12
    for i, (word, text) in results.items():
        if i % 2:
            assert text == f" user: {word} assistant: user:"
        else:
            assert text == f" {word}" * 4


@pytest.mark.asyncio
async def test_async_client_streams(served):
    import asyncio

    c = served.async_client()

    async def stream(word):
        out = []
        async for ch in await c.chat.completions.create(
                model="tiny_llm", max_tokens=3, stream=True,
                messages=[{"role": "user", "content": word}]):
            out.append(ch.choices[0].delta.content or "")
        return "".join(out)

    texts = await asyncio.gather(*(stream(f"a{i}") for i in range(6)))
    assert texts == [f" user: a{i} assistant:" for i in range(6)]
    await c.close()


# ------------------------------------------------------------------ going away

def wait_for(path: Path, limit_s: float = 60.0) -> str:
    """The file's text once the model wrote it (a bound, not a timing)."""
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} was never written"
        time.sleep(0.02)
    return path.read_text()


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_client_leaving_mid_stream_cancels_the_model_request(tmp_path, mode):
    s = OpenAIServer(write_repo(tmp_path, mode))
    try:
        marker = tmp_path / "tiny_llm" / "cancelled.txt"
        client = s.client()
        stream = client.chat.completions.create(
            model="tiny_llm", stream=True, messages=[{"role": "user", "content": "SLOW"}])
        got = []
        for chunk in stream:
            got.append(chunk)
            if len(got) == 4:
                break
        assert not marker.exists()  # the model runs until the client leaves
        stream.close()
        assert wait_for(marker).startswith("cancelled after")
        # the same through a raw socket dropped without a word
        marker.unlink()
        sock = socket.create_connection(("127.0.0.1", s.port))
        body = json.dumps({"model": "tiny_llm", "prompt": "SLOW", "stream": True}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        # the model has begun once a token came (before, the reset could
        # find the request still queued: it leaves the queue, and the model
        # never sees it to write the marker)
        received = sock.recv(65536)
        assert received.startswith(b"HTTP/1.1 200")
        while b"data: " not in received:
            more = sock.recv(65536)
            assert more, "the server closed the stream before any token"
            received += more
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset
        assert wait_for(marker).startswith("cancelled after")
        # and the server goes on serving
        r = client.completions.create(model="tiny_llm", prompt="z", max_tokens=1)
        assert r.choices[0].text == " z"
    finally:
        s.close()


def test_model_error_mid_stream_reaches_the_client(client):
    stream = client.completions.create(model="tiny_llm", prompt="FAIL now", stream=True)
    got = []
    with pytest.raises(openai.APIError) as e:
        for chunk in stream:
            got.append(chunk.choices[0].text)
    assert got == [" FAIL"]
    assert "failed on purpose" in e.value.message


# ------------------------------------------------------------------ bad requests

@pytest.mark.parametrize("doc, param, code", [
    ({"model": "tiny_llm"}, "messages", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": "x"}]}, "model", "missing_required_parameter"),
    ({"model": "tiny_llm", "messages": []}, "messages", "empty_array"),
    ({"model": "tiny_llm", "messages": "hello"}, "messages", "invalid_type"),
    ({"model": "tiny_llm", "messages": [{"content": "x"}]}, "messages[0].role",
     "missing_required_parameter"),
    ({"model": "tiny_llm", "messages": [{"role": "wizard", "content": "x"}]},
     "messages[0].role", "invalid_value"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": 5}]},
     "messages[0].content", "invalid_type"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]},
     "messages[0].content[0].type", "unsupported_parameter"),
    ({"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model", "invalid_type"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "temperature": "hot"}, "temperature", "invalid_type"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "temperature": 2.5}, "temperature", "decimal_above_max_value"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "max_tokens": -1}, "max_tokens", "integer_below_min_value"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "stream": "yes"}, "stream", "invalid_type"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}], "n": 2},
     "n", "unsupported_parameter"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "logit_bias": {"1": 2}}, "logit_bias", "unsupported_parameter"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "logprobs": True}, "logprobs", "unsupported_parameter"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools",
     "unsupported_parameter"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
    ({"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}],
      "frobnicate": 1}, "frobnicate", "unknown_parameter"),
])
def test_bad_chat_requests_get_openai_errors(served, doc, param, code):
    status, err = error_of(served.post("/v1/chat/completions", doc))
    assert status == 400
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param and err["code"] == code
    assert err["message"]


@pytest.mark.parametrize("doc, param", [
    ({"model": "tiny_llm"}, "prompt"),
    ({"model": "tiny_llm", "prompt": ""}, "prompt"),
    ({"model": "tiny_llm", "prompt": ["a", "b"]}, "prompt"),
    ({"model": "tiny_llm", "prompt": [1, 2]}, "prompt"),
    ({"model": "tiny_llm", "prompt": "a", "suffix": "z"}, "suffix"),
    ({"model": "tiny_llm", "prompt": "a", "best_of": 3}, "best_of"),
    ({"model": "tiny_llm", "prompt": "a", "echo": 1}, "echo"),
    ({"model": "tiny_llm", "prompt": "a", "stop": [1]}, "stop[0]"),
    ({"model": "tiny_llm", "prompt": "a", "seed": -1}, "seed"),  # the model takes UINT64
    ({"model": "tiny_embed", "prompt": "a"}, "model"),  # no text_input: not a generator
])
def test_bad_completion_requests_get_openai_errors(served, doc, param):
    status, err = error_of(served.post("/v1/completions", doc))
    assert status == 400 and err["param"] == param, err


def test_unknown_models_routes_methods_and_bodies(served, client):
    status, err = error_of(served.post("/v1/completions", {"model": "ghost", "prompt": "a"}))
    assert status == 404 and err["code"] == "model_not_found" and err["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="ghost", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="ghost", prompt="a", stream=True)
    status, err = error_of(served.request("GET", "/v1/nothing/here"))
    assert status == 404 and "/v1/nothing/here" in err["message"]
    status, err = error_of(served.request("GET", "/v1/completions"))
    assert status == 405
    status, err = error_of(served.request("POST", "/v1/models"))
    assert status == 405
    status, err = error_of(served.post("/v1/completions", b"{not json"))
    assert status == 400 and "JSON" in err["message"]
    status, err = error_of(served.post("/v1/completions", b"[1, 2]"))
    assert status == 400
    status, err = error_of(served.post("/v1/completions", b""))
    assert status == 400
    # the HTTP stack's own refusals are OpenAI errors too
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Length", "99999999999")
    conn.endheaders()
    r = conn.getresponse()
    body = json.loads(r.read())
    assert r.status == 400 and set(body["error"]) == {"message", "type", "param", "code"}
    conn.close()
    # and the Triton port is untouched by any of it
    assert served.frontend.port != int(served.running.url.split(":")[1])


def test_openai_client_raises_the_error_we_send(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny_llm", messages=[])
    assert e.value.status_code == 400 and e.value.param == "messages"
    assert e.value.code == "empty_array"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny_llm", prompt="a", n=3)
    assert e.value.param == "n"


# ------------------------------------------------------------------ the command line

def run_cli(repo, *extra):
    ports = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserver", "--model-repository", str(repo),
         "--http-port", str(ports[0]), "--http-address", "127.0.0.1",
         "--grpc-port", str(ports[1]), "--grpc-address", "127.0.0.1",
         "--metrics-port", str(ports[2]), "--metrics-address", "127.0.0.1", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=5)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "server did not become ready"
        time.sleep(0.1)


def stop_cli(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def test_cli_openai_port_turns_the_api_on(tmp_path):
    shutil.copytree(MODELS / "tiny_llm", tmp_path / "tiny_llm")
    port = free_port()
    proc = run_cli(tmp_path, "--openai-port", str(port), "--openai-address", "127.0.0.1",
                   "--openai-default-max-tokens", "3")
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        assert [m.id for m in c.models.list()] == ["tiny_llm"]
        assert c.completions.create(model="tiny_llm", prompt="q").choices[0].text == " q q q"
    finally:
        out = stop_cli(proc)
    assert f"Started OpenAI-compatible API at 127.0.0.1:{port}" in out


def test_cli_openai_is_off_unless_asked_for(tmp_path):
    shutil.copytree(MODELS / "tiny_llm", tmp_path / "tiny_llm")
    port = free_port()
    proc = run_cli(tmp_path, "--allow-openai=false", "--openai-port", str(port))
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        out = stop_cli(proc)
    assert "OpenAI" not in out
    assert "OpenAI" not in stop_cli(run_cli(tmp_path))


def test_cli_chat_template_flag(tmp_path):
    shutil.copytree(MODELS / "tiny_llm", tmp_path / "tiny_llm")
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    port = free_port()
    proc = run_cli(tmp_path, "--allow-openai", "--openai-port", str(port),
                   "--openai-chat-template", str(template))
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        r = c.chat.completions.create(model="tiny_llm", max_tokens=2,
                                      messages=[{"role": "user", "content": "hey"}])
        assert r.choices[0].message.content == " [hey] [hey]"
    finally:
        stop_cli(proc)
    bad = subprocess.run([sys.executable, "-m", "pyserver", "--model-repository", str(tmp_path),
                          "--openai-port", str(port), "--openai-chat-template",
                          str(tmp_path / "missing.jinja")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "--openai-chat-template" in bad.stdout + bad.stderr


# ------------------------------------------------------------------ vLLM

VLLM_MODEL = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils
from vllm import LLM, SamplingParams

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.llm = LLM(model=json.load(open(args["model_repository"] + "/1/model.json"))["model"],
                       gpu_memory_utilization=0.3, enforce_eager=True)

    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            prompt = prompt.reshape(-1)[0].decode()
            params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            params = json.loads(params.as_numpy().reshape(-1)[0]) if params is not None else {}
            out = self.llm.generate([prompt], SamplingParams(**params))[0]
            text = out.outputs[0].text
            request.get_response_sender().send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("text_output", np.array([text.encode()], np.object_)),
                pb_utils.Tensor("num_input_tokens",
                                np.array([len(out.prompt_token_ids)], np.uint32)),
                pb_utils.Tensor("num_output_tokens",
                                np.array([len(out.outputs[0].token_ids)], np.uint32))]),
                flags=FINAL)
        return None
'''


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
@pytest.mark.skipif(not os.environ.get("PYSERVER_VLLM_MODEL"),
                    reason="PYSERVER_VLLM_MODEL (a local Hugging Face model folder) is not set")
def test_vllm_model_through_the_python_backend(tmp_path):
    """A real vLLM engine in a Python model with vLLM's conventions (GPU)."""
    folder = tmp_path / "vllm_model"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(VLLM_MODEL)
    (folder / "1" / "model.json").write_text(json.dumps(
        {"model": os.environ["PYSERVER_VLLM_MODEL"]}))
    (folder / "config.pbtxt").write_text(
        (MODELS / "vllm_like" / "config.pbtxt").read_text().replace("vllm_like", "vllm_model")
        .replace("KIND_CPU", "KIND_MODEL"))
    s = OpenAIServer(tmp_path)
    try:
        c = s.client()
        r = c.completions.create(model="vllm_model", prompt="The capital of France is",
                                 max_tokens=8, temperature=0.0)
        assert r.choices[0].text and r.usage.completion_tokens > 0
        r = c.chat.completions.create(model="vllm_model", max_tokens=8,
                                      messages=[{"role": "user", "content": "Say hi"}])
        assert r.choices[0].message.content
    finally:
        s.close()
