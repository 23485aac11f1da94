"""The bodies of OpenAI's requests, read and checked: ``parse_completion``,
``parse_chat`` and ``parse_embedding`` take the decoded JSON and return
what the codec needs, or raise an OpenAIError (400) that names the field,
as OpenAI's API words it (missing, wrong type, out of range, unknown).

Fields of OpenAI's API that change nothing here (``user``, ``store``, ...)
are accepted; those asking for what this server cannot give (``n`` > 1,
``logit_bias``, ``logprobs``, tools, JSON modes, ``suffix``) are refused,
never silently dropped. vLLM's sampling extensions (``top_k``,
``min_tokens``, ``ignore_eos``, ...) are accepted as sampling parameters."""

from __future__ import annotations

import orjson

from pyserver.frontends.openai.errors import OpenAIError, invalid

__all__ = ["EmbeddingRequest", "GenerationRequest", "parse_body", "parse_chat",
           "parse_completion", "parse_embedding"]

_INT64 = (-(1 << 63), (1 << 63) - 1)

# sampling parameter -> (kind, lowest, highest); both endpoints take them
SAMPLING = {
    "temperature": ("number", 0.0, 2.0),
    "top_p": ("number", 0.0, 1.0),
    "frequency_penalty": ("number", -2.0, 2.0),
    "presence_penalty": ("number", -2.0, 2.0),
    "seed": ("integer", *_INT64),
    # vLLM's extensions, as its OpenAI server takes them
    "top_k": ("integer", -1, None),
    "min_p": ("number", 0.0, 1.0),
    "min_tokens": ("integer", 0, None),
    "ignore_eos": ("boolean", None, None),
    "repetition_penalty": ("number", 0.0, None),
    "length_penalty": ("number", None, None),
}
# accepted, and change nothing here
_IGNORED = {"user", "store", "metadata", "service_tier", "parallel_tool_calls"}
_COMMON = {"model", "stream", "stream_options", "max_tokens", "n", "stop", "logit_bias",
           "logprobs"} | set(SAMPLING) | _IGNORED
_COMPLETION = _COMMON | {"prompt", "echo", "suffix", "best_of"}
_CHAT = _COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                   "functions", "function_call", "response_format"}
_EMBEDDING = {"model", "input", "encoding_format", "dimensions", "user"}
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class GenerationRequest:
    """A completions or chat completions request, as the codec takes it."""

    __slots__ = ("kind", "model", "prompt", "messages", "stream", "include_usage",
                 "max_tokens", "echo", "stop", "sampling")

    def __init__(self, kind: str, model: str):
        self.kind = kind  # "completion" or "chat"
        self.model = model
        self.prompt: str | None = None  # completions
        self.messages: list | None = None  # chat: [{"role", "content", ...}]
        self.stream = False
        self.include_usage = False  # stream_options.include_usage
        self.max_tokens: int | None = None  # None: the frontend's default
        self.echo = False
        self.stop: list[str] = []
        self.sampling: dict = {}  # the sampling parameters given, by name


class EmbeddingRequest:
    __slots__ = ("model", "inputs", "encoding_format", "dimensions")

    def __init__(self, model: str, inputs: list, encoding_format: str, dimensions):
        self.model = model
        self.inputs = inputs  # the texts, one embedding each
        self.encoding_format = encoding_format  # "float" or "base64"
        self.dimensions = dimensions  # int or None


def parse_body(body: bytes) -> dict:
    """The request's JSON object."""
    if not body:
        raise invalid("We could not parse the JSON body of your request: the body is empty. "
                      "Send a JSON object.")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise invalid(f"We could not parse the JSON body of your request: {e}") from None
    if type(doc) is not dict:
        raise invalid("The body of your request must be a JSON object, but got "
                      f"{_kind_of(doc)}.", code="invalid_type")
    return doc


# ------------------------------------------------------------------ checks

def _kind_of(value) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "a boolean"
    if type(value) is int:
        return "an integer"
    if type(value) is float:
        return "a decimal"
    if type(value) is str:
        return "a string"
    if type(value) is list:
        return "an array"
    return "an object"


def _wrong_type(name: str, expected: str, value) -> OpenAIError:
    return invalid(f"Invalid type for '{name}': expected {expected}, but got "
                   f"{_kind_of(value)} instead.", name, "invalid_type")


def _missing(name: str) -> OpenAIError:
    return invalid(f"Missing required parameter: '{name}'.", name, "missing_required_parameter")


def _unsupported(name: str, message: str) -> OpenAIError:
    return invalid(message, name, "unsupported_parameter")


def _check_known(doc: dict, known: set) -> None:
    for name in doc:
        if name not in known:
            raise invalid(f"Unrecognized request argument supplied: {name}", name,
                          "unknown_parameter")


def _string(doc: dict, name: str, required: bool = False, label: str | None = None):
    value = doc.get(name)
    label = label or name
    if value is None:
        if required:
            raise _missing(label)
        return None
    if type(value) is not str:
        raise _wrong_type(label, "a string", value)
    return value


def _boolean(doc: dict, name: str, default: bool = False, label: str | None = None) -> bool:
    value = doc.get(name)
    if value is None:
        return default
    if type(value) is not bool:
        raise _wrong_type(label or name, "a boolean", value)
    return value


def _integer(doc: dict, name: str, lo=None, hi=None, label: str | None = None):
    value = doc.get(name)
    label = label or name
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise _wrong_type(label, "an integer", value)
    _bounded(label, value, lo, hi, "integer")
    return value


def _number(doc: dict, name: str, lo=None, hi=None, label: str | None = None):
    value = doc.get(name)
    label = label or name
    if value is None:
        return None
    if type(value) not in (int, float):
        raise _wrong_type(label, "a decimal", value)
    _bounded(label, value, lo, hi, "decimal")
    return value


def _bounded(name: str, value, lo, hi, kind: str) -> None:
    if lo is not None and value < lo:
        raise invalid(f"Invalid '{name}': {kind} below minimum value. Expected a value >= "
                      f"{lo:g}, but got {value:g} instead.", name, f"{kind}_below_min_value")
    if hi is not None and value > hi:
        raise invalid(f"Invalid '{name}': {kind} above maximum value. Expected a value <= "
                      f"{hi:g}, but got {value:g} instead.", name, f"{kind}_above_max_value")


def _object(doc: dict, name: str):
    value = doc.get(name)
    if value is None:
        return None
    if type(value) is not dict:
        raise _wrong_type(name, "an object", value)
    return value


# ------------------------------------------------------------------ requests

def _generation(doc: dict, kind: str, known: set) -> GenerationRequest:
    _check_known(doc, known)
    req = GenerationRequest(kind, _string(doc, "model", required=True))
    req.stream = _boolean(doc, "stream")
    options = _object(doc, "stream_options")
    if options is not None:
        if not req.stream:
            raise invalid("The 'stream_options' parameter is only allowed when 'stream' is "
                          "enabled.", "stream_options", "invalid_value")
        _check_known(options, {"include_usage", "continuous_usage_stats"})
        req.include_usage = _boolean(options, "include_usage",
                                     label="stream_options.include_usage")
    req.max_tokens = _integer(doc, "max_tokens", 0)
    n = _integer(doc, "n", 1, 128)
    if n is not None and n > 1:
        raise _unsupported("n", f"Received n={n}, but only one choice (n=1) is supported.")
    req.stop = _stop(doc.get("stop"))
    bias = _object(doc, "logit_bias")
    if bias:
        raise _unsupported("logit_bias", "'logit_bias' is not supported.")
    for name, (what, lo, hi) in SAMPLING.items():
        if what == "number":
            value = _number(doc, name, lo, hi)
        elif what == "integer":
            value = _integer(doc, name, lo, hi)
        else:
            value = doc.get(name)
            if value is not None:
                value = _boolean(doc, name)
        if value is not None:
            req.sampling[name] = value
    for name in _IGNORED & doc.keys():
        if name == "user":
            _string(doc, name)
    return req


def _stop(value) -> list[str]:
    if value is None:
        return []
    if type(value) is str:
        return [value] if value else []
    if type(value) is not list:
        raise _wrong_type("stop", "a string or an array of strings", value)
    for i, item in enumerate(value):
        if type(item) is not str:
            raise _wrong_type(f"stop[{i}]", "a string", item)
    return [s for s in value if s]


def parse_completion(doc: dict) -> GenerationRequest:
    req = _generation(doc, "completion", _COMPLETION)
    prompt = doc.get("prompt")
    if prompt is None:
        raise _missing("prompt")
    if type(prompt) is list and len(prompt) == 1 and type(prompt[0]) is str:
        prompt = prompt[0]  # one prompt given as an array of one
    if type(prompt) is list:
        if prompt and all(type(p) is str for p in prompt):
            raise _unsupported("prompt", "Only one prompt per request is supported; send "
                                         "each prompt in its own request.")
        raise _unsupported("prompt", "The prompt must be text: token arrays are not "
                                     "supported.")
    if type(prompt) is not str:
        raise _wrong_type("prompt", "a string", prompt)
    if not prompt:
        raise invalid("Invalid 'prompt': the prompt must not be empty.", "prompt",
                      "invalid_value")
    req.prompt = prompt
    req.echo = _boolean(doc, "echo")
    if _string(doc, "suffix"):
        raise _unsupported("suffix", "'suffix' is not supported.")
    best_of = _integer(doc, "best_of", 0, 20)
    if best_of is not None and best_of > 1:
        raise _unsupported("best_of", f"Received best_of={best_of}, but only best_of=1 is "
                                      "supported.")
    logprobs = _integer(doc, "logprobs", 0, 5)
    if logprobs:
        raise _unsupported("logprobs", "'logprobs' is not supported by this server.")
    return req


def parse_chat(doc: dict) -> GenerationRequest:
    req = _generation(doc, "chat", _CHAT)
    if "messages" not in doc or doc["messages"] is None:
        raise _missing("messages")
    messages = doc["messages"]
    if type(messages) is not list:
        raise _wrong_type("messages", "an array", messages)
    if not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length "
                      "1, but got an empty array instead.", "messages", "empty_array")
    req.messages = [_message(i, m) for i, m in enumerate(messages)]
    tokens = _integer(doc, "max_completion_tokens", 0)
    if tokens is not None:  # the newer name wins over max_tokens
        req.max_tokens = tokens
    if _boolean(doc, "logprobs"):
        raise _unsupported("logprobs", "'logprobs' is not supported by this server.")
    if _integer(doc, "top_logprobs", 0, 20) is not None:
        raise _unsupported("top_logprobs", "'top_logprobs' requires 'logprobs', which is not "
                                           "supported by this server.")
    tools = doc.get("tools")
    if tools is not None and type(tools) is not list:
        raise _wrong_type("tools", "an array", tools)
    if tools or doc.get("functions"):
        name = "tools" if tools else "functions"
        raise _unsupported(name, f"'{name}' (function calling) is not supported by this "
                                 "server.")
    for name in ("tool_choice", "function_call"):
        choice = doc.get(name)
        if choice is not None and choice != "none":
            raise _unsupported(name, f"'{name}' (function calling) is not supported by this "
                                     "server.")
    fmt = _object(doc, "response_format")
    if fmt is not None:
        kind = _string(fmt, "type", required=True, label="response_format.type")
        if kind != "text":
            raise _unsupported("response_format", f"response_format of type '{kind}' is not "
                                                  "supported; only 'text' is.")
    return req


def _message(i: int, message) -> dict:
    where = f"messages[{i}]"
    if type(message) is not dict:
        raise _wrong_type(where, "an object", message)
    role = _string(message, "role", required=True, label=f"{where}.role")
    if role not in _ROLES:
        raise invalid(f"Invalid value: '{role}'. Supported values are: "
                      f"{', '.join(repr(r) for r in _ROLES)}.", f"{where}.role",
                      "invalid_value")
    out = dict(message)
    content = message.get("content")
    if content is None:
        if role != "assistant":  # an assistant's turn may be tool calls alone
            raise _missing(f"{where}.content")
    elif type(content) is list:
        out["content"] = _text_parts(where, content)
    elif type(content) is not str:
        raise _wrong_type(f"{where}.content", "a string or an array of content parts", content)
    name = message.get("name")
    if name is not None and type(name) is not str:
        raise _wrong_type(f"{where}.name", "a string", name)
    return out


def _text_parts(where: str, parts: list) -> str:
    """A content array as the text it carries (only text parts are taken)."""
    texts = []
    for j, part in enumerate(parts):
        label = f"{where}.content[{j}]"
        if type(part) is not dict:
            raise _wrong_type(label, "an object", part)
        kind = _string(part, "type", required=True, label=f"{label}.type")
        if kind != "text":
            raise _unsupported(f"{label}.type", f"Only text content is supported, but got a "
                                                f"'{kind}' part.")
        texts.append(_string(part, "text", required=True, label=f"{label}.text"))
    return "".join(texts)


def parse_embedding(doc: dict) -> EmbeddingRequest:
    _check_known(doc, _EMBEDDING)
    model = _string(doc, "model", required=True)
    if "input" not in doc or doc["input"] is None:
        raise _missing("input")
    value = doc["input"]
    inputs = [value] if type(value) is str else value
    if type(inputs) is not list:
        raise _wrong_type("input", "a string or an array of strings", value)
    if not inputs:
        raise invalid("Invalid 'input': empty array. Expected an array with minimum length 1, "
                      "but got an empty array instead.", "input", "empty_array")
    for i, item in enumerate(inputs):
        if type(item) is not str:
            if type(item) in (int, list):
                raise _unsupported("input", "The input must be text: token arrays are not "
                                            "supported.")
            raise _wrong_type(f"input[{i}]", "a string", item)
        if not item:
            raise invalid(f"Invalid 'input[{i}]': the input must not be empty.", "input",
                          "invalid_value")
    fmt = _string(doc, "encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise invalid(f"Invalid value for 'encoding_format': expected 'float' or 'base64', but "
                      f"got '{fmt}'.", "encoding_format", "invalid_value")
    _string(doc, "user")
    return EmbeddingRequest(model, inputs, fmt, _integer(doc, "dimensions", 1))
