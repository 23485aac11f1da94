"""engine/worker_io.pyx: a Python-model worker's requests built over the
input region and its answers written into the output region, checked
against the server's side of the same regions (engine/region_io.pyx)."""

import json
import os

import numpy as np
import pytest

from pyserver.backends.python import channel, runner
from pyserver.backends.python import triton_python_backend_utils as pb
from pyserver.engine.region_io import pack_batches, pack_inputs, read_results
from pyserver.engine.types import InferRequest, PendingRequest, PlainPending, RequestedOutput
from pyserver.engine.worker_io import answers_fit, requests_in, responses_out

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
    return requests_in(items, mm, DTYPES, copy, pb.InferenceRequest, pb.InferenceTrace,
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


def test_answers_fit_vouches_only_for_the_plain_answer():
    # What it declines goes to runner.check_responses, which decides (and
    # words every error); what it accepts, that check would accept too.
    reschedule = pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    requests = [_request(["OUT"]), _request(["OUT"])]
    plain = [pb.InferenceResponse([]), pb.InferenceResponse([])]
    assert answers_fit(plain, requests, reschedule)
    runner.check_responses(plain, requests)
    declined = [tuple(plain), plain[:1], [plain[0], None], [plain[0], "text"], None]
    for answer in declined:
        assert not answers_fit(answer, requests, reschedule)
    released = [_request(["OUT"]), _request(["OUT"])]
    released[1].set_release_flags(reschedule)
    assert not answers_fit(plain, released, reschedule)
    with pytest.raises(runner.Reported, match="reschduled request"):
        runner.check_responses(plain, released)
    sent = [_request(["OUT"]), _request(["OUT"])]
    sent[0]._sender = pb.InferenceResponseSender(sent[0])
    assert not answers_fit(plain, sent, reschedule)


def test_answers_of_subclasses_and_tampered_lists(regions):
    # A model's own subclasses of pb_utils' classes are answers like any
    # other; a list of outputs changed behind the response's back to hold
    # something else fails the batch with an error, not the worker.
    writer, reader = regions

    class Named(pb.Tensor):
        pass

    class Answer(pb.InferenceResponse):
        pass

    requests = [_request(["OUT"])]
    data = np.arange(4, dtype=np.float32)
    responses = [Answer([Named("OUT", data)])]
    assert answers_fit(responses, requests, pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    end, encoded = _answer(requests, responses, writer)
    reader.follow(writer.size)
    (outputs,) = read_results(reader.mm, encoded, DTYPES, None)
    np.testing.assert_array_equal(outputs["OUT"], data)
    tampered = pb.InferenceResponse([pb.Tensor("OUT", data)])
    tampered.output_tensors().append("not a tensor")
    with pytest.raises(TypeError):
        _answer(requests, [tampered], writer)


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


# -- worker_wire: the common messages as bytes rather than pickled tuples ----------------

def _pending(queue_id, arrays, request_id="r", parameters=None, outputs=None, trace=None):
    request = InferRequest("m", id=request_id, parameters=parameters, timeout_us=7,
                           outputs=[RequestedOutput(n) for n in outputs or ()])
    pending = PendingRequest(request, None, arrays, 1)
    pending.id = queue_id
    pending.trace = trace
    return pending


def _pack(writer, batches, codes):
    return pack_batches(writer, batches, codes, lambda a: 9, BYTES, ["OUT0", "OUT1"], ())


def test_plain_batches_travel_as_bytes_and_build_the_same_requests(regions):
    writer, reader = regions
    big = np.arange(3000, dtype=np.float32).reshape(3, 1000)  # grows the region
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]  # not row-major
    batches = [
        [_pending(11, {"X": big, "Y": strided}, "a", outputs=["OUT1"]),
         _pending(12, {"X": big[:1], "C": np.array([7], np.int64)}, "b",
                  parameters={"sequence_id": 42, "sequence_start": True, "user": "é"},
                  trace={"id": 5})],
        [_pending(13, {"E": np.zeros((0, 4), np.float32), "S": np.array(5.5)}, "")],
    ]
    groups = _pack(writer, batches, {"X": 11, "Y": 8, "E": 11, "S": 12})
    assert all(type(g) is bytes for g in groups)
    reader.follow(writer.size)
    a, b = _requests(groups[0], reader.mm)
    (c,) = _requests(groups[1], reader.mm)
    assert [r.request_id() for r in (a, b, c)] == ["a", "b", ""]
    assert [r._key for r in (a, b, c)] == [11, 12, 13] and (a._index, b._index) == (0, 1)
    assert a.requested_output_names() == ["OUT1"]
    assert b.requested_output_names() == ["OUT0", "OUT1"]  # none named: all of them
    assert b.correlation_id() == 42 and b.flags() == pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert json.loads(b.parameters()) == {"user": "é"} and a.parameters() == "{}"
    assert b._trace is not None and a._trace is None and a.timeout() == 7
    x = pb.get_input_tensor_by_name(a, "X")
    np.testing.assert_array_equal(x.as_numpy(), big)
    assert x.triton_dtype() == 11
    np.testing.assert_array_equal(pb.get_input_tensor_by_name(a, "Y").as_numpy(), strided)
    np.testing.assert_array_equal(pb.get_input_tensor_by_name(b, "X").as_numpy(), big[:1])
    assert pb.get_input_tensor_by_name(b, "C").triton_dtype() == 9  # typed by the callback
    empty, scalar = (t.as_numpy() for t in c.inputs())
    assert empty.shape == (0, 4) and scalar.shape == () and scalar[()] == 5.5
    # The same batches as tuples build the same requests (the layouts agree).
    tuples = [[(r.request_id(), r.correlation_id(), r.flags(), r.timeout(), r.parameters(),
                r.requested_output_names(), [(t.name(), t.triton_dtype(), t.as_numpy().shape,
                                              -1, 0, t.as_numpy()) for t in r.inputs()],
                r._key, 0) for r in (a, b)]]
    again = _requests(tuples[0], reader.mm)
    assert [(r.request_id(), r.correlation_id(), r.flags(), r.parameters()) for r in again] == \
        [(r.request_id(), r.correlation_id(), r.flags(), r.parameters()) for r in (a, b)]


def test_names_a_batch_repeats_are_read_once_and_others_as_sent(regions):
    """A name the previous request of the batch had is that same str (read
    once per batch), both ways; a name of the same length but other bytes,
    or in another place, is read as sent."""
    writer, reader = regions
    one = np.ones(2, np.float32)
    batch = [_pending(1, {"A0": one, "B0": one}, outputs=["OUT0", "OUT1"]),
             _pending(2, {"A0": one, "B0": one}, outputs=["OUT0", "OUT1"]),
             _pending(3, {"B0": one, "A1": one}, outputs=["OUT1", "OUT0"])]
    (group,) = _pack(writer, [batch], {"A0": 11, "B0": 11, "A1": 11})
    reader.follow(writer.size)
    a, b, c = _requests(group, reader.mm)
    assert [[t.name() for t in r.inputs()] for r in (a, b, c)] == \
        [["A0", "B0"], ["A0", "B0"], ["B0", "A1"]]
    assert [r.requested_output_names() for r in (a, b, c)] == \
        [["OUT0", "OUT1"], ["OUT0", "OUT1"], ["OUT1", "OUT0"]]
    assert all(x.name() is y.name() for x, y in zip(a.inputs(), b.inputs()))
    assert all(x is y for x, y in zip(a.requested_output_names(), b.requested_output_names()))
    requests = [_request(["X0", "Y0"]), _request(["X0", "Y0"]), _request(["Y0", "X1"])]
    responses = [pb.InferenceResponse([pb.Tensor(n, one) for n in r.requested_output_names()])
                 for r in requests]
    _, encoded = _answer(requests, responses, writer)
    reader.follow(writer.size)
    first, second, third = read_results(reader.mm, encoded, DTYPES, None)
    assert [list(r) for r in (first, second, third)] == [["X0", "Y0"], ["X0", "Y0"], ["Y0", "X1"]]
    assert all(x is y for x, y in zip(first, second))


@pytest.mark.parametrize("unusual", [
    {"arrays": {"S": np.array([b"x"], dtype=np.object_)}},  # BYTES travel pickled
    {"arrays": {"X": np.zeros(2, np.float32)}, "parameters": {"sequence_id": "corr-7"}},
])
def test_a_batch_that_does_not_fit_the_layout_travels_as_tuples(regions, unusual):
    writer, reader = regions
    plain = _pending(1, {"X": np.ones(2, np.float32)})
    other = _pending(2, unusual["arrays"], parameters=unusual.get("parameters"))
    groups = _pack(writer, [[plain], [other]], {"X": 11, "S": BYTES})
    assert all(type(g) is list for g in groups)  # one message, one layout
    reader.follow(writer.size)
    (r,) = _requests(groups[1], reader.mm)
    assert r.correlation_id() == unusual.get("parameters", {}).get("sequence_id", 0)


def test_a_truncated_group_is_refused(regions):
    writer, reader = regions
    (group,) = _pack(writer, [[_pending(1, {"X": np.ones(2, np.float32)})]], {"X": 11})
    reader.follow(writer.size)
    for cut in (1, 8, len(group) - 1):
        with pytest.raises(ValueError, match="ends early"):
            _requests(group[:cut], reader.mm)


def test_plain_answers_travel_as_bytes(regions):
    writer, reader = regions
    big = np.arange(4096, dtype=np.float64)  # 32 KiB: the region grows for it
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    requests = [_request(["BIG", "STRIDED"]), _request(["EMPTY"]), _request([])]
    responses = [
        pb.InferenceResponse([pb.Tensor("BIG", big), pb.Tensor("STRIDED", strided),
                              pb.Tensor("UNASKED", big)]),
        pb.InferenceResponse([pb.Tensor("EMPTY", np.zeros((2, 0), np.int64))]),
        pb.InferenceResponse([]),
    ]
    end, encoded = _answer(requests, responses, writer, offset=10)
    assert type(encoded) is bytes and writer.size >= end > big.nbytes
    reader.follow(writer.size)
    first, second, third = read_results(reader.mm, encoded, DTYPES, None)
    assert list(first) == ["BIG", "STRIDED"]  # UNASKED pruned, as Triton does
    np.testing.assert_array_equal(first["BIG"], big)
    np.testing.assert_array_equal(first["STRIDED"], strided)
    assert first["BIG"].base is None  # a copy, not a view of the region
    assert second["EMPTY"].shape == (2, 0) and third == {}
    with pytest.raises(ValueError, match="ends early"):
        read_results(reader.mm, encoded[:-3], DTYPES, None)


def test_tensors_of_more_than_32_dimensions_cross_both_ways(regions):
    writer, reader = regions
    deep = np.arange(2, dtype=np.int32).reshape((1,) * 39 + (2,))  # numpy 2 allows 64
    (group,) = _pack(writer, [[_pending(1, {"X": deep})]], {"X": 8})
    reader.follow(writer.size)
    (request,) = _requests(group, reader.mm)
    np.testing.assert_array_equal(request.inputs()[0].as_numpy(), deep)
    end, encoded = _answer([_request(["Y"])], [pb.InferenceResponse([pb.Tensor("Y", deep)])],
                           writer)
    reader.follow(writer.size)
    (outputs,) = read_results(reader.mm, encoded, DTYPES, None)
    np.testing.assert_array_equal(outputs["Y"], deep)


def test_plain_records_travel_with_their_id_and_outputs(regions):
    """A record (no InferRequest: engine/types.pyx PlainPending) builds the
    request its InferRequest twin would: its id, the outputs it named (all
    where none), no parameters, no sequence, no timeout."""
    writer, reader = regions
    x = np.arange(4, dtype=np.float32)
    named = PlainPending(None, {"X": x}, 1, "rec-1", ["OUT1"])
    named.id = 21
    unnamed = PlainPending(None, {"X": x * 2}, 1, "", None)
    unnamed.id = 22
    twin = _pending(23, {"X": x}, "rec-1", outputs=["OUT1"])
    twin.request.timeout_us = 0
    groups = _pack(writer, [[named, unnamed], [twin]], {"X": 11})
    assert all(type(g) is bytes for g in groups)
    reader.follow(writer.size)
    a, b = _requests(groups[0], reader.mm)
    (t,) = _requests(groups[1], reader.mm)
    assert [r._key for r in (a, b)] == [21, 22]
    assert (a.request_id(), b.request_id()) == ("rec-1", "")
    assert a.requested_output_names() == ["OUT1"]
    assert b.requested_output_names() == ["OUT0", "OUT1"]
    fields = (lambda r: (r.request_id(), r.correlation_id(), r.flags(), r.timeout(),
                         r.parameters(), r.requested_output_names(), r._trace))
    assert fields(a) == fields(t)
    np.testing.assert_array_equal(pb.get_input_tensor_by_name(b, "X").as_numpy(), x * 2)
