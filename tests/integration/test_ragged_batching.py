"""Ragged batching (allow_ragged_batch), batch inputs and batch outputs with
an ONNX model built here: requests of different lengths batch together, the
model sees one flat INPUT plus the batch inputs the server made, and each
request gets back its own share of the batch output, shaped like its input."""

import threading

import numpy as np
import pytest
import tritonclient.http as httpclient

from pyserver.kernel.errors import ServerError
from pyserver.model.ragged import BatchShaping

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

CONFIG = """
name: "ragged"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32
    source_input: "INPUT" },
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "INPUT" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "ZINDEX"
    data_type: TYPE_INT32 source_input: "INPUT" },
  { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "ITEMS" data_type: TYPE_FP32
    source_input: "INPUT" },
  { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "LONGEST" data_type: TYPE_FP32
    source_input: "INPUT" }
]
output [
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "ACC" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "CNT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "ITEM" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "MAXLEN" data_type: TYPE_INT64 dims: [ 1 ] }
]
batch_output [ { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: "INPUT" } ]
dynamic_batching { max_queue_delay_microseconds: 2000000 preferred_batch_size: [ 3 ] }
"""


def ragged_onnx() -> bytes:
    """DOUBLED = 2 * INPUT (flat); per request: SUM of its elements (from the
    running sums at INDEX and ZINDEX), ACC = INDEX, CNT = COUNT, ITEM = its
    row length, MAXLEN = len(LONGEST)."""
    vi = helper.make_tensor_value_info
    inputs = [vi("INPUT", TensorProto.FLOAT, ["n"]), vi("INDEX", TensorProto.INT32, ["b"]),
              vi("COUNT", TensorProto.INT32, ["b"]), vi("ZINDEX", TensorProto.INT32, ["b1"]),
              vi("ITEMS", TensorProto.FLOAT, ["b"]), vi("LONGEST", TensorProto.FLOAT, ["m"])]
    outputs = [vi("DOUBLED", TensorProto.FLOAT, ["n"]), vi("SUM", TensorProto.FLOAT, ["b", 1]),
               vi("ACC", TensorProto.INT32, ["b", 1]), vi("CNT", TensorProto.INT32, ["b", 1]),
               vi("ITEM", TensorProto.FLOAT, ["b", 1]), vi("MAXLEN", TensorProto.INT64, ["b", 1])]
    const = helper.make_tensor
    nodes = [
        helper.make_node("Constant", [], ["two"], value=const("two", TensorProto.FLOAT, [], [2.0])),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"]),
        helper.make_node("Constant", [], ["axis0"], value=const("a", TensorProto.INT64, [], [0])),
        helper.make_node("CumSum", ["INPUT", "axis0"], ["running"]),
        helper.make_node("Constant", [], ["zero"], value=const("z", TensorProto.FLOAT, [1], [0.0])),
        helper.make_node("Concat", ["zero", "running"], ["running0"], axis=0),
        helper.make_node("Gather", ["running0", "INDEX"], ["ends"]),
        helper.make_node("Constant", [], ["starts_"], value=const("s", TensorProto.INT64, [1], [0])),
        helper.make_node("Constant", [], ["stops_"], value=const("e", TensorProto.INT64, [1], [-1])),
        helper.make_node("Slice", ["ZINDEX", "starts_", "stops_"], ["firsts"]),
        helper.make_node("Gather", ["running0", "firsts"], ["begins"]),
        helper.make_node("Sub", ["ends", "begins"], ["sums"]),
        helper.make_node("Constant", [], ["col"], value=const("c", TensorProto.INT64, [2], [-1, 1])),
        helper.make_node("Reshape", ["sums", "col"], ["SUM"]),
        helper.make_node("Reshape", ["INDEX", "col"], ["ACC"]),
        helper.make_node("Reshape", ["COUNT", "col"], ["CNT"]),
        helper.make_node("Reshape", ["ITEMS", "col"], ["ITEM"]),
        helper.make_node("Shape", ["LONGEST"], ["longest"]),
        helper.make_node("Shape", ["INDEX"], ["rows"]),
        helper.make_node("Expand", ["longest", "rows"], ["longest_each"]),
        helper.make_node("Reshape", ["longest_each", "col"], ["MAXLEN"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "ragged", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture
def served(tmp_path, start_server):
    model = tmp_path / "ragged"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.onnx").write_bytes(ragged_onnx())
    (model / "config.pbtxt").write_text(CONFIG)
    return start_server(tmp_path)


def infer(url, values: np.ndarray, model="ragged"):
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("INPUT", list(values.shape), "FP32")
    inp.set_data_from_numpy(values)
    try:
        return client.infer(model, [inp])
    finally:
        client.close()


def infer_together(url, values: dict, model="ragged") -> dict:
    """Each of ``values`` sent at once from its own thread; results by key."""
    results = {}

    def send(key):
        results[key] = infer(url, values[key], model)

    threads = [threading.Thread(target=send, args=(key,)) for key in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_requests_of_different_lengths_batch_together(served):
    lengths = (3, 4, 5)
    values = {n: np.arange(n, dtype=np.float32).reshape(1, n) + 10 * n for n in lengths}
    results = infer_together(served.url, values)
    stats = httpclient.InferenceServerClient(served.url).get_inference_statistics("ragged")
    batches = stats["model_stats"][0]["batch_stats"]
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in batches] == [(3, 1)]
    by_offset = sorted(lengths, key=lambda n: int(results[n].as_numpy("ACC")[0, 0]))
    running = 0
    for n in by_offset:
        r = results[n]
        running += n
        doubled = r.as_numpy("DOUBLED")
        assert doubled.shape == (1, n)  # its share, shaped like its input
        assert np.array_equal(doubled, 2 * values[n])
        assert r.as_numpy("SUM")[0, 0] == pytest.approx(values[n].sum())
        assert r.as_numpy("ACC")[0, 0] == running  # accumulated element count
        assert r.as_numpy("CNT")[0, 0] == n
        assert r.as_numpy("ITEM")[0, 0] == n  # its row's shape without the batch dim
        assert r.as_numpy("MAXLEN")[0, 0] == 5  # the longest request in the batch
    # alone, a request still gets its batch inputs
    single = infer(served.url, np.ones((1, 2), dtype=np.float32))
    assert single.as_numpy("DOUBLED").shape == (1, 2) and single.as_numpy("SUM")[0, 0] == 2
    assert single.as_numpy("ACC")[0, 0] == 2 and single.as_numpy("MAXLEN")[0, 0] == 2


def _config(text):
    from google.protobuf import text_format

    from pyserver._proto import message_class
    return text_format.Parse(text, message_class("inference.ModelConfig")())


BASE = """name: "m" max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] allow_ragged_batch: true } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def test_batch_item_shapes_count_batch_rows():
    shaping = BatchShaping(_config(BASE + """
        batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "S" data_type: TYPE_INT32
                        source_input: "X" },
                      { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "F" data_type: TYPE_FP32
                        source_input: "X" } ]"""))

    class P:
        def __init__(self, shape):
            self.arrays = {"X": np.zeros(shape, np.float32)}

    # a batch-2 request of [3, 1] rows and a batch-1 request of a [2, 2] row
    batched = shaping.gather([P((2, 3, 1)), P((1, 2, 2))], None)
    assert batched["S"].tolist() == [[3, 1], [3, 1], [2, 2]] and batched["S"].dtype == np.int32
    assert batched["F"].tolist() == [3, 1, 3, 1, 2, 2] and batched["F"].dtype == np.float32
    assert batched["X"].shape == (10,)  # ragged: flat, back to back


@pytest.mark.parametrize("extra, message", [
    ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT64 '
     'source_input: "X" } ]', "batch input data type must be TYPE_INT32 or TYPE_FP32 for m"),
    ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT32 '
     'source_input: "X" source_input: "X" } ]',
     "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2 for m"),
    ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT32 '
     'source_input: "W" } ]', "unknown source input name 'W' for m"),
    ('batch_output [ { target_name: "Z" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
     'source_input: "X" } ]', "unknown target output name 'Z' for m"),
    ('batch_output [ { target_name: "Y" target_name: "Y" source_input: "X" } ]',
     "target output name 'Y' can only be specified once for m"),
])
def test_bad_batch_io_is_refused_with_tritons_text(extra, message):
    with pytest.raises(ServerError) as exc:
        BatchShaping(_config(BASE + extra))
    assert exc.value.message == message


TORCH_CONFIG = """
name: "torch_ragged"
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX"
                data_type: TYPE_INT32 source_input: "INPUT" } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
batch_output [ { target_name: "OUTPUT__0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: "INPUT" } ]
dynamic_batching { max_queue_delay_microseconds: 2000000 preferred_batch_size: [ 2 ] }
"""


def test_pytorch_model_gets_its_batch_input_as_a_forward_argument(tmp_path, start_server):
    torch = pytest.importorskip("torch")

    class Ragged(torch.nn.Module):
        def forward(self, INPUT, INDEX):  # noqa: N803 (named as the config's tensors)
            running = torch.cat([torch.zeros(1), torch.cumsum(INPUT, 0)])
            ends = running[INDEX.long()]
            starts = torch.cat([torch.zeros(1), ends[:-1]])
            return INPUT * 2, (ends - starts).reshape(-1, 1)

    model = tmp_path / "torch_ragged"
    (model / "1").mkdir(parents=True)
    torch.jit.script(Ragged()).save(str(model / "1" / "model.pt"))
    (model / "config.pbtxt").write_text(TORCH_CONFIG)
    s = start_server(tmp_path)
    values = {n: np.arange(n, dtype=np.float32).reshape(1, n) + n for n in (2, 6)}
    results = infer_together(s.url, values, "torch_ragged")
    stats = httpclient.InferenceServerClient(s.url).get_inference_statistics("torch_ragged")
    assert [b["batch_size"] for b in stats["model_stats"][0]["batch_stats"]] == [2]
    for n, r in results.items():
        assert np.array_equal(r.as_numpy("OUTPUT__0"), 2 * values[n])  # shaped [1, n]
        assert r.as_numpy("OUTPUT__1")[0, 0] == pytest.approx(values[n].sum())


def test_batch_io_on_a_tensorrt_model_fails_its_load_with_the_reason(tmp_path, start_server):
    pytest.importorskip("tensorrt", reason="the backend loads before the config is checked")
    model = tmp_path / "trt_ragged"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.plan").write_bytes(b"never read")
    (model / "config.pbtxt").write_text(BASE.replace('name: "m"', 'name: "trt_ragged"') + """
        platform: "tensorrt_plan"
        batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT32
                        source_input: "X" } ]""")
    s = start_server(tmp_path, exit_on_error=False)
    index = httpclient.InferenceServerClient(s.url).get_model_repository_index()
    row = next(r for r in index if r["name"] == "trt_ragged")
    assert row["state"] == "UNAVAILABLE"
    assert "batch_input and batch_output are supported for onnxruntime and pytorch models, " \
           "not tensorrt" in row["reason"], row["reason"]
