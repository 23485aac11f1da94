"""engine/worker_io.pyx: a Python-model worker's requests built over the
input region and its answers written into the output region, checked
against the server's side of the same regions (engine/region_io.pyx)."""

import os

import numpy as np
import pytest

from pyserver.backends.python import channel, runner
from pyserver.backends.python import triton_python_backend_utils as pb
from pyserver.engine.region_io import pack_inputs, read_results
from pyserver.engine.worker_io import requests_in, responses_out

DTYPES = {8: np.dtype(np.int32), 9: np.dtype(np.int64), 11: np.dtype(np.float32),
          12: np.dtype(np.float64)}
BYTES = 13
AGAIN = ("again",)


@pytest.fixture
def regions():
    """A writer's and a reader's mapping of one region, as the two processes have."""
    fd = channel.create_fd("memfd" if hasattr(os, "memfd_create") else "file", "test")
    writer = channel.Region(fd, 4096, reserve=True)
    reader = channel.Region(os.dup(fd), 4096, reserve=False)
    yield writer, reader
    writer.close()
    reader.close()


def _items(packed, ids=("a", "b")):
    return [(rid, 0, 0, 0, "{}", ["OUT"], inputs, None, 0) for rid, inputs in zip(ids, packed)]


def _requests(items, mm, copy=False):
    return requests_in(items, mm, DTYPES, copy, pb.Tensor._wrap, pb.InferenceRequest._incoming,
                       "m", 1)


def test_inputs_are_views_of_the_region(regions):
    writer, reader = regions
    big = np.arange(3000, dtype=np.float32).reshape(3, 1000)  # grows the region
    names = np.array([b"x", b"yz"], dtype=np.object_)
    packed = pack_inputs(writer, [{"X": big}, {"X": big[:1], "S": names}],
                         {"X": 11, "S": BYTES}, lambda a: 9, BYTES)
    reader.follow(writer.size)
    first, second = _requests(_items(packed), reader.mm)
    assert (first.request_id(), second.request_id()) == ("a", "b")
    assert first.model_name() == "m" and second._index == 1
    x = pb.get_input_tensor_by_name(first, "X")
    np.testing.assert_array_equal(x.as_numpy(), big)
    assert x.triton_dtype() == 11 and x.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(pb.get_input_tensor_by_name(second, "X").as_numpy(), big[:1])
    assert pb.get_input_tensor_by_name(second, "S").as_numpy() is names  # BYTES travel pickled
    # A view: what the region holds is what the model sees, no copy made.
    writer.mm[0:4] = np.float32(-1).tobytes()
    assert x.as_numpy()[0, 0] == -1
    # It keeps its mapping alive after the reader maps the region anew.
    writer.ensure(writer.size * 4)
    reader.follow(writer.size)
    assert x.as_numpy()[2, 999] == 2999


def test_a_decoupled_models_inputs_are_copies(regions):
    writer, reader = regions
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    packed = pack_inputs(writer, [{"X": data}], {"X": 9}, None, BYTES)
    (request,) = _requests(_items(packed, ["a"]), reader.mm, copy=True)
    writer.mm[0:8] = np.int64(99).tobytes()
    np.testing.assert_array_equal(request.inputs()[0].as_numpy(), data)


def test_empty_and_scalar_shaped_inputs(regions):
    writer, reader = regions
    packed = pack_inputs(writer, [{"E": np.zeros((0, 4), np.float32),
                                   "S": np.array(5.5, np.float64)}], {"E": 11, "S": 12}, None,
                         BYTES)
    (request,) = _requests(_items(packed, ["a"]), reader.mm)
    empty, scalar = (t.as_numpy() for t in request.inputs())
    assert empty.shape == (0, 4) and empty.dtype == np.float32
    assert scalar.shape == () and scalar[()] == 5.5


@pytest.mark.parametrize("entry", [
    ("X", 11, (2, 3), 0, 5, None),          # 5 elements for a shape of 6
    ("X", 11, (2,), 4096 - 4, 2, None),     # past the end of the region
    ("X", 11, (2,), -64, 2, None),          # before its start
])
def test_inputs_that_do_not_fit_the_region_are_refused(regions, entry):
    _, reader = regions
    with pytest.raises(ValueError):
        _requests([("a", 0, 0, 0, "{}", [], [entry], None, 0)], reader.mm)


def _answer(requests, responses, writer, offset=0):
    return responses_out(responses, requests, writer, offset, BYTES,
                         pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, AGAIN,
                         runner.MISSING_RESPONSE, runner.bytes_array)


def _request(wanted):
    return pb.InferenceRequest._incoming(0, "r", 0, 0, 0, "{}", wanted, [], "m", 1)


def test_answers_round_trip_through_the_output_region(regions):
    writer, reader = regions
    big = np.arange(4096, dtype=np.float64)  # 32 KiB: the region grows for it
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    words = np.array(["é", b"b"], dtype=np.object_)
    requests = [_request(["BIG", "STRIDED", "WORDS"]), _request(["BIG"])]
    responses = [
        pb.InferenceResponse([pb.Tensor("BIG", big), pb.Tensor("STRIDED", strided),
                              pb.Tensor("WORDS", words), pb.Tensor("UNASKED", big)]),
        pb.InferenceResponse([pb.Tensor("BIG", big[:3])], parameters={"p": 1}),
    ]
    end, encoded = _answer(requests, responses, writer, offset=10)
    assert writer.size >= end > big.nbytes
    names = [[t[0] for t in e[1]] for e in encoded]
    assert names == [["BIG", "STRIDED", "WORDS"], ["BIG"]]  # UNASKED pruned, as Triton does
    assert all(t[3] % 64 == 0 and t[3] >= 10 for e in encoded for t in e[1] if t[3] >= 0)
    reader.follow(writer.size)
    results = read_results(reader.mm, encoded, DTYPES, None)
    np.testing.assert_array_equal(results[0]["BIG"], big)
    np.testing.assert_array_equal(results[0]["STRIDED"], strided)
    assert results[0]["WORDS"].tolist() == ["é".encode(), b"b"]
    outputs, params = results[1]
    np.testing.assert_array_equal(outputs["BIG"], big[:3])
    assert params == {"p": 1}


def test_errors_missing_answers_and_released_requests(regions):
    writer, _ = regions
    released = _request(["OUT"])
    released.set_release_flags(pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    failed = pb.InferenceResponse(error=pb.TritonError("no", pb.TritonError.INVALID_ARG))
    end, encoded = _answer([_request(["OUT"]), _request(["OUT"]), released],
                           [failed, None, None], writer)
    assert end == 0
    assert encoded == [("err", "INVALID_ARG", "no"), ("err", "INTERNAL", runner.MISSING_RESPONSE),
                       AGAIN]
