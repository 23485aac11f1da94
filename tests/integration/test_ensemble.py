"""Ensembles end to end: a three-step pipeline over an ONNX model (two of the
steps independent, so they run concurrently) served over HTTP and gRPC;
statistics of the ensemble and its steps; errors from a step prefixed with
the ensemble's name; plans that cannot work refused at load with a reason."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.testing import write_add_sub
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.float32)

PIPELINE = """
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [
  {{ name: "IN0" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "IN1" data_type: TYPE_FP32 dims: [ 16 ] }}
]
output [
  {{ name: "OUT_A" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "OUT_B" data_type: TYPE_FP32 dims: [ 16 ] }}
]
ensemble_scheduling {{
  step [
    {{
      model_name: "{step0}"
      model_version: -1
      input_map {{ key: "INPUT0" value: "IN0" }}
      input_map {{ key: "INPUT1" value: "IN1" }}
      output_map {{ key: "OUTPUT0" value: "sum" }}
      output_map {{ key: "OUTPUT1" value: "diff" }}
    }},
    {{
      model_name: "add_sub"
      model_version: 1
      input_map {{ key: "INPUT0" value: "sum" }}
      input_map {{ key: "INPUT1" value: "diff" }}
      output_map {{ key: "OUTPUT0" value: "OUT_A" }}
    }},
    {{
      model_name: "add_sub"
      model_version: -1
      input_map {{ key: "INPUT0" value: "diff" }}
      input_map {{ key: "INPUT1" value: "sum" }}
      output_map {{ key: "OUTPUT1" value: "OUT_B" }}
    }}
  ]
}}
"""


def write_ensemble(repo, name="pipeline", text=None, step0="add_sub"):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(text if text is not None else
                                    PIPELINE.format(name=name, step0=step0))


def inputs(module, a=A, b=B):
    ins = [module.InferInput("IN0", list(a.shape), "FP32"),
           module.InferInput("IN1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


@pytest.fixture
def served(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path, extra="dynamic_batching { }")
    write_ensemble(tmp_path)
    write_ensemble(tmp_path, name="broken", step0="missing_model")
    return start_grpc(tmp_path)


def test_pipeline_over_http_and_grpc(served):
    with httpclient.InferenceServerClient(served.url) as client:
        r = client.infer("pipeline", inputs(httpclient))
        np.testing.assert_array_equal(r.as_numpy("OUT_A"), 2 * A)   # (a+b)+(a-b)
        np.testing.assert_array_equal(r.as_numpy("OUT_B"), -2 * B)  # (a-b)-(a+b)
        only = client.infer("pipeline", inputs(httpclient),
                            outputs=[httpclient.InferRequestedOutput("OUT_B")])
        assert only.as_numpy("OUT_A") is None
        meta = client.get_model_metadata("pipeline")
        assert meta["platform"] == "ensemble"
        assert client.get_model_config("pipeline")["ensemble_scheduling"]["step"][0][
            "model_name"] == "add_sub"
        assert client.is_model_ready("pipeline")
    batch_a, batch_b = np.vstack([A, A + 1]), np.vstack([B, B])
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        r = client.infer("pipeline", inputs(grpcclient, batch_a, batch_b))
        np.testing.assert_array_equal(r.as_numpy("OUT_A"), 2 * batch_a)
    stats = served.run(served.server.model_statistics, "pipeline")
    assert stats["inference_stats"]["success"]["count"] == 3
    steps = served.run(served.server.model_statistics, "add_sub")
    assert steps["inference_stats"]["success"]["count"] == 9  # three steps per request


def test_a_failing_step_names_the_ensemble(served):
    with httpclient.InferenceServerClient(served.url) as client:
        with pytest.raises(InferenceServerException) as e:
            client.infer("broken", inputs(httpclient))
        assert "in ensemble 'broken', " in str(e.value)
        assert "missing_model" in str(e.value)
        # Validation against the ensemble's own inputs happens first.
        bad = [httpclient.InferInput("IN0", [1, 16], "FP32")]
        bad[0].set_data_from_numpy(A)
        with pytest.raises(InferenceServerException, match="expected 2 inputs"):
            client.infer("pipeline", bad)
        # The server keeps serving.
        r = client.infer("pipeline", inputs(httpclient))
        np.testing.assert_array_equal(r.as_numpy("OUT_A"), 2 * A)
    stats = served.run(served.server.model_statistics, "broken")
    assert stats["inference_stats"]["fail"]["count"] == 1


def test_grpc_stream_through_an_ensemble(served):
    import queue

    results = queue.Queue()
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for i in range(3):
            client.async_stream_infer("pipeline", inputs(grpcclient, A + i), request_id=str(i))
        got = {}
        for _ in range(3):
            result, error = results.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = result.as_numpy("OUT_A")
        client.stop_stream()
    for i in range(3):
        np.testing.assert_array_equal(got[str(i)], 2 * (A + i))


@pytest.mark.parametrize("change,reason", [
    (lambda t: t.replace('value: "IN1" }}', 'value: "IN0" }}'), "ensemble input 'IN1' is not used"),
    (lambda t: t.replace('value: "OUT_B"', 'value: "OUT_C"'), "ensemble output 'OUT_B' is not produced"),
    (lambda t: t.replace('{{ key: "OUTPUT0" value: "OUT_A" }}', '{{ key: "OUTPUT0" value: "sum" }}'),
     "ensemble tensor 'sum' can appear in an output map only once"),
    (lambda t: t.replace('input_map {{ key: "INPUT1" value: "IN1" }}',
                         'input_map {{ key: "INPUT1" value: "nowhere" }}'),
     "which is neither an ensemble input nor an output of any step"),
], ids=["unused-input", "missing-output", "produced-twice", "dangling-input"])
def test_unworkable_plans_fail_to_load(tmp_path, start_server, change, reason):
    write_add_sub(tmp_path)
    write_ensemble(tmp_path, text=change(PIPELINE).format(name="pipeline", step0="add_sub"))
    s = start_server(tmp_path, exit_on_error=False)
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert index["pipeline"]["state"] == "UNAVAILABLE"
    assert reason in index["pipeline"]["reason"]
    assert index["add_sub"]["state"] == "READY"


def test_a_cycle_fails_to_load(tmp_path, start_server):
    text = PIPELINE.replace('input_map {{ key: "INPUT1" value: "IN1" }}',
                            'input_map {{ key: "INPUT1" value: "OUT_A" }}')
    text = text.replace('value: "IN0" }}', 'value: "IN0" }}\n      input_map {{ key: "X" value: "IN1" }}')
    write_add_sub(tmp_path)
    write_ensemble(tmp_path, text=text.format(name="pipeline", step0="add_sub"))
    s = start_server(tmp_path, exit_on_error=False)
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert "depend on each other in a cycle" in index["pipeline"]["reason"]


def test_explicit_mode_loads_and_unloads_composing_models(tmp_path, start_server):
    write_add_sub(tmp_path)
    write_ensemble(tmp_path)
    s = start_server(tmp_path, model_control_mode="explicit")
    with httpclient.InferenceServerClient(s.url) as client:
        assert not client.is_model_ready("add_sub")
        client.load_model("pipeline")  # brings add_sub along
        assert client.is_model_ready("add_sub") and client.is_model_ready("pipeline")
        r = client.infer("pipeline", inputs(httpclient))
        np.testing.assert_array_equal(r.as_numpy("OUT_A"), 2 * A)
        client.unload_model("add_sub")  # a step goes: the ensemble is not ready (Triton, #21)
        assert not client.is_model_ready("pipeline")
        rows = {r["name"]: r for r in client.get_model_repository_index()}
        assert rows["pipeline"] == {"name": "pipeline", "version": "1", "state": "UNAVAILABLE",
                                    "reason": "unloaded"}
        assert "pipeline" not in {r["name"] for r in s.run(s.server.repository_index, True)}
        client.load_model("add_sub")
        assert client.is_model_ready("pipeline")
        rows = {r["name"]: r for r in client.get_model_repository_index()}
        assert rows["pipeline"] == {"name": "pipeline", "version": "1", "state": "READY"}
        client.unload_model("pipeline")
        assert client.is_model_ready("add_sub")  # without unload_dependents it stays
        client.load_model("pipeline")
        client.unload_model("pipeline", unload_dependents=True)
        assert not client.is_model_ready("add_sub") and not client.is_model_ready("pipeline")


def test_explicit_load_fails_when_a_composing_model_cannot_load(tmp_path, start_server):
    write_ensemble(tmp_path, step0="missing_model")
    write_add_sub(tmp_path)
    s = start_server(tmp_path, model_control_mode="explicit")
    with httpclient.InferenceServerClient(s.url) as client:
        with pytest.raises(InferenceServerException) as e:
            client.load_model("pipeline")
        assert "load failed for model 'pipeline'" in str(e.value)
        assert "missing_model" in str(e.value)
        assert not client.is_model_ready("pipeline")


def test_a_step_fed_by_two_decoupled_steps_is_refused():
    """Triton's lineage rule: a step may not take tensors that come from
    two different decoupled steps."""
    from types import SimpleNamespace

    from google.protobuf import text_format

    from pyserver._proto import message_class
    from pyserver.kernel.errors import ServerError
    from pyserver.model.ensemble import EnsemblePlan, decoupled_steps

    config = text_format.Parse('''
        name: "joined" platform: "ensemble"
        input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "Z" data_type: TYPE_INT32 dims: [ 1 ] } ]
        ensemble_scheduling { step [
          { model_name: "gen1" input_map { key: "IN" value: "A" } output_map { key: "OUT" value: "x" } },
          { model_name: "gen2" input_map { key: "IN" value: "A" } output_map { key: "OUT" value: "y" } },
          { model_name: "join" input_map { key: "X" value: "x" } input_map { key: "Y" value: "y" }
            output_map { key: "Z" value: "Z" } } ] }''', message_class("inference.ModelConfig")())
    mv = SimpleNamespace(name="joined", ensemble=EnsemblePlan(config))
    kinds = {"gen1": True, "gen2": True, "join": False}
    server = SimpleNamespace(_resolve=lambda name, version: SimpleNamespace(decoupled=kinds[name]))
    with pytest.raises(ServerError) as exc:
        decoupled_steps(server, mv)
    assert exc.value.message == ("in ensemble joined, step of model 'join' receives inputs "
                                 "originated from different decoupled models")
    kinds["gen2"] = False  # one decoupled source: fine
    assert decoupled_steps(server, mv) == {0}
