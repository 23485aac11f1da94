"""A Python model's worker scheduling policy: the setting's precedence and
"auto"'s rule for leaving SCHED_BATCH (backends/python/backend.py)."""

import pytest

from pyserver._proto import ModelConfig
from pyserver.backends.python.backend import StartDelayWatch, worker_scheduling
from pyserver.kernel.errors import ServerError


def config_with(value=None):
    config = ModelConfig(name="m")
    if value is not None:
        config.parameters["pyserver_worker_scheduling"].string_value = value
    return config


def test_the_parameter_wins_over_the_environment_which_wins_over_auto():
    assert worker_scheduling(config_with(), {}) == "auto"
    assert worker_scheduling(config_with(), {"PYSERVER_PYTHON_SCHED": "normal"}) == "normal"
    assert worker_scheduling(config_with(" BATCH "), {"PYSERVER_PYTHON_SCHED": "normal"}) == \
        "batch"
    with pytest.raises(ServerError, match="must be \"auto\", \"batch\" or \"normal\", got \"rt\""):
        worker_scheduling(config_with("rt"), {})


def test_late_starts_past_the_limit_within_one_window_trip_the_watch():
    watch = StartDelayWatch(window=10, late_ns=1000, limit=2)
    assert not watch.note(1000)  # at the bound: not late
    assert not watch.note(5000)
    assert not watch.note(5000)
    assert watch.note(5000)  # the third late one passes a limit of 2


def test_a_window_forgets_the_late_starts_before_it():
    watch = StartDelayWatch(window=10, late_ns=1000, limit=2)
    for delay in [5000, 5000] + [10] * 8:  # 2 late in a window of 10
        assert not watch.note(delay)
    assert (watch.groups, watch.late) == (0, 0)
    for delay in [5000, 5000] + [10] * 8:  # again, in the next window
        assert not watch.note(delay)
    assert not watch.note(5000)


def test_the_default_rule_sits_between_the_measured_cases():
    # 0.9 % late (2 instances, dynamic batching, HTTP c16 under SCHED_BATCH)
    # trips it within a window; 0.2 % (unbatched gRPC, where SCHED_BATCH pays)
    # never does.
    tripped = StartDelayWatch()
    assert any(tripped.note(2_000_000 if i % 111 == 0 else 50_000) for i in range(10_000))
    kept = StartDelayWatch()
    assert not any(kept.note(2_000_000 if i % 500 == 0 else 50_000) for i in range(100_000))
