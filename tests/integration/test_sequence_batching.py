"""Sequence batching end to end with tritonclient: a stateful Python model
(an accumulator keyed by its CORRID control input) and an ONNX model that
reads the START/END/READY/CORRID controls as tensors; Triton's errors for
missing IDs, missing START and batch size; string IDs; interleaved and
concurrent sequences batched together; the idle timeout."""

import asyncio
import concurrent.futures
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from tests.integration.conftest import use_execution_mode

ACCUMULATOR = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            end = pb_utils.get_input_tensor_by_name(request, "END").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            corr = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
            key = corr.reshape(-1)[0]
            key = key.decode() if isinstance(key, bytes) else int(key)
            if start.reshape(-1)[0]:
                self.sums[key] = 0
            self.sums[key] += int(value.reshape(-1)[0])
            flags = np.array([[int(start.reshape(-1)[0]), int(end.reshape(-1)[0]),
                               int(ready.reshape(-1)[0]), request.flags()]], dtype=np.int32)
            out = [pb_utils.Tensor("OUTPUT", np.array([[self.sums[key]]], dtype=np.int32)),
                   pb_utils.Tensor("FLAGS", flags)]
            if end.reshape(-1)[0]:
                del self.sums[key]
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses
'''


def accumulator_config(name, corrid_type="TYPE_UINT64", extra=""):
    return f'''
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "FLAGS" data_type: TYPE_INT32 dims: [ 4 ] }}
]
sequence_batching {{
  {extra}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }}
  ]
}}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''


def write_accumulator(repo, name="acc", **kwargs):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(ACCUMULATOR)
    (d / "config.pbtxt").write_text(accumulator_config(name, **kwargs))


def _save_onnx(folder, graph, config: str) -> None:
    """A model folder: ``graph`` as version 1's model.onnx, and its config."""
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(model.SerializeToString())
    (folder / "config.pbtxt").write_text(config)


def write_onnx_controls(repo, name="ctl", instances=1, strategy=""):
    """OUTPUT0 = INPUT + 1000*START + 100*END + 10*READY (FP32 controls),
    OUTPUT1 = CORRID (UINT64)."""
    from onnx import TensorProto, helper

    fp = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 1])
          for n in ("INPUT", "START", "END", "READY")]
    corr = helper.make_tensor_value_info("CORRID", TensorProto.UINT64, ["b", 1])
    outs = [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", 1]),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.UINT64, ["b", 1])]
    consts = [helper.make_tensor(f"k{v}", TensorProto.FLOAT, [], [float(v)]) for v in (1000, 100, 10)]
    nodes = [helper.make_node("Mul", ["START", "k1000"], ["s"]),
             helper.make_node("Mul", ["END", "k100"], ["e"]),
             helper.make_node("Mul", ["READY", "k10"], ["r"]),
             helper.make_node("Sum", ["INPUT", "s", "e", "r"], ["OUTPUT0"]),
             helper.make_node("Identity", ["CORRID"], ["OUTPUT1"])]
    graph = helper.make_graph(nodes, name, fp + [corr], outs, initializer=consts)
    _save_onnx(repo / name, graph, f'''
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_UINT64 dims: [ 1 ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
}}
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
''')


def one(value, module=httpclient, dtype=np.int32, datatype="INT32"):
    inp = module.InferInput("INPUT", [1, 1], datatype)
    inp.set_data_from_numpy(np.array([[value]], dtype=dtype))
    return [inp]


def test_accumulator_sequences_over_http(tmp_path, start_server):
    write_accumulator(tmp_path)
    s = start_server(tmp_path)
    with httpclient.InferenceServerClient(s.url) as client:
        def step(seq, value, start=False, end=False):
            r = client.infer("acc", one(value), sequence_id=seq, sequence_start=start,
                             sequence_end=end)
            return int(r.as_numpy("OUTPUT")[0, 0]), r.as_numpy("FLAGS")[0].tolist()

        assert step(7, 1, start=True) == (1, [1, 0, 1, 1])  # START, READY, flags() = START
        assert step(8, 100, start=True)[0] == 100            # interleaved sequence
        assert step(7, 2) == (3, [0, 0, 1, 0])
        assert step(8, 200)[0] == 300
        assert step(7, 3, end=True) == (6, [0, 1, 1, 2])     # END
        assert step(8, 300, end=True)[0] == 600
        # Ended: continuing without START is refused, with Triton's text.
        with pytest.raises(InferenceServerException) as e:
            step(7, 4)
        assert "inference request for sequence 7 to model 'acc' must specify the START flag " \
               "on the first request of the sequence" in str(e.value)
        with pytest.raises(InferenceServerException) as e:
            client.infer("acc", one(1))
        assert "inference request to model 'acc' must specify a non-zero or non-empty " \
               "correlation ID" in str(e.value)
        two = httpclient.InferInput("INPUT", [2, 1], "INT32")
        two.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
        with pytest.raises(InferenceServerException) as e:
            client.infer("acc", [two], sequence_id=9, sequence_start=True)
        assert "must specify batch-size 1 due to requirements of sequence batcher" in str(e.value)
        # A sequence that starts and ends in one request.
        assert step(11, 5, start=True, end=True) == (5, [1, 1, 1, 3])
    st = s.run(s.server.model_statistics, "acc")
    assert st["inference_stats"]["success"]["count"] == 7
    assert st["pending_count"] == 0


def test_string_sequence_ids_over_grpc(tmp_path, start_server):
    write_accumulator(tmp_path, corrid_type="TYPE_STRING")
    s = start_server(tmp_path)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    try:
        with grpcclient.InferenceServerClient(f"127.0.0.1:{frontend.port}") as client:
            def step(seq, value, **flags):
                r = client.infer("acc", one(value, grpcclient), sequence_id=seq, **flags)
                return int(r.as_numpy("OUTPUT")[0, 0])

            assert step("user-a", 1, sequence_start=True) == 1
            assert step("user-b", 10, sequence_start=True) == 10
            assert step("user-a", 2) == 3
            assert step("user-b", 20, sequence_end=True) == 30
            assert step("user-a", 3, sequence_end=True) == 6
            with pytest.raises(InferenceServerException) as e:
                step("user-c", 1)
            assert "inference request for sequence user-c to model 'acc' must specify the " \
                   "START flag" in str(e.value)
    finally:
        s.call(frontend.stop(5))


def test_concurrent_sequences_batch_together_with_their_controls(tmp_path, start_server):
    write_onnx_controls(tmp_path)
    s = start_server(tmp_path)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    url = f"127.0.0.1:{frontend.port}"

    async def sequence(client, corr, length):
        got = []
        for i in range(length):
            r = await client.infer(
                "ctl", one(float(i), grpcaio, np.float32, "FP32"), sequence_id=corr,
                sequence_start=i == 0, sequence_end=i == length - 1)
            got.append((float(r.as_numpy("OUTPUT0")[0, 0]), int(r.as_numpy("OUTPUT1")[0, 0])))
        return got

    async def main():
        async with grpcaio.InferenceServerClient(url) as client:
            return await asyncio.gather(*(sequence(client, 1000 + k, 6) for k in range(8)))

    try:
        results = asyncio.run(main())
    finally:
        s.call(frontend.stop(5))
    for k, got in enumerate(results):
        assert [c for _, c in got] == [1000 + k] * 6  # CORRID reached the model per row
        values = [v for v, _ in got]
        # READY (10) always; START (1000) first; END (100) last.
        assert values == [1010.0, 11.0, 12.0, 13.0, 14.0, 115.0]
    st = s.run(s.server.model_statistics, "ctl")
    assert st["inference_count"] == 48
    assert max(b["batch_size"] for b in st["batch_stats"]) > 1  # sequences shared batches
    assert max(b["batch_size"] for b in st["batch_stats"]) <= 4


def test_direct_strategy_waits_for_its_minimum_slot_utilization(tmp_path, start_server):
    # Half of the 4 slots must be ready before the delay (10 s) runs out: the
    # first START waits for the second, and both run in one batch.
    write_onnx_controls(tmp_path, strategy="direct { max_queue_delay_microseconds: 10000000 "
                                           "minimum_slot_utilization: 0.5 }")
    s = start_server(tmp_path)

    def start(corr):
        with httpclient.InferenceServerClient(s.url) as client:
            r = client.infer("ctl", one(1.0, httpclient, np.float32, "FP32"), sequence_id=corr,
                             sequence_start=True, sequence_end=True)
            return int(r.as_numpy("OUTPUT1")[0, 0])

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(start, 1)
        time.sleep(0.3)
        assert not first.done()  # one slot of four: below the utilization
        assert start(2) == 2
        assert first.result(timeout=5) == 1
    st = s.run(s.server.model_statistics, "ctl")
    assert st["execution_count"] == 1 and st["inference_count"] == 2


def test_idle_sequence_loses_its_slot(tmp_path, start_server):
    write_accumulator(tmp_path, extra="max_sequence_idle_microseconds: 200000")
    s = start_server(tmp_path)
    with httpclient.InferenceServerClient(s.url) as client:
        client.infer("acc", one(1), sequence_id=3, sequence_start=True)
        time.sleep(0.6)
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            client.infer("acc", one(1), sequence_id=3)
        r = client.infer("acc", one(4), sequence_id=3, sequence_start=True)
        assert int(r.as_numpy("OUTPUT")[0, 0]) == 4


def test_more_sequences_than_slots_wait_in_the_backlog(tmp_path, start_server):
    write_onnx_controls(tmp_path, instances=1)  # 4 slots
    s = start_server(tmp_path)
    with httpclient.InferenceServerClient(s.url, concurrency=8) as client:
        # Six sequences started before any ends: two wait for a slot.
        for corr in range(1, 7):
            client.async_infer("ctl", one(0.0, dtype=np.float32, datatype="FP32"),
                               sequence_id=corr, sequence_start=True)
        pending = [client.async_infer("ctl", one(1.0, dtype=np.float32, datatype="FP32"),
                                      sequence_id=corr, sequence_end=True)
                   for corr in range(1, 7)]
        ends = [p.get_result(timeout=30) for p in pending]
    assert [int(r.as_numpy("OUTPUT1")[0, 0]) for r in ends] == list(range(1, 7))
    assert all(float(r.as_numpy("OUTPUT0")[0, 0]) == 111.0 for r in ends)


def write_onnx_state(repo, name="state_acc", state_extra="", max_batch_size=4):
    """An ONNX accumulator kept in implicit state: OUTPUT = OUT_STATE =
    IN_STATE + INPUT (INT32)."""
    from onnx import TensorProto, helper

    batch = ["b", 1] if max_batch_size else [1]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT32, batch) for n in ("INPUT", "IN_STATE")]
    outs = [helper.make_tensor_value_info(n, TensorProto.INT32, batch)
            for n in ("OUTPUT", "OUT_STATE")]
    nodes = [helper.make_node("Add", ["IN_STATE", "INPUT"], ["OUTPUT"]),
             helper.make_node("Identity", ["OUTPUT"], ["OUT_STATE"])]
    _save_onnx(repo / name, helper.make_graph(nodes, name, ins, outs), f'''
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{
  state [ {{
    input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
    {state_extra}
  }} ]
}}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
''')


STATE_ACC_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "IN_STATE").as_numpy()
            total = (state + value).astype(np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("OUT_STATE", total)]))
        return responses
'''


@pytest.mark.parametrize("kind", ["onnx", "python", "python-thread"])
def test_implicit_state_carries_each_sequence_forward(tmp_path, start_server, kind):
    # A first request starts from the initial state (100, from a data file);
    # each next one gets the state the one before it left.
    write_onnx_state(tmp_path, state_extra='initial_state { data_type: TYPE_INT32 dims: [ 1 ] '
                                           'data_file: "hundred" name: "from_file" }')
    model_dir = tmp_path / "state_acc"
    if kind.startswith("python"):
        (model_dir / "1" / "model.onnx").unlink()
        (model_dir / "1" / "model.py").write_text(STATE_ACC_PY)
        config = model_dir / "config.pbtxt"
        config.write_text(config.read_text().replace('platform: "onnxruntime_onnx"',
                                                     'backend: "python"'))
        use_execution_mode(tmp_path, kind.partition("-")[2] or "process")
    (model_dir / "initial_state").mkdir()
    (model_dir / "initial_state" / "hundred").write_bytes(np.array([100], np.int32).tobytes())
    s = start_server(tmp_path)
    with httpclient.InferenceServerClient(s.url) as client:
        def step(seq, value, start=False, end=False, outputs=None):
            r = client.infer("state_acc", one(value), sequence_id=seq, sequence_start=start,
                             sequence_end=end, outputs=outputs)
            return int(r.as_numpy("OUTPUT")[0, 0]), r.get_response()

        assert step(1, 1, start=True)[0] == 101
        assert step(2, 10, start=True)[0] == 110  # interleaved sequences keep their own
        assert step(1, 2)[0] == 103
        assert step(2, 20)[0] == 130
        total, response = step(1, 3, end=True)
        assert total == 106
        assert [o["name"] for o in response["outputs"]] == ["OUTPUT"]  # the state stays inside
        assert step(1, 5, start=True)[0] == 105  # a new sequence starts from the initial state
        # The state output is no output of the model's to ask for.
        with pytest.raises(InferenceServerException) as e:
            step(2, 1, outputs=[httpclient.InferRequestedOutput("OUT_STATE")])
        assert "unexpected inference output 'OUT_STATE' for model 'state_acc'" in str(e.value)
    assert s.run(s.server.model_statistics, "state_acc")["pending_count"] == 0


def test_implicit_state_starts_at_zero_without_initial_state(tmp_path, start_server):
    write_onnx_state(tmp_path, max_batch_size=0)
    s = start_server(tmp_path)
    with httpclient.InferenceServerClient(s.url) as client:
        def step(seq, value, start=False):
            inp = httpclient.InferInput("INPUT", [1], "INT32")
            inp.set_data_from_numpy(np.array([value], dtype=np.int32))
            r = client.infer("state_acc", [inp], sequence_id=seq, sequence_start=start)
            return int(r.as_numpy("OUTPUT")[0])

        assert [step(4, 7, start=True), step(4, 8), step(4, 9)] == [7, 15, 24]


@pytest.mark.parametrize("state, reason", [
    ('input_name: "INPUT" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]',
     "state input 'INPUT' is also declared as an input"),
    ('input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] '
     'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "missing" }',
     "failed to read initial_state data_file"),
    ('input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] '
     'initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }',
     "must have the state's data_type"),
])
def test_bad_implicit_state_fails_the_load_with_a_reason(tmp_path, start_server, state, reason):
    write_accumulator(tmp_path, extra=f"state [ {{ {state} }} ]")
    s = start_server(tmp_path, exit_on_error=False)
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert index["acc"]["state"] == "UNAVAILABLE"
    assert reason in index["acc"]["reason"]


def test_warmup_of_sequence_models(tmp_path, start_server):
    # A sample gives the control inputs (their dims as they are, as in
    # Triton); an implicit state starts at its initial value.
    controls = "".join(
        f'inputs {{ key: "{n}" value {{ data_type: TYPE_FP32 dims: [ 1, 1 ] zero_data: true }} }} '
        for n in ("START", "END", "READY"))
    write_onnx_controls(tmp_path)
    config = tmp_path / "ctl" / "config.pbtxt"
    config.write_text(config.read_text() + f'''
model_warmup [ {{ name: "w" batch_size: 2 count: 2
  inputs {{ key: "INPUT" value {{ data_type: TYPE_FP32 dims: [ 1 ] random_data: true }} }}
  {controls}
  inputs {{ key: "CORRID" value {{ data_type: TYPE_UINT64 dims: [ 1, 1 ] zero_data: true }} }}
}} ]
''')
    write_onnx_state(tmp_path)
    config = tmp_path / "state_acc" / "config.pbtxt"
    config.write_text(config.read_text() + '''
model_warmup [ { name: "w" batch_size: 1
  inputs { key: "INPUT" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]
''')
    s = start_server(tmp_path)
    index = {r["name"]: r["state"] for r in s.run(s.server.repository_index)}
    assert index == {"ctl": "READY", "state_acc": "READY"}
    with httpclient.InferenceServerClient(s.url) as client:  # warmup left no state behind
        r = client.infer("state_acc", one(5), sequence_id=1, sequence_start=True)
        assert int(r.as_numpy("OUTPUT")[0, 0]) == 5
    assert s.run(s.server.model_statistics, "ctl")["execution_count"] == 0  # not counted
