"""The pieces of the Python backend's thread mode and hang watch that need
no server: settings, the pb_utils router, model folders on sys.path."""

import sys
import threading

import pytest

from pyserver._proto import ModelConfig
from pyserver.backends.python import triton_python_backend_utils as pb
from pyserver.backends.python.in_process import _Router, _SysPath, execution_mode
from pyserver.backends.python.instance import execute_timeout
from pyserver.kernel.errors import Code, ServerError


def config_with(key=None, value=None):
    config = ModelConfig(name="m")
    if key is not None:
        config.parameters[key].string_value = value
    return config


@pytest.mark.parametrize("value, mode", [(None, "process"), ("process", "process"),
                                         ("thread", "thread"), (" Thread ", "thread")])
def test_execution_mode(value, mode):
    config = config_with("pyserver_execution_mode", value) if value is not None else config_with()
    assert execution_mode(config) == mode


@pytest.mark.parametrize("value, seconds", [(None, 0.0), ("0", 0.0), ("30", 30.0), ("0.5", 0.5)])
def test_execute_timeout(value, seconds):
    config = config_with("pyserver_execute_timeout_seconds", value) if value is not None \
        else config_with()
    assert execute_timeout(config) == seconds


@pytest.mark.parametrize("key, value", [("pyserver_execution_mode", "fiber"),
                                        ("pyserver_execute_timeout_seconds", "-1"),
                                        ("pyserver_execute_timeout_seconds", "inf"),
                                        ("pyserver_execute_timeout_seconds", "nan"),
                                        ("pyserver_execute_timeout_seconds", "soon")])
def test_bad_settings(key, value):
    read = execution_mode if key == "pyserver_execution_mode" else execute_timeout
    with pytest.raises(ServerError) as info:
        read(config_with(key, value))
    assert info.value.code == Code.INVALID_ARG
    assert f"model 'm': parameter '{key}'" in info.value.message


class FakeInstance:
    def __init__(self, name):
        self.instance_name = name
        self.version_dir = f"/models/{name}/1"


def test_the_router_finds_the_instance_a_call_comes_from():
    assert pb._runtime is None, "another test left pb_utils linked"
    router = _Router()
    with pytest.raises(pb.TritonModelException):
        router.current()
    a, b = FakeInstance("a"), FakeInstance("b")
    router.add(a)
    try:
        assert pb._runtime is router and sys.modules["triton_python_backend_utils"] is pb
        assert router.current() is a  # the only one: any thread may call
        assert router.model_dir == "/models/a/1"
        router.add(b)
        with pytest.raises(pb.TritonModelException, match="belongs to no instance"):
            router.current()  # two, and this thread is neither's
        assert router.model_dir == ""
        previous = router.enter(b)
        assert previous is None and router.current() is b
        seen = []
        t = threading.Thread(target=lambda: seen.append(router.enter(a)))
        t.start()
        t.join()
        assert seen == [None] and router.current() is b  # thread-local
        router.leave(previous)
        router.remove(b)
        assert router.current() is a
    finally:
        router.remove(a)
        router.remove(b)
    assert pb._runtime is None and "triton_python_backend_utils" not in sys.modules


def test_model_folders_stay_on_sys_path_while_an_instance_uses_them(tmp_path):
    paths = _SysPath()
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    sys.path.append(theirs)
    try:
        first = paths.add(mine, theirs)
        second = paths.add(mine)
        assert first == [mine] and second == [mine]  # a folder already there is not ours
        assert sys.path.count(mine) == 1
        paths.drop(first)
        assert mine in sys.path
        paths.drop(second)
        assert mine not in sys.path and theirs in sys.path
    finally:
        sys.path.remove(theirs)
