"""The response cache end to end: --cache-config local,size=N on the server,
response_cache { enable: true } on a model; hits answer without running the
model and count as Triton counts them; requested outputs, inputs and shapes
separate entries; LRU eviction; BYTES outputs; the metrics families; models
without the setting or servers without a cache never cache."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.frontends.metrics import MetricsConfig
from pyserver.kernel.errors import ServerError
from pyserver.server.response_cache import CacheConfigError, parse_cache_config
from pyserver.testing import write_add_sub
from tests.integration.test_grpc import make_inputs
from tests.integration.test_metrics import exposition_of

CACHED = "response_cache { enable: true }"
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.float32)


def inputs(a, b, module=httpclient):
    return make_inputs(a, b, module)


def stats(s, name="add_sub"):
    return s.run(s.server.model_statistics, name)


@pytest.fixture
def cached(tmp_path, start_server):
    write_add_sub(tmp_path, extra=CACHED)
    write_add_sub(tmp_path, name="plain")
    return start_server(tmp_path, response_cache_byte_size=1 << 20)


def test_a_repeated_request_is_answered_from_the_cache(cached):
    with httpclient.InferenceServerClient(cached.url) as client:
        first = client.infer("add_sub", inputs(A, B), request_id="one")
        second = client.infer("add_sub", inputs(A, B), request_id="two")
        for r in (first, second):
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
        assert second.get_response()["id"] == "two"  # the id is this request's
    st = stats(cached)
    inf = st["inference_stats"]
    assert inf["success"]["count"] == 2
    assert inf["cache_hit"]["count"] == 1 and inf["cache_hit"]["ns"] > 0
    assert inf["cache_miss"]["count"] == 1 and inf["cache_miss"]["ns"] > 0
    assert st["inference_count"] == 1 and st["execution_count"] == 1  # ran once
    assert cached.server.response_cache.stats()["entries"] == 1


def test_inputs_shapes_and_requested_outputs_are_part_of_the_key(cached):
    with httpclient.InferenceServerClient(cached.url) as client:
        client.infer("add_sub", inputs(A, B))
        other = client.infer("add_sub", inputs(A, B * 2))  # other data
        np.testing.assert_array_equal(other.as_numpy("OUTPUT0"), A + 2 * B)
        two = np.vstack([A, A])
        batch = client.infer("add_sub", inputs(two, np.vstack([B, B])))  # other shape
        assert batch.as_numpy("OUTPUT0").shape == (2, 16)
        only1 = client.infer("add_sub", inputs(A, B),
                             outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
        assert only1.as_numpy("OUTPUT0") is None
        np.testing.assert_array_equal(only1.as_numpy("OUTPUT1"), A - B)
        again = client.infer("add_sub", inputs(A, B),
                             outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
        assert again.as_numpy("OUTPUT0") is None
    inf = stats(cached)["inference_stats"]
    assert inf["cache_miss"]["count"] == 4 and inf["cache_hit"]["count"] == 1


def test_models_without_the_setting_are_not_cached(cached):
    with httpclient.InferenceServerClient(cached.url) as client:
        for _ in range(3):
            client.infer("plain", inputs(A, B))
    st = stats(cached, "plain")
    assert st["inference_count"] == 3
    assert st["inference_stats"]["cache_hit"]["count"] == 0
    assert st["inference_stats"]["cache_miss"]["count"] == 0


def test_without_a_server_cache_nothing_is_cached(tmp_path, start_server):
    write_add_sub(tmp_path, extra=CACHED)
    s = start_server(tmp_path)
    assert s.server.response_cache is None
    with httpclient.InferenceServerClient(s.url) as client:
        for _ in range(2):
            r = client.infer("add_sub", inputs(A, B))
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    assert stats(s)["inference_count"] == 2


def test_least_recently_used_entries_are_evicted(tmp_path, start_server):
    write_add_sub(tmp_path, extra=CACHED)
    # Room for two responses of this model (each ~450 bytes with overhead).
    s = start_server(tmp_path, response_cache_byte_size=1100)
    with httpclient.InferenceServerClient(s.url) as client:
        for k in (1, 2, 3):  # the third evicts the first
            client.infer("add_sub", inputs(A, B * k))
        client.infer("add_sub", inputs(A, B * 3))  # hit
        client.infer("add_sub", inputs(A, B * 1))  # miss again: evicted
    cache = s.server.response_cache.stats()
    assert cache["evictions"] >= 1 and cache["bytes"] <= 1100
    inf = stats(s)["inference_stats"]
    assert inf["cache_hit"]["count"] == 1 and inf["cache_miss"]["count"] == 4


def test_errors_are_not_cached_and_validation_still_applies(cached):
    with httpclient.InferenceServerClient(cached.url) as client:
        bad = [httpclient.InferInput("INPUT0", [1, 16], "FP32")]
        bad[0].set_data_from_numpy(A)
        for _ in range(2):
            with pytest.raises(Exception, match="expected 2 inputs but got 1 inputs"):
                client.infer("add_sub", bad)
    assert cached.server.response_cache.stats()["entries"] == 0


def test_grpc_and_metrics(cached):
    frontend = GrpcFrontend(cached.server, "127.0.0.1", 0)
    cached.call(frontend.start())
    try:
        with grpcclient.InferenceServerClient(f"127.0.0.1:{frontend.port}") as client:
            for _ in range(3):
                r = client.infer("add_sub", inputs(A, B, grpcclient))
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
    finally:
        cached.call(frontend.stop(5))
    text = exposition_of(cached.server, MetricsConfig())
    assert 'nv_cache_num_hits_per_model{model="add_sub",version="1"} 2' in text
    assert 'nv_cache_num_misses_per_model{model="add_sub",version="1"} 1' in text
    assert 'nv_inference_request_success{model="add_sub",version="1"} 3' in text
    assert 'nv_inference_count{model="add_sub",version="1"} 1' in text
    assert 'nv_cache_num_hits_per_model{model="plain"' not in text


def test_bytes_outputs_round_trip(tmp_path, start_server):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["IN"], ["OUT"])], "echo",
        [helper.make_tensor_value_info("IN", TensorProto.STRING, ["b", 3])],
        [helper.make_tensor_value_info("OUT", TensorProto.STRING, ["b", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    d = tmp_path / "echo"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(model.SerializeToString())
    (d / "config.pbtxt").write_text(
        'name: "echo"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        'input [ { name: "IN" data_type: TYPE_STRING dims: [ 3 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 3 ] } ]\n' + CACHED)
    s = start_server(tmp_path, response_cache_byte_size=1 << 20)
    data = np.array([[b"a", b"", "ünï".encode()]], dtype=object)
    with httpclient.InferenceServerClient(s.url) as client:
        for _ in range(2):
            inp = httpclient.InferInput("IN", [1, 3], "BYTES")
            inp.set_data_from_numpy(data)
            out = client.infer("echo", [inp]).as_numpy("OUT")
            assert out.tolist() == data.tolist()
    assert stats(s, "echo")["inference_stats"]["cache_hit"]["count"] == 1


def test_cache_config_parsing():
    assert parse_cache_config([]) == 0
    assert parse_cache_config([], legacy_bytes=4096) == 4096
    assert parse_cache_config(["local,size=1048576"]) == 1048576
    for spec, text in (("local", "format is '<cache name>,<setting>=<value>'"),
                       ("redis,host=x", "unsupported cache 'redis'"),
                       ("local,capacity=5", "unknown setting 'capacity=5'"),
                       ("local,size=big", "must be an integer"),
                       ("local,size=-1", "must be >= 0")):
        with pytest.raises(CacheConfigError, match=text):
            parse_cache_config([spec])


def test_ensemble_top_level_responses_are_cached(tmp_path, start_server):
    """response_cache on an ensemble: a repeated request is answered from the
    cache without running its steps (which do not cache themselves)."""
    from tests.integration.test_ensemble import PIPELINE, write_ensemble
    from tests.integration.test_ensemble import inputs as pipeline_inputs
    write_add_sub(tmp_path)
    write_ensemble(tmp_path, text=PIPELINE.format(name="pipeline", step0="add_sub") + CACHED)
    s = start_server(tmp_path, response_cache_byte_size=1 << 20)
    with httpclient.InferenceServerClient(s.url) as client:
        first = client.infer("pipeline", pipeline_inputs(httpclient))
        again = client.infer("pipeline", pipeline_inputs(httpclient))
        np.testing.assert_array_equal(again.as_numpy("OUT_A"), first.as_numpy("OUT_A"))
        np.testing.assert_array_equal(again.as_numpy("OUT_B"), first.as_numpy("OUT_B"))
        other = client.infer("pipeline", pipeline_inputs(httpclient, b=np.zeros((1, 16), np.float32)))
        assert not np.array_equal(other.as_numpy("OUT_B"), first.as_numpy("OUT_B"))
    steps = stats(s)  # add_sub ran three steps for each of the two misses only
    assert steps["inference_stats"]["success"]["count"] == 6
    assert steps["inference_stats"]["cache_hit"]["count"] == 0
    pipeline = stats(s, "pipeline")["inference_stats"]
    assert pipeline["cache_hit"]["count"] == 1 and pipeline["cache_miss"]["count"] == 2
    assert pipeline["success"]["count"] == 3


def _fanout_repo(repo, cached_ensemble: bool):
    """Triton's qa/L0_response_cache decoupled cases: the fanout ensemble over
    the decoupled 'repeat' step, with the cache on the ensemble or not."""
    from tests.integration.test_python_decoupled import write_fanout
    write_fanout(repo, CACHED if cached_ensemble else "")


def test_a_cache_on_a_decoupled_model_or_a_sequence_model_fails_its_load(tmp_path, start_server):
    """Triton's model config checks: its cache keeps one response per request,
    and does not take sequence batching."""
    write_add_sub(tmp_path, name="decoupled_cache",
                  extra="model_transaction_policy { decoupled: true }\n" + CACHED)
    write_add_sub(tmp_path, name="sequence_cache", extra="sequence_batching { }\n" + CACHED)
    write_add_sub(tmp_path, name="fine", extra=CACHED)
    with pytest.raises(ServerError) as err:  # as Triton, a server that cannot load them exits
        start_server(tmp_path, response_cache_byte_size=1 << 20)
    assert "model decoupled_cache with 'decoupled' transaction policy" in err.value.message
    s = start_server(tmp_path, response_cache_byte_size=1 << 20, exit_on_error=False)
    index = {row["name"]: row for row in s.run(s.server.repository_index)}
    assert index["decoupled_cache"]["state"] == "UNAVAILABLE"
    assert index["decoupled_cache"]["reason"] == (
        "Response Cache does not currently support model decoupled_cache with 'decoupled' "
        "transaction policy. Please disable the response cache.")
    assert index["sequence_cache"]["reason"] == (
        "Response Cache does not currently support model sequence_cache with sequence "
        "batching scheduler. Please disable the response cache.")
    assert index["fine"]["state"] == "READY"
    with httpclient.InferenceServerClient(s.url) as client:
        assert client.is_model_ready("fine") and not client.is_model_ready("decoupled_cache")


@pytest.mark.parametrize("mode", ["none", "explicit"])
def test_a_cached_ensemble_with_a_decoupled_step_fails_its_load(tmp_path, start_server, mode):
    """The ensemble is decoupled as its step is (as Triton marks it), so its
    cache refuses it: at startup beside its steps, and on an explicit load
    that loads the steps first."""
    _fanout_repo(tmp_path, cached_ensemble=True)
    kwargs = {"model_control_mode": mode} if mode == "explicit" else {"exit_on_error": False}
    s = start_server(tmp_path, response_cache_byte_size=1 << 20, **kwargs)
    reason = ("Response Cache does not currently support model fanout with 'decoupled' "
              "transaction policy. Please disable the response cache.")
    if mode == "explicit":
        with httpclient.InferenceServerClient(s.url) as client:
            with pytest.raises(InferenceServerException) as err:
                client.load_model("fanout")
            assert err.value.message() == f"load failed for model 'fanout': {reason}"
    index = {row["name"]: row for row in s.run(s.server.repository_index)}
    assert (index["fanout"]["state"], index["fanout"]["reason"]) == ("UNAVAILABLE", reason)
    assert index["repeat"]["state"] == "READY" and index["plus_one"]["state"] == "READY"


def test_an_uncached_ensemble_with_a_decoupled_step_loads(tmp_path, start_server):
    _fanout_repo(tmp_path, cached_ensemble=False)
    s = start_server(tmp_path, response_cache_byte_size=1 << 20)
    with httpclient.InferenceServerClient(s.url) as client:
        assert client.is_model_ready("fanout")
