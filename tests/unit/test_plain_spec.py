"""engine/plain_spec.pyx: the plain case of a request, one set of rules for the
protocols' direct readers (C views of what they parsed) and RequestPath.check
(an InferRequest's tensors). Which requests take it and which go to the
general walk; the walk's agreement is tests/unit/test_request_path.py's."""

import numpy as np
import pytest

from pyserver.config import normalize, parse_config_text
from pyserver.engine import CompletionQueue
from pyserver.engine.plain_spec import PlainSpec
from pyserver.kernel.context import ServerContext
from pyserver.model.version import ModelVersion

BATCHING = PlainSpec([("A", "FP32", (2,)), ("B", "INT32", (2, 3))], ["X", "Y"], 4)
NOT_BATCHING = PlainSpec([("A", "FP32", (2,))], ["X"], 0)


@pytest.mark.parametrize("inputs, outputs, batch_size", [
    ([("A", "FP32", [1, 2]), ("B", "INT32", [1, 2, 3])], [], 1),
    ([("B", "INT32", [4, 2, 3]), ("A", "FP32", [4, 2])], ["Y", "X"], 4),  # any order
    ([("A", "FP32", [3, 2]), ("B", "INT32", [3, 2, 3])], ["X"], 3),
])
def test_a_plain_request_gives_its_batch_size(inputs, outputs, batch_size):
    assert BATCHING.check(inputs, outputs) == batch_size


@pytest.mark.parametrize("inputs, outputs", [
    ([("A", "FP32", [1, 2])], []),  # an input missing
    ([("A", "FP32", [1, 2]), ("A", "FP32", [1, 2])], []),  # one input twice
    ([("A", "FP32", [1, 2]), ("C", "INT32", [1, 2, 3])], []),  # not the model's
    ([("A", "FP16", [1, 2]), ("B", "INT32", [1, 2, 3])], []),  # another datatype
    ([("A", "FP32", [1, 3]), ("B", "INT32", [1, 2, 3])], []),  # another shape
    ([("A", "FP32", [2]), ("B", "INT32", [1, 2, 3])], []),  # no batch dimension
    ([("A", "FP32", [0, 2]), ("B", "INT32", [0, 2, 3])], []),  # no rows
    ([("A", "FP32", [5, 2]), ("B", "INT32", [5, 2, 3])], []),  # past max_batch_size
    ([("A", "FP32", [1, 2]), ("B", "INT32", [2, 2, 3])], []),  # batch sizes differ
    ([("A", "FP32", [1, 2]), ("B", "INT32", [1, 2, 3])], ["Z"]),  # an output it lacks
    ([("A", "FP32", [1, 2]), ("B", "INT32", [1, 2, 3])], ["X", "X"]),  # asked twice
    # what the walk reads as Python objects, not the plain case's types
    ([("A", "FP32", [np.int64(1), 2]), ("B", "INT32", [1, 2, 3])], []),
    ([("A", "FP32", (1, 2)), ("B", "INT32", [1, 2, 3])], []),
    ([("A", "FP32", [1, 2]), ("B", "INT32", [1, 2, 1 << 70])], []),
    ([(b"A", "FP32", [1, 2]), ("B", "INT32", [1, 2, 3])], []),
])
def test_anything_else_goes_to_the_general_walk(inputs, outputs):
    assert BATCHING.check(inputs, outputs) is None


def test_a_model_that_does_not_batch_takes_its_dims_as_they_are():
    assert NOT_BATCHING.check([("A", "FP32", [2])], ["X"]) == 0
    assert NOT_BATCHING.check([("A", "FP32", [1, 2])], []) is None


def test_past_64_inputs_every_request_goes_to_the_walk():
    # the readers keep a bit per input
    spec = PlainSpec([(f"I{i}", "FP32", (1,)) for i in range(65)], ["X"], 0)
    assert spec.check([(f"I{i}", "FP32", [1]) for i in range(65)], []) is None


def test_the_request_path_and_the_direct_readers_share_the_models_rules():
    config = normalize(parse_config_text("""
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""), "m")
    mv = ModelVersion("m", 1, config, "/nonexistent/1", ServerContext(CompletionQueue()))
    assert mv.plain_spec is mv._path.plain
    assert mv.plain_spec.check([("A", "FP32", [4, 2])], ["X"]) == 4
    variable = normalize(parse_config_text("""
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""), "m")
    assert ModelVersion("m", 1, variable, "/nonexistent/1",
                        ServerContext(CompletionQueue())).plain_spec is None
