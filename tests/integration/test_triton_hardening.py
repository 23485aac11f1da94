"""Triton 2.58-2.69's hardening rules that ride on every infer call, over
both protocols as tritonclient sends them: duplicate input and output names
(core's texts, request id prefixed) and reserved parameter keys. (The other
rules have their own suites: chunk cap and decompressed size in
test_http_extensions.py, graceful shutdown in test_shutdown.py, names leaving
the repository and shm bounds in tests/robustness/test_security.py, deferred
unregister in tests/unit/test_http_shared_memory.py.)"""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.testing import write_add_sub
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)


@pytest.fixture
def served(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path)
    s = start_grpc(tmp_path)
    return {httpclient: s.url, grpcclient: s.grpc_url}, s


def inputs(module, duplicate=False):
    names = ["INPUT0", "INPUT1"] + (["INPUT1"] if duplicate else [])
    out = []
    for n in names:
        t = module.InferInput(n, [1, 16], "FP32")
        t.set_data_from_numpy(np.ones((1, 16), np.float32))
        out.append(t)
    return out


def refused(module, url, **kwargs):
    client = module.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException) as err:
            client.infer("add_sub", kwargs.pop("ins", None) or inputs(module), **kwargs)
        return err.value.status(), err.value.message()
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_duplicate_names_and_reserved_keys(served, module):
    urls, s = served
    url = urls[module]
    bad = "400" if module is httpclient else "StatusCode.INVALID_ARGUMENT"
    twice = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT0")]
    assert refused(module, url, outputs=twice, request_id="r1") == (
        bad, "[request id: r1] output 'OUTPUT0' already exists in request")
    assert refused(module, url, outputs=twice) == (
        bad, "[request id: <id_unknown>] output 'OUTPUT0' already exists in request")
    assert refused(module, url, ins=inputs(module, duplicate=True)) == (
        bad, "[request id: <id_unknown>] input 'INPUT1' already exists in request")
    status, message = refused(module, url, parameters={"triton_mine": 1})
    assert status == bad
    assert message.startswith("parameter keys starting with 'triton_' are reserved for Triton "
                              "usage")
    client = module.InferenceServerClient(url)
    r = client.infer("add_sub", inputs(module), parameters={"mine": 1})  # still serving
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * np.ones((1, 16), np.float32))
    client.close()
    stats = s.run(s.server.model_statistics, "add_sub")["inference_stats"]
    assert stats["success"]["count"] == 1
