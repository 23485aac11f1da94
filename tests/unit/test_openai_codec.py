"""The OpenAI frontend's pure parts: the request checks (schema), the
translation into Triton requests and out of responses (codec), stop
sequences across pieces, chat templates and the error object."""

import base64
import json

import numpy as np
import pytest

from pyserver.frontends.openai import chat, codec, schema
from pyserver.frontends.openai.errors import OpenAIError, error_body, from_exception
from pyserver.frontends.openai.routes import match
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferResponse, InferTensor

LLM_CONFIG = {
    "name": "llm", "backend": "python", "max_batch_size": 0,
    "input": [
        {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1, 1]},
        {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1, 1]},
        {"name": "max_tokens", "data_type": "TYPE_INT32", "dims": [1, 1]},
        {"name": "stop_words", "data_type": "TYPE_STRING", "dims": [1, -1]},
        {"name": "temperature", "data_type": "TYPE_FP32", "dims": [1, 1]},
        {"name": "seed", "data_type": "TYPE_UINT64", "dims": [1, 1]},
        {"name": "return_num_input_tokens", "data_type": "TYPE_BOOL", "dims": [1, 1]},
    ],
    "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
}
VLLM_CONFIG = {
    "name": "v", "backend": "vllm", "max_batch_size": 0,
    "input": [
        {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
        {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1]},
        {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1]},
        {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1]},
    ],
    "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
}


def refused(fn, *args):
    with pytest.raises(OpenAIError) as e:
        fn(*args)
    return e.value


def inputs_of(request):
    return {t.name: t for t in request.inputs}


# ------------------------------------------------------------------ schema

def test_completion_fields_are_read():
    req = schema.parse_completion({"model": "m", "prompt": ["hello"], "max_tokens": 4,
                                   "temperature": 1, "stop": "x", "stream": True,
                                   "stream_options": {"include_usage": True}, "echo": True,
                                   "top_k": 3, "user": "u", "n": 1, "logprobs": 0})
    assert (req.kind, req.model, req.prompt, req.max_tokens) == ("completion", "m", "hello", 4)
    assert req.stop == ["x"] and req.stream and req.include_usage and req.echo
    assert req.sampling == {"temperature": 1, "top_k": 3}


def test_chat_fields_are_read_and_parts_joined():
    req = schema.parse_chat({"model": "m", "max_tokens": 9, "max_completion_tokens": 5,
                             "tool_choice": "none", "response_format": {"type": "text"},
                             "messages": [
                                 {"role": "user", "content": [{"type": "text", "text": "a"},
                                                              {"type": "text", "text": "b"}]},
                                 {"role": "assistant", "content": None, "tool_calls": []}]})
    assert req.max_tokens == 5  # max_completion_tokens wins
    assert req.messages[0] == {"role": "user", "content": "ab"}
    assert req.messages[1]["content"] is None


@pytest.mark.parametrize("doc, param, code", [
    ({"prompt": "a"}, "model", "missing_required_parameter"),
    ({"model": "m", "prompt": "a", "temperature": True}, "temperature", "invalid_type"),
    ({"model": "m", "prompt": "a", "top_p": -0.5}, "top_p", "decimal_below_min_value"),
    ({"model": "m", "prompt": "a", "max_tokens": 1.5}, "max_tokens", "invalid_type"),
    ({"model": "m", "prompt": "a", "seed": 1 << 64}, "seed", "integer_above_max_value"),
    ({"model": "m", "prompt": "a", "stop": 3}, "stop", "invalid_type"),
    ({"model": "m", "prompt": "a", "stream_options": {"include_usage": True}},
     "stream_options", "invalid_value"),
    ({"model": "m", "prompt": "a", "stream": True, "stream_options": {"x": 1}}, "x",
     "unknown_parameter"),
    ({"model": "m", "prompt": "a", "messages": []}, "messages", "unknown_parameter"),
])
def test_completion_refusals_name_the_field(doc, param, code):
    e = refused(schema.parse_completion, doc)
    assert (e.status, e.param, e.code, e.type) == (400, param, code, "invalid_request_error")


def test_nulls_are_as_good_as_absent():
    req = schema.parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "temperature": None, "stop": None, "stream": None, "n": None})
    assert req.sampling == {} and req.stop == [] and not req.stream


def test_body_must_be_a_json_object():
    assert refused(schema.parse_body, b"").status == 400
    assert "JSON" in refused(schema.parse_body, b"{").message
    assert refused(schema.parse_body, b'"text"').code == "invalid_type"
    assert schema.parse_body(b'{"a": 1}') == {"a": 1}


def test_embedding_fields():
    req = schema.parse_embedding({"model": "e", "input": "x", "dimensions": 3})
    assert (req.inputs, req.encoding_format, req.dimensions) == (["x"], "float", 3)
    assert refused(schema.parse_embedding, {"model": "e"}).param == "input"
    assert refused(schema.parse_embedding, {"model": "e", "input": ["a", 2]}).param == "input"
    assert refused(schema.parse_embedding, {"model": "e", "input": "a",
                                            "dimensions": 0}).param == "dimensions"


# ------------------------------------------------------------------ requests

def test_triton_convention_inputs_shaped_and_typed_as_declared():
    io = codec.ModelIO("llm", LLM_CONFIG)
    req = schema.parse_completion({"model": "llm", "prompt": "hi", "stop": ["a", "b"],
                                   "temperature": 0.5, "seed": 9, "top_p": 0.3})
    got = inputs_of(codec.generate_request(io, "hi", req, 16))
    assert set(got) == {"text_input", "stream", "max_tokens", "stop_words", "temperature",
                        "seed", "return_num_input_tokens"}  # top_p: not an input of it
    assert got["text_input"].shape == [1, 1] and got["text_input"].data[0, 0] == b"hi"
    assert got["stream"].datatype == "BOOL" and not got["stream"].data[0, 0]
    assert got["max_tokens"].datatype == "INT32" and got["max_tokens"].data[0, 0] == 16
    assert got["stop_words"].shape == [1, 2] and list(got["stop_words"].data[0]) == [b"a", b"b"]
    assert got["temperature"].data.dtype == np.float32
    assert got["seed"].data.dtype == np.uint64 and got["seed"].data[0, 0] == 9
    assert bool(got["return_num_input_tokens"].data[0, 0])
    assert codec.model_stops(io) and not codec.model_echoes(io)


def test_a_batching_model_gets_a_batch_dimension():
    config = {**LLM_CONFIG, "max_batch_size": 8}
    got = inputs_of(codec.generate_request(codec.ModelIO("llm", config), "hi",
                                           schema.parse_completion({"model": "llm",
                                                                    "prompt": "hi"}), 16))
    assert got["text_input"].shape == [1, 1, 1]


def test_value_a_model_input_cannot_hold_is_a_400():
    io = codec.ModelIO("llm", LLM_CONFIG)
    req = schema.parse_completion({"model": "llm", "prompt": "hi", "seed": -3})
    e = refused(codec.generate_request, io, "hi", req, 16)
    assert e.status == 400 and e.param == "seed"


def test_vllm_convention_sends_sampling_parameters_json():
    io = codec.ModelIO("v", VLLM_CONFIG)
    req = schema.parse_chat({"model": "v", "messages": [{"role": "user", "content": "q"}],
                             "temperature": 0.1, "stop": "END", "min_tokens": 2,
                             "stream": True})
    got = inputs_of(codec.generate_request(io, "prompt", req, 16))
    assert json.loads(got["sampling_parameters"].data[0]) == {
        "temperature": 0.1, "min_tokens": 2, "max_tokens": 16, "stop": ["END"]}
    assert bool(got["exclude_input_in_output"].data[0]) and bool(got["stream"].data[0])
    assert codec.model_stops(io) and codec.model_echoes(io)


def test_a_model_without_text_input_does_not_generate():
    io = codec.ModelIO("x", {"input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}]})
    e = refused(codec.generate_request, io, "p",
                schema.parse_completion({"model": "x", "prompt": "p"}), 16)
    assert e.status == 400 and e.code == "model_not_supported"


# ------------------------------------------------------------------ responses

def response(*tensors):
    return InferResponse("m", "1", "", list(tensors))


def test_text_and_token_counts_are_read():
    r = response(InferTensor("text_output", "BYTES", [2], np.array([b"ab", b"c"], object)),
                 InferTensor("num_input_tokens", "UINT32", [1], np.array([4], np.uint32)),
                 InferTensor("num_output_tokens", "INT32", [1], np.array([2], np.int32)))
    assert codec.text_output(r) == "abc"
    assert codec.token_counts(r) == (4, 2)
    assert codec.text_output(response()) == "" and codec.token_counts(response()) == (None, None)
    assert codec.token_counts(None) == (None, None)


@pytest.mark.parametrize("pieces, stops, sent, hit", [
    (["hello wor", "ld"], ["world"], "hello ", True),
    (["ab", "c"], ["bd"], "abc", False),  # a held 'b' that did not go on is sent later
    (["x", "y", "z"], ["q"], "xyz", False),
    (["one STO", "P two"], ["STOP", "two"], "one ", True),
    (["aaab"], ["ab", "aab"], "a", True),  # the earliest stop wins
])
def test_stop_filter_across_pieces(pieces, stops, sent, hit):
    f = codec.StopFilter(stops)
    out, met = [], False
    for p in pieces:
        text, met = f.feed(p)
        out.append(text)
        if met:
            break
    if not met:
        out.append(f.flush())
    assert "".join(out) == sent and met == hit


def test_stop_filter_holds_back_only_a_possible_start():
    f = codec.StopFilter(["</s>"])
    assert f.feed("abc<") == ("abc", False)
    assert f.feed("/") == ("", False)
    assert f.feed("x") == ("</x", False)


def test_embeddings_from_a_float_output_or_json_text():
    r = response(InferTensor("other", "FP16", [1], np.array([9], np.float16)),
                 InferTensor("embedding", "FP32", [1, 3], np.array([[1, 2, 3]], np.float32)))
    assert codec.embedding_values(r, "m").tolist() == [1.0, 2.0, 3.0]
    r = response(InferTensor("text_output", "BYTES", [1], np.array([b"[[0.5, 1.5]]"], object)))
    vector = codec.embedding_values(r, "m")
    assert vector.tolist() == [0.5, 1.5]
    raw = base64.b64decode(codec.encode_embedding(vector, "base64"))
    assert np.frombuffer(raw, "<f4").tolist() == [0.5, 1.5]
    assert codec.encode_embedding(vector, "float") == [0.5, 1.5]
    assert refused(codec.embedding_values, response(), "m").status == 500


def test_embedding_requests_by_convention():
    vllm = codec.ModelIO("e", {"input": [{"name": "embedding_request",
                                          "data_type": "TYPE_STRING", "dims": [1]}]})
    got = inputs_of(codec.embedding_request(vllm, "t", 8))
    assert json.loads(got["embedding_request"].data[0]) == {
        "input": "t", "pooling_params": {"dimensions": 8}}
    plain = codec.ModelIO("e", {"input": [{"name": "text_input", "data_type": "TYPE_STRING",
                                           "dims": [1]}]})
    assert set(inputs_of(codec.embedding_request(plain, "t", None))) == {"text_input"}
    assert refused(codec.embedding_request, plain, "t", 8).param == "dimensions"


# ------------------------------------------------------------------ chat templates

def test_default_prompt():
    assert chat.default_prompt([{"role": "system", "content": "s"},
                                {"role": "user", "content": "u"}]) == \
        "system: s\nuser: u\nassistant:"


def test_template_from_tokenizer_config_and_named_lists(tmp_path):
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"content": "<s>"}, "eos_token": "</s>",
        "chat_template": [{"name": "tool_use", "template": "no"},
                          {"name": "default", "template":
                           "{{ bos_token }}{% for m in messages %}{{ m.role }}={{ m.content }}"
                           "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}A:"
                           "{% endif %}"}]}))
    template = chat.find_template(model)
    assert template.where.endswith("1/tokenizer_config.json")
    assert template.render([{"role": "user", "content": "hi"}], "m") == "<s>user=hi</s>A:"
    # the model folder comes before its versions
    (model / "chat_template.jinja").write_text("{{ messages | length }}{{ messages | tojson }}")
    template = chat.find_template(model)
    assert template.render([{"role": "user", "content": "é"}], "m") == \
        '1[{"role": "user", "content": "é"}]'
    assert chat.find_template(tmp_path / "absent") is None


def test_template_named_by_a_vllm_model_json(tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "tokenizer_config.json").write_text(json.dumps({"chat_template": "HF"}))
    model = tmp_path / "repo" / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.json").write_text(json.dumps({"model": str(hf)}))
    assert chat.find_template(model).render([], "m") == "HF"


def test_template_refusal_and_breakage():
    refusing = chat.ChatTemplate("{{ raise_exception('no system role') }}", "t")
    e = refused(refusing.render, [{"role": "system", "content": "x"}], "m")
    assert e.status == 400 and "no system role" in e.message
    broken = chat.ChatTemplate("{% for %}", "t")
    assert refused(broken.render, [], "m").status == 500
    undefined = chat.ChatTemplate("{{ messages[5].content.upper() }}", "t")
    assert refused(undefined.render, [], "m").status == 500


def test_templates_are_sandboxed():
    sneaky = chat.ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}", "t")
    assert refused(sneaky.render, [], "m").status == 500


# ------------------------------------------------------------------ errors and routes

def test_error_object_and_server_error_mapping():
    e = from_exception(ServerError(Code.NOT_FOUND, "gone"))
    assert (e.status, e.type) == (404, "invalid_request_error")
    assert from_exception(ServerError(Code.UNAVAILABLE, "busy")).status == 503
    assert from_exception(ServerError(Code.INTERNAL, "bug")).type == "server_error"
    assert from_exception(ValueError()).message == "ValueError"
    assert json.loads(e.body()) == {"error": {"message": "gone", "type": "invalid_request_error",
                                              "param": None, "code": "not_found"}}
    assert set(json.loads(error_body("x"))["error"]) == {"message", "type", "param", "code"}


def test_routes():
    assert match(b"/v1/models").handler.__name__ == "list_models"
    assert match(b"/v1/models/").handler.__name__ == "list_models"
    r = match(b"/v1/models/my%20model?x=1")
    assert r.handler.__name__ == "retrieve_model" and r.args == ("my model",)
    assert match(b"/v1/chat/completions").methods == ("POST",)
    assert match(b"/v1/completions").handler.__name__ == "completions"
    assert match(b"/v1/embeddings").handler.__name__ == "embeddings"
    assert match(b"/v2/models") is None and match(b"/v1/chat") is None
