"""engine/request_path.pyx against core.model's Python code: the compiled
check accepts a request only when ModelVersion.validate accepts it, with the
same result, and the compiled scatter answers as the Python code did."""

import itertools

import numpy as np
import pytest

from pyserver.config import normalize, parse_config_text
from pyserver.engine import CompletionQueue
from pyserver.kernel.context import ServerContext
from pyserver.kernel.errors import ServerError
from pyserver.kernel.types import InferRequest, InferTensor, RequestedOutput
from pyserver.model.version import ModelVersion, PendingRequest

PLAIN = """
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ 2, 3 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] },
         { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def model(text):
    config = normalize(parse_config_text(text), "m")
    return ModelVersion("m", 1, config, "/nonexistent/1", ServerContext(CompletionQueue()))


def tensor(name, datatype, shape):
    dtype = {"FP32": np.float32, "INT32": np.int32, "FP16": np.float16}[datatype]
    return InferTensor(name, datatype, shape, np.zeros([max(d, 0) for d in shape], dtype))


def variants():
    """Requests around the valid one: each rule broken once, and some twice."""
    good_a = ("A", "FP32", [2, 2])
    good_b = ("B", "INT32", [2, 2, 3])
    inputs = [
        [good_a, good_b],
        [good_b, good_a],
        [good_a],
        [good_a, good_b, ("C", "FP32", [2, 2])],
        [good_a, good_a, good_b],
        [("A", "FP16", [2, 2]), good_b],
        [("A", "FP32", [2, 3]), good_b],
        [("A", "FP32", [2]), good_b],
        [("A", "FP32", [3, 2]), good_b],
        [("A", "FP32", [5, 2]), ("B", "INT32", [5, 2, 3])],
        [("A", "FP32", [4, 2]), ("B", "INT32", [4, 2, 3])],
        [("A", "FP32", [0, 2]), ("B", "INT32", [0, 2, 3])],
        [("A", "FP32", []), good_b],
    ]
    outputs = [[], ["X"], ["Y", "X"], ["Z"], ["X", "X"]]
    for ins, outs in itertools.product(inputs, outputs):
        yield InferRequest("m", "", "r", [tensor(*t) for t in ins],
                           [RequestedOutput(o) for o in outs])


@pytest.mark.parametrize("text", [
    PLAIN,
    PLAIN.replace("max_batch_size: 4", "max_batch_size: 0").replace("[ 2, 3 ]", "[ 2, 2, 3 ]")
         .replace("dims: [ 2 ] },\n        {", "dims: [ 2, 2 ] },\n        {"),
    PLAIN.replace('dims: [ 2 ] },\n        {', 'dims: [ -1 ] },\n        {'),
    PLAIN.replace('dims: [ 2 ] },\n        {',
                  'dims: [ 2 ] reshape: { shape: [ 1, 2 ] } },\n        {'),
    PLAIN.replace('dims: [ 2, 3 ] }', 'dims: [ 2, 3 ] optional: true }'),
])
def test_check_accepts_only_what_validate_accepts(text):
    mv = model(text)
    accepted = 0
    for request in variants():
        fast = mv._path.check(request)
        try:
            slow = mv._path.walk(request)  # the general walk alone
        except Exception:
            assert fast is None, [(t.name, t.shape) for t in request.inputs]
            continue
        if fast is not None:
            accepted += 1
            assert fast[1] == slow[1] and fast[2] == slow[2]
            assert fast[0].keys() == slow[0].keys()
            assert all(fast[0][k] is slow[0][k] for k in fast[0])
    plain = "-1" not in text and "reshape" not in text and "optional" not in text
    assert (accepted > 0) == plain  # the plain model takes the fast path


def test_scatter_gives_each_request_its_rows():
    mv = model(PLAIN)
    sizes = [1, 2, 1]
    requests = []
    for n, outs in zip(sizes, [[], ["Y"], ["Y", "X"]]):
        req = InferRequest("m", "", f"id{n}", [], [RequestedOutput(o) for o in outs])
        requests.append(PendingRequest(req, None, {}, n))
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    y = np.arange(4, dtype=np.int32).reshape(4, 1)
    mv._scatter_outputs(requests, {"X": x, "Y": y}, 4)
    first, second, third = (p.response for p in requests)
    assert [t.name for t in first.outputs] == ["X", "Y"]  # config order when none asked
    np.testing.assert_array_equal(first.outputs[0].data, x[:1])
    assert first.outputs[0].shape == [1, 2] and first.outputs[0].datatype == "FP32"
    assert [t.name for t in second.outputs] == ["Y"]
    np.testing.assert_array_equal(second.outputs[0].data, y[1:3])
    assert second.outputs[0].data.base is not None  # a view
    assert [t.name for t in third.outputs] == ["Y", "X"]
    np.testing.assert_array_equal(third.outputs[1].data, x[3:])
    assert (second.model_name, second.model_version, second.id) == ("m", "1", "id2")

    # one row each: the same rows through numpy's split
    requests = [PendingRequest(InferRequest("m", "", "", [], []), None, {}, 1) for _ in range(4)]
    mv._scatter_outputs(requests, {"X": x, "Y": y}, 4)
    for i, p in enumerate(requests):
        np.testing.assert_array_equal(p.response.outputs[0].data, x[i:i + 1])
        assert p.response.outputs[1].shape == [1, 1]



def test_walk_meets_the_errors_in_cores_order():
    """Core's order and texts: a tensor named twice, an output the model
    lacks, how many inputs came, then each input (the model lookups carry
    no request id)."""
    mv = model(PLAIN)

    def error(inputs, outputs=()):
        request = InferRequest("m", "", "r1", inputs, [RequestedOutput(o) for o in outputs], {})
        with pytest.raises(ServerError) as err:
            mv._path.walk(request)
        return err.value.message

    a, b = tensor("A", "FP32", [1, 2]), tensor("B", "INT32", [1, 2, 3])
    c = tensor("C", "FP32", [1, 2])
    assert error([a, b, c]) == (
        "[request id: r1] expected 2 inputs but got 3 inputs for model 'm'. Got input(s) "
        "['A','B','C'], but missing required input(s) []. Please provide all required input(s).")
    assert error([a, c]) == "unexpected inference input 'C' for model 'm'"
    assert error([a, c], ["NOPE"]) == "unexpected inference output 'NOPE' for model 'm'"
    assert error([a, a, c], ["NOPE"]) == "[request id: r1] input 'A' already exists in request"
    assert error([a, b], ["X", "X"]) == "[request id: r1] output 'X' already exists in request"


def test_a_plain_record_gets_its_outputs_and_the_general_response_on_demand():
    """A record's response is its backend's outputs as they are (its
    protocol writes the answer); plain_response is the InferResponse the
    same outputs make for a request that asked the same."""
    from pyserver.engine.types import PlainPending

    mv = model(PLAIN)
    path = mv._path
    x = np.ones(2, np.float64)  # not the config's FP32: typed by its array
    y = np.array([3], np.int32)
    record = PlainPending(None, {}, 1, "r9", ["Y", "X"])
    assert path.response(record, {"X": x, "Y": y}, None) == {"X": x, "Y": y}
    assert path.response(record, {"X": x}, {"p": 1}) == ({"X": x}, {"p": 1})
    made = path.plain_response("r9", ["Y", "X"], {"X": x, "Y": y}, {"p": 1})
    req = InferRequest("m", "", "r9", [], [RequestedOutput("Y"), RequestedOutput("X")])
    twin = path.response(PendingRequest(req, None, {}, 1), {"X": x, "Y": y}, {"p": 1})
    assert [(t.name, t.datatype, t.shape) for t in made.outputs] == \
        [(t.name, t.datatype, t.shape) for t in twin.outputs] == [("Y", "INT32", [1]),
                                                                   ("X", "FP64", [2])]
    assert (made.id, made.parameters) == (twin.id, twin.parameters) == ("r9", {"p": 1})
    every = path.plain_response("", None, {"X": x, "Y": y}, None)
    assert [t.name for t in every.outputs] == ["X", "Y"]  # none named: config order
