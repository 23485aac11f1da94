"""The server hands its services down (kernel/context.py): a backend that
declares Capability.SERVER_CONTEXT is built with the running server's
context, one that does not is built as before, and two servers in one
process never see each other's."""

import numpy as np
import tritonclient.http as httpclient

from pyserver.backends import register_backend
from pyserver.backends.base import Capability

CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
default_model_filename: "model"
"""


class ContextBackend:
    """Records the context it was built with."""

    capabilities = Capability.SERVER_CONTEXT
    built: list = []

    def __init__(self, model_path, config, instance_name, device, threads, context=None):
        self.context = context
        ContextBackend.built.append((config.name, context))

    def execute(self, inputs):
        return {"OUT": inputs["IN"] + 1}


class PlainBackend:
    """Knows nothing of contexts: the five arguments only."""

    built: list = []

    def __init__(self, model_path, config, instance_name, device, threads):
        PlainBackend.built.append(config.name)

    def execute(self, inputs):
        return {"OUT": inputs["IN"] * 2}


def _repo(root, models):
    for name, backend in models:
        d = root / name
        (d / "1").mkdir(parents=True)
        (d / "1" / "model").write_text("")
        (d / "config.pbtxt").write_text(CONFIG.format(name=name, backend=backend))
    return root


def _infer(server, model, value):
    client = httpclient.InferenceServerClient(server.url)
    inp = httpclient.InferInput("IN", [1], "FP32")
    inp.set_data_from_numpy(np.array([value], np.float32))
    return client.infer(model, [inp]).as_numpy("OUT")[0]


def test_backends_get_their_own_servers_context(tmp_path, start_server):
    register_backend("context_backend", ContextBackend)
    register_backend("plain_backend", PlainBackend)
    ContextBackend.built.clear()
    PlainBackend.built.clear()
    first = start_server(_repo(tmp_path / "a", [("ctx_a", "context_backend"),
                                                ("plain", "plain_backend")]))
    second = start_server(_repo(tmp_path / "b", [("ctx_b", "context_backend")]))
    contexts = dict(ContextBackend.built)
    assert PlainBackend.built == ["plain"]  # built without a context, as before
    for running, name in ((first, "ctx_a"), (second, "ctx_b")):
        context = contexts[name]
        server = running.server
        assert context is server.context
        assert context.loop is running.loop
        assert context.requests is server
        assert context.custom_metrics is server.custom_metrics
        assert context.host_memory is server.host_memory
        assert context.device_memory is server.device_memory
        assert context.tracer is server.tracer
        assert context.answer == server.resolve_now
        # the model version is handed the same one
        assert running.run(lambda s=server, n=name: s.models.resolve(n, "").context) is context
    assert contexts["ctx_a"] is not contexts["ctx_b"]
    assert _infer(first, "ctx_a", 1.0) == 2.0
    assert _infer(first, "plain", 3.0) == 6.0
    assert _infer(second, "ctx_b", 5.0) == 6.0
