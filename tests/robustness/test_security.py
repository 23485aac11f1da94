"""Security sweeps (#27): every group of APIs restricted at once, and every
HTTP route and gRPC RPC tried without and with its key; names and config
overrides that try to leave the repository; shared-memory keys that name
files or links to them. (Settings that name files: test_tracing.py;
truncated regions: test_shared_memory.py; oversized shapes:
test_http_extensions.py and test_grpc.py.)"""

import http.client
import json
import os
import uuid

import grpc
import pytest

from pyserver._proto import message_class
from pyserver.frontends.grpc import PROTOCOL_GROUPS, GrpcFrontend
from pyserver.frontends.http import HttpFrontend, parse_restricted_api
from pyserver.frontends.http.routes import RESTRICTED_API_GROUPS
from pyserver.testing import write_add_sub

INFER = json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16],
                                "data": list(range(16))} for n in ("INPUT0", "INPUT1")]})
# (group, method, path, body): one request per route
HTTP_ROUTES = [
    ("health", "GET", "/v2/health/live", ""), ("health", "GET", "/v2/health/ready", ""),
    ("health", "GET", "/v2/models/add_sub/ready", ""),
    ("metadata", "GET", "/v2", ""), ("metadata", "GET", "/v2/models/add_sub", ""),
    ("metadata", "GET", "/v2/models/add_sub/versions/1", ""),
    ("model-config", "GET", "/v2/models/add_sub/config", ""),
    ("inference", "POST", "/v2/models/add_sub/infer", INFER),
    ("inference", "POST", "/v2/models/add_sub/versions/1/infer", INFER),
    ("inference", "POST", "/v2/models/add_sub/generate", '{"INPUT0": 1, "INPUT1": 2}'),
    ("inference", "POST", "/v2/models/add_sub/generate_stream", '{"INPUT0": 1, "INPUT1": 2}'),
    ("statistics", "GET", "/v2/models/stats", ""),
    ("statistics", "GET", "/v2/models/add_sub/stats", ""),
    ("model-repository", "POST", "/v2/repository/index", ""),
    ("model-repository", "POST", "/v2/repository/models/add_sub/load", ""),
    ("model-repository", "POST", "/v2/repository/models/nope/unload", ""),
    ("trace", "GET", "/v2/trace/setting", ""),
    ("trace", "GET", "/v2/models/add_sub/trace/setting", ""),
    ("logging", "GET", "/v2/logging", ""),
    ("shared-memory", "GET", "/v2/systemsharedmemory/status", ""),
    ("shared-memory", "POST", "/v2/systemsharedmemory/unregister", ""),
    ("shared-memory", "GET", "/v2/cudasharedmemory/status", ""),
    ("shared-memory", "POST", "/v2/cudasharedmemory/unregister", ""),
]


def http_call(port, method, path, body, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body.encode(), headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.fixture
def everything_restricted(tmp_path, start_server):
    write_add_sub(tmp_path)
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["add_sub"],
                     allow_client_shm=True)
    specs = [f"{g}:key-{g}=v-{g}" for g in RESTRICTED_API_GROUPS]
    http_fe = HttpFrontend(s.server, "127.0.0.1", 0, restricted_apis=parse_restricted_api(specs))
    grpc_fe = GrpcFrontend(s.server, "127.0.0.1", 0, restricted_protocols=specs)
    s.call(http_fe.start())
    s.call(grpc_fe.start())
    yield s, http_fe.port, grpc_fe.port
    s.call(grpc_fe.stop(5))
    s.call(http_fe.stop())


def test_every_http_route_is_restricted_by_its_group(everything_restricted):
    s, port, _ = everything_restricted
    assert {g for g, *_ in HTTP_ROUTES} == set(RESTRICTED_API_GROUPS)
    for group, method, path, body in HTTP_ROUTES:
        status, answer = http_call(port, method, path, body)
        assert status == 403, (path, status, answer)
        assert json.loads(answer) == {
            "error": f"This API is restricted, expecting header 'key-{group}'"}
        # another group's key does not open it
        other = next(g for g in RESTRICTED_API_GROUPS if g != group)
        assert http_call(port, method, path, body, {f"key-{other}": f"v-{other}"})[0] == 403
        status, answer = http_call(port, method, path, body, {f"key-{group}": f"v-{group}"})
        assert status != 403, (path, answer)
        assert status < 500, (path, status, answer)


def test_every_grpc_rpc_is_restricted_by_its_group(everything_restricted):
    s, _, port = everything_restricted
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    requests = {
        "ModelInfer": message_class("inference.ModelInferRequest")(model_name="add_sub"),
        "ModelReady": message_class("inference.ModelReadyRequest")(name="add_sub"),
        "ModelMetadata": message_class("inference.ModelMetadataRequest")(name="add_sub"),
        "ModelConfig": message_class("inference.ModelConfigRequest")(name="add_sub"),
    }
    for group, rpcs in PROTOCOL_GROUPS.items():
        for rpc in rpcs:
            if rpc == "Check":
                path = "/grpc.health.v1.Health/Check"
            else:
                path = f"/inference.GRPCInferenceService/{rpc}"
            payload = requests[rpc].SerializeToString() if rpc in requests else b""
            if rpc == "ModelStreamInfer":
                call = channel.stream_stream(path, request_serializer=lambda b: b,
                                             response_deserializer=lambda b: b)
                invoke = lambda md: list(call(iter([payload]), metadata=md, timeout=10))  # noqa: E731,B023
            else:
                call = channel.unary_unary(path, request_serializer=lambda b: b,
                                           response_deserializer=lambda b: b)
                invoke = lambda md: call(payload, metadata=md, timeout=10)  # noqa: E731,B023
            with pytest.raises(grpc.RpcError) as err:
                invoke(None)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, (rpc, err.value)
            header = f"triton-grpc-protocol-key-{group}"
            assert f"This protocol is restricted, expecting header '{header}'" in \
                err.value.details(), (rpc, err.value.details())
            try:
                invoke([(header, f"v-{group}")])
            except grpc.RpcError as e:  # past the restriction: the RPC's own answer
                assert "restricted" not in (e.details() or ""), (rpc, e.details())
                assert e.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), \
                    (rpc, e.code(), e.details())
    channel.close()


def test_names_and_overrides_cannot_leave_the_repository(tmp_path, start_server):
    write_add_sub(tmp_path / "repo")
    outside = tmp_path / "outside"
    s = start_server(tmp_path / "repo", model_control_mode="explicit", load_models=["add_sub"])
    fe = HttpFrontend(s.server, "127.0.0.1", 0)
    s.call(fe.start())
    try:
        for name in ("..", "../outside", "..%2Foutside", "%2e%2e", "a%2F..%2F..%2Fx"):
            status, answer = http_call(fe.port, "POST", f"/v2/repository/models/{name}/load", "")
            assert 400 <= status < 500, (name, status, answer)
        config = json.dumps({"backend": "onnxruntime", "max_batch_size": 8})
        for path in ("../../outside/x", "/etc/x", "1/../../../x", "..", "1/./../../x"):
            body = json.dumps({"parameters": {"config": config,
                                              f"file:{path}": "AAAA"}})
            status, answer = http_call(fe.port, "POST", "/v2/repository/models/evil/load", body)
            assert 400 <= status < 500, (path, status, answer)
        assert not outside.exists() and not os.path.exists("/etc/x")
        assert s.server.is_ready(), s.server.repository_index()
        assert http_call(fe.port, "POST", "/v2/models/add_sub/infer", INFER)[0] == 200
    finally:
        s.call(fe.stop())


def test_shared_memory_keys_cannot_name_files(tmp_path, start_server):
    write_add_sub(tmp_path)
    s = start_server(tmp_path, allow_client_shm=True)
    fe = HttpFrontend(s.server, "127.0.0.1", 0)
    s.call(fe.start())
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 64)
    link = "pyserver_link_" + uuid.uuid4().hex[:8]
    os.symlink(secret, f"/dev/shm/{link}")
    try:
        for key in ("/../../etc/passwd", "/etc/passwd", str(secret), "../" + str(secret),
                    "/" + link, "/.", "/..", "//dev/shm/../../etc/passwd"):
            body = json.dumps({"key": key, "offset": 0, "byte_size": 8})
            status, answer = http_call(fe.port, "POST",
                                       "/v2/systemsharedmemory/region/r/register", body)
            assert status in (400, 500), (key, status, answer)
            error = json.loads(answer)["error"]
            assert "Unable to open shared memory region" in error or "invalid shm key" in error
        status, answer = http_call(fe.port, "GET", "/v2/systemsharedmemory/status", "")
        assert status == 200 and json.loads(answer) == []
    finally:
        os.unlink(f"/dev/shm/{link}")
        s.call(fe.stop())
