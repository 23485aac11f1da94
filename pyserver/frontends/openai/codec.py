"""OpenAI requests into Triton requests and Triton responses into OpenAI's
documents, following the conventions of Triton's OpenAI frontend.

A generative model takes its prompt as ``text_input`` (BYTES) and answers
``text_output`` (BYTES), one response per piece of text when it streams
(a decoupled model). It may take more, and is sent only the inputs its
config declares, each shaped and typed as declared:

* ``stream`` (BOOL): whether the client streams;
* vLLM's convention (``backend: "vllm"`` or a ``sampling_parameters``
  input): ``sampling_parameters``, a JSON string with ``max_tokens``,
  ``stop`` and every sampling parameter the client gave;
  ``exclude_input_in_output`` (the negation of ``echo``);
* TensorRT-LLM's / Python models' convention: one input per parameter,
  ``max_tokens``, ``stop_words``, ``temperature``, ``top_p``, ``seed``,
  ``frequency_penalty``, ``presence_penalty`` and any other sampling
  parameter named like an input;
* ``return_num_input_tokens`` / ``return_num_output_tokens`` (BOOL, true):
  the model then answers ``num_input_tokens`` / ``num_output_tokens``,
  which are the ``usage`` counts (a streaming model counts each response's
  own tokens; they are summed).

What a model cannot do itself the frontend does: ``echo`` prepends the
prompt, and ``stop`` sequences cut the text (StopFilter) and cancel the
request. ``max_tokens`` reaches only a model that takes it (there is no
tokenizer here to count with); ``usage`` is left out when the model does
not count.

An embedding model takes ``embedding_request`` (vLLM: a JSON string, the
vector back as JSON in ``text_output``) or ``text_input``, answering a
floating-point output (the one named ``embedding`` or ``embeddings``, else
the first) or the JSON list in ``text_output``.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from pyserver.frontends.openai.errors import OpenAIError, invalid
from pyserver.kernel import dtypes
from pyserver.kernel.types import InferRequest, InferTensor

__all__ = ["ModelIO", "StopFilter", "embedding_request", "embedding_values", "encode_embedding",
           "generate_request", "text_output", "token_counts"]

_FLOATS = ("FP16", "FP32", "FP64", "BF16")


class ModelIO:
    """What a model's config says about how to talk to it."""

    __slots__ = ("name", "inputs", "outputs", "batching", "vllm")

    def __init__(self, name: str, config: dict):
        self.name = name
        self.inputs = {t["name"]: t for t in config.get("input", [])}
        self.outputs = {t["name"]: t for t in config.get("output", [])}
        self.batching = int(config.get("max_batch_size", 0) or 0) > 0
        self.vllm = config.get("backend") == "vllm" or "sampling_parameters" in self.inputs

    def wire(self, name: str) -> str:
        return dtypes.config_to_wire(self.inputs[name].get("data_type", "TYPE_STRING"))

    def tensor(self, name: str, values: list, param: str | None = None) -> InferTensor:
        """Input ``name`` holding ``values``, shaped as the config declares
        it (its batch dimension 1) and of its datatype."""
        wire = self.wire(name)
        shape = _shape(self.inputs[name], len(values), self.batching)
        if shape is None:
            raise invalid(f"model '{self.name}': input '{name}' cannot hold {len(values)} "
                          "values", param)
        if wire == "BYTES":
            data = np.empty(len(values), dtype=object)
            data[:] = [v if isinstance(v, bytes) else str(v).encode() for v in values]
        else:
            npdt = dtypes.WIRE_TO_NUMPY.get(wire)
            if npdt is None:
                raise OpenAIError(500, f"model '{self.name}': input '{name}' has datatype "
                                       f"{wire}, which a request cannot fill")
            try:
                if wire == "BOOL":
                    data = np.array([bool(v) for v in values], dtype=np.bool_)
                elif np.issubdtype(npdt, np.integer):
                    info = np.iinfo(npdt)
                    ints = [int(v) for v in values]
                    if any(v < info.min or v > info.max for v in ints):
                        raise ValueError("out of range")
                    data = np.array(ints, dtype=npdt)
                else:
                    data = np.array([float(v) for v in values], dtype=npdt)
            except (TypeError, ValueError):
                raise invalid(f"Invalid '{param or name}': model '{self.name}' takes it as "
                              f"{wire}, which cannot hold {values[0]!r}.", param,
                              "invalid_value") from None
        return InferTensor(name, wire, shape, data.reshape(shape))


def _shape(spec: dict, count: int, batching: bool) -> list | None:
    """The shape ``count`` values take in an input declared with ``dims``:
    the innermost variable dimension takes them, the others are 1."""
    dims = [int(d) for d in spec.get("dims", [])] or [-1]
    fixed = 1
    for d in dims:
        if d != -1:
            fixed *= d
    if fixed == 0 or count % fixed:
        return None
    left = count // fixed
    shape = list(dims)
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i], left = left, 1
    if left != 1:
        return None
    return ([1] if batching else []) + shape


def generate_request(io: ModelIO, prompt: str, req, default_max_tokens: int,
                     request_id: str = "") -> InferRequest:
    """The InferRequest of a completions or chat request (schema.GenerationRequest)."""
    if "text_input" not in io.inputs or (io.outputs and "text_output" not in io.outputs):
        raise invalid(f"Model '{io.name}' does not generate text: it needs a 'text_input' "
                      "input and a 'text_output' output.", "model", "model_not_supported")
    inputs = [io.tensor("text_input", [prompt])]
    max_tokens = req.max_tokens if req.max_tokens is not None else default_max_tokens
    present = io.inputs
    if "stream" in present:
        inputs.append(io.tensor("stream", [req.stream], "stream"))
    if io.vllm:
        if "sampling_parameters" in present:
            params = dict(req.sampling)
            params["max_tokens"] = max_tokens
            if req.stop:
                params["stop"] = list(req.stop)
            inputs.append(io.tensor("sampling_parameters", [json.dumps(params)]))
        for name in ("exclude_input_in_output", "sampling_param_exclude_input_from_output"):
            if name in present:
                inputs.append(io.tensor(name, [not req.echo], "echo"))
                break
    else:
        if "max_tokens" in present:
            inputs.append(io.tensor("max_tokens", [max_tokens], "max_tokens"))
        if req.stop and "stop_words" in present:
            inputs.append(io.tensor("stop_words", list(req.stop), "stop"))
        for name, value in req.sampling.items():  # each as the input of its name
            if name in present:
                inputs.append(io.tensor(name, [value], name))
        if req.echo and "exclude_input_in_output" in present:
            inputs.append(io.tensor("exclude_input_in_output", [False], "echo"))
    for name in ("return_num_input_tokens", "return_num_output_tokens"):
        if name in present:
            inputs.append(io.tensor(name, [True]))
    return InferRequest(io.name, "", request_id, inputs)


def model_echoes(io: ModelIO) -> bool:
    """Whether the model itself puts the prompt in front when asked (echo)."""
    return "exclude_input_in_output" in io.inputs or \
        "sampling_param_exclude_input_from_output" in io.inputs


def model_stops(io: ModelIO) -> bool:
    """Whether the model itself ends at stop sequences."""
    return "sampling_parameters" in io.inputs if io.vllm else "stop_words" in io.inputs


# ------------------------------------------------------------------ responses

def _output(response, name: str):
    for t in response.outputs or ():
        if t.name == name:
            return t
    return None


def text_output(response) -> str:
    """The text a response carries (its ``text_output``, all elements)."""
    t = _output(response, "text_output") if response is not None else None
    if t is None or t.data is None:
        return ""
    parts = []
    for v in np.asarray(t.data).reshape(-1):
        if isinstance(v, (bytes, bytearray, memoryview)):
            parts.append(bytes(v).decode("utf-8", "replace"))
        else:
            parts.append(str(v))
    return "".join(parts)


def token_counts(response) -> tuple[int | None, int | None]:
    """(num_input_tokens, num_output_tokens) as the response reports them."""
    if response is None:
        return None, None
    return _count(_output(response, "num_input_tokens")), \
        _count(_output(response, "num_output_tokens"))


def _count(t) -> int | None:
    if t is None or t.data is None:
        return None
    flat = np.asarray(t.data).reshape(-1)
    if not flat.size or t.datatype == "BYTES":
        return None
    return int(flat[0])


class StopFilter:
    """Cuts generated text at the first stop sequence, across the pieces
    it arrives in: ``feed`` returns what can be sent now (the tail that may
    begin a stop sequence is held back) and whether a stop was met;
    ``flush`` what is held at the end."""

    __slots__ = ("stops", "held", "longest")

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.held = ""
        self.longest = max((len(s) for s in self.stops), default=0)

    def feed(self, text: str) -> tuple[str, bool]:
        if not self.stops:
            return text, False
        buf = self.held + text
        cut = -1
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (cut < 0 or i < cut):
                cut = i
        if cut >= 0:
            self.held = ""
            return buf[:cut], True
        keep = 0  # the longest tail that is the start of a stop sequence
        for n in range(min(len(buf), self.longest - 1), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                keep = n
                break
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


# ------------------------------------------------------------------ embeddings

def embedding_request(io: ModelIO, text: str, dimensions: int | None,
                      request_id: str = "") -> InferRequest:
    if "embedding_request" in io.inputs:  # vLLM's pooling models
        doc = {"input": text, "pooling_params": {}}
        if dimensions is not None:
            doc["pooling_params"]["dimensions"] = dimensions
        inputs = [io.tensor("embedding_request", [json.dumps(doc)])]
    elif "text_input" in io.inputs:
        inputs = [io.tensor("text_input", [text])]
        if dimensions is not None:
            if "dimensions" not in io.inputs:
                raise invalid(f"Model '{io.name}' does not take 'dimensions'.", "dimensions",
                              "unsupported_parameter")
            inputs.append(io.tensor("dimensions", [dimensions], "dimensions"))
    else:
        raise invalid(f"Model '{io.name}' does not embed text: it has neither an "
                      "'embedding_request' nor a 'text_input' input.", "model",
                      "model_not_supported")
    for name in ("return_num_input_tokens", "return_num_output_tokens"):
        if name in io.inputs:
            inputs.append(io.tensor(name, [True]))
    return InferRequest(io.name, "", request_id, inputs)


def embedding_values(response, model: str) -> np.ndarray:
    """The vector a response carries, as float32."""
    outputs = [t for t in (response.outputs or ()) if t.datatype in _FLOATS]
    chosen = next((t for t in outputs if t.name in ("embedding", "embeddings")),
                  outputs[0] if outputs else None)
    if chosen is not None:
        return np.asarray(chosen.data, dtype=np.float32).reshape(-1)
    text = text_output(response)
    try:
        values = json.loads(text) if text else None
        if isinstance(values, list) and len(values) == 1 and isinstance(values[0], list):
            values = values[0]
        vector = np.asarray(values, dtype=np.float32)
    except (ValueError, TypeError):
        vector = None
    if vector is None or vector.ndim != 1 or not vector.size:
        raise OpenAIError(500, f"model '{model}' answered no embedding (a floating-point "
                               "output, or a JSON list in 'text_output')", type="server_error")
    return vector


def encode_embedding(vector: np.ndarray, encoding_format: str):
    if encoding_format == "base64":  # little-endian float32, as OpenAI sends them
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()
