"""The Python half of sequence batching (pyserver/model/sequence.py): the
scheduler's settings from the config, iterative sequences' own IDs, and
implicit state kept per sequence."""

import numpy as np
import pytest

from pyserver.config import parse_config_text
from pyserver.engine.types import PendingRequest
from pyserver.kernel.errors import ServerError
from pyserver.kernel.types import InferRequest
from pyserver.model.sequence import SequenceControls

BASE = '''
name: "m"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{ {sb} }}
'''


def controls(sb: str, mbs: int = 4, model_dir=None) -> SequenceControls:
    return SequenceControls(parse_config_text(BASE.format(mbs=mbs, sb=sb)), model_dir)


def pending(params: dict) -> PendingRequest:
    return PendingRequest(InferRequest("m", "", "", [], [], params), None, {}, 1)


def test_scheduler_settings_of_each_strategy():
    config = parse_config_text(BASE.format(mbs=4, sb='direct { max_queue_delay_microseconds: 500 '
                                                     'minimum_slot_utilization: 0.5 }'))
    settings = SequenceControls(config).scheduler_config(config)
    assert settings["strategy"] == "direct"
    assert settings["max_queue_delay_microseconds"] == 500
    assert settings["minimum_slot_utilization"] == 0.5
    assert settings["iterative"] is False
    config = parse_config_text(BASE.format(
        mbs=4, sb='iterative_sequence: true oldest { max_candidate_sequences: 8 '
                  'preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 100 }'))
    settings = SequenceControls(config).scheduler_config(config)
    assert settings["strategy"] == "oldest" and settings["iterative"] is True
    assert settings["max_candidate_sequences"] == 8
    assert settings["preferred_batch_size"] == [2]


def test_iterative_requests_without_an_id_get_their_own():
    seq = controls("iterative_sequence: true")
    shared = {}  # a decoder may hand every request the same empty dict
    first, second = InferRequest("m", "", "", [], [], shared), InferRequest("m", "", "", [], [], shared)
    assert seq.prepare(first, {}, True)[:2] == (1, 1)  # ID 1, START
    assert seq.prepare(second, {}, True)[:2] == (2, 1)
    assert shared == {}
    assert first.parameters == {"sequence_id": 1, "sequence_start": True}
    # A client's own ID is kept, with its flags.
    own = InferRequest("m", "", "", [], [], {"sequence_id": 77})
    assert seq.prepare(own, {}, True)[:2] == (77, 0)
    # Without iterative_sequence a request needs an ID (the scheduler says so).
    assert controls("").prepare(InferRequest("m", "", "", [], [], {}), {}, True)[0] == 0


def test_implicit_state_is_fed_kept_and_forgotten():
    seq = controls('state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_FP32 '
                   'dims: [ -1, 2 ] } ]')
    start = pending({"sequence_id": 5, "sequence_start": True})
    seq.feed_states([start])
    # No initial_state: zeros, variable dimensions 1, with the batch dimension.
    assert start.arrays["S"].shape == (1, 1, 2) and not start.arrays["S"].any()
    out = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    seq.keep_states([start], lambda i: {"S_OUT": out, "OUTPUT": None})
    out[...] = -1  # the batch's buffer is reused: the state was copied
    nxt = pending({"sequence_id": 5})
    seq.feed_states([nxt])
    assert nxt.arrays["S"].tolist() == np.arange(6).reshape(1, 3, 2).tolist()
    # A failed request keeps what its sequence had; a missing output fails.
    seq.keep_states([nxt], lambda i: None)
    with pytest.raises(ServerError, match="did not produce the state output 'S_OUT'"):
        seq.keep_states([nxt], lambda i: {"OUTPUT": out})
    # END forgets it; a new START begins from the initial state again.
    seq.keep_states([pending({"sequence_id": 5, "sequence_end": True})], lambda i: {})
    assert 5 not in seq._values
    again = pending({"sequence_id": 5})
    seq.feed_states([again])
    assert not again.arrays["S"].any()


def test_states_of_sequences_idle_for_long_are_dropped(monkeypatch):
    seq = controls('max_sequence_idle_microseconds: 1000 state [ { input_name: "S" '
                   'output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]', mbs=0)
    clock = [100.0]
    monkeypatch.setattr("pyserver.model.sequence.time.monotonic", lambda: clock[0])
    seq.keep_states([pending({"sequence_id": 1})], lambda i: {"S_OUT": np.array([3], np.int32)})
    clock[0] += 1.0  # far past twice the idle limit (2 ms)
    seq.keep_states([pending({"sequence_id": 2})], lambda i: {"S_OUT": np.array([4], np.int32)})
    seq.feed_states([pending({"sequence_id": 3, "sequence_start": True})])
    assert set(seq._values) == {2}


def test_initial_state_from_a_data_file(tmp_path):
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "init").write_bytes(np.array([7, 8], np.int64).tobytes())
    seq = controls('state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT64 '
                   'dims: [ 2 ] initial_state { data_type: TYPE_INT64 dims: [ 2 ] '
                   'data_file: "init" } } ]', mbs=0, model_dir=str(tmp_path))
    p = pending({"sequence_id": 1, "sequence_start": True})
    seq.feed_states([p])
    assert p.arrays["S"].tolist() == [7, 8]
    (tmp_path / "initial_state" / "init").write_bytes(b"\0" * 12)
    with pytest.raises(ServerError, match="does not fit the state"):
        controls('state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT64 '
                 'dims: [ 2 ] initial_state { data_type: TYPE_INT64 dims: [ 2 ] '
                 'data_file: "init" } } ]', mbs=0, model_dir=str(tmp_path))
