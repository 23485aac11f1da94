"""pyserver on Ray Serve (pyserver.rayserve), on a real local Ray cluster of
two nodes this module starts (a head and a worker node, both on this
machine): KServe v2 through Ray's HTTP proxy with tritonclient, the
DeploymentHandle API, replicas spread over both nodes, a replica killed
under load and replaced with no answered request lost or wrong, and an
autoscaling deployment.

Needs ray[serve] (`make test-ray` installs requirements-ray.txt); skips
without it. Ray on two cores is slow to start: waits are generous, and no
assertion is on how long anything took.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest

# Ray resolves a loopback bootstrap address to the machine's own address
# unless told it runs a single-machine cluster (its macOS default), read
# when ray is first imported: so every Ray process here listens on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
tritonserver = pytest.importorskip("tritonserver")

import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import pyserver.rayserve  # noqa: E402
from pyserver.rayserve.deployment import NODE_HEADER, REPLICA_HEADER  # noqa: E402
from pyserver.testing import write_add_sub  # noqa: E402
from tests.ports import free_port  # noqa: E402

SIZE = 16
PINNED = "pinned"   # the application of two replicas, one per node
AUTO = "auto"       # the autoscaling one
WAIT_S = 180        # the most any wait for Ray below lasts before the test fails
REQUEST_TIMEOUT_S = 15  # a load request not answered by then is abandoned and sent again
GRACE_S = 60        # once a load stops, how long a request not yet answered is still retried


def _wait_for(what: str, predicate, timeout: float = WAIT_S, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as e:  # noqa: BLE001 (Ray's state may not be there yet)
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def _deployment_status(app: str):
    return serve.status().applications[app].deployments["pyserver"]


def _running(app: str) -> int:
    states = _deployment_status(app).replica_states
    return sum(n for state, n in states.items() if str(state).endswith("RUNNING"))


def _healthy_with(app: str, replicas: int) -> bool:
    return str(_deployment_status(app).status).endswith("HEALTHY") and _running(app) == replicas


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and a worker node on 127.0.0.1, Serve's one HTTP proxy on the
    head; yields (cluster, http port, model repository)."""
    from ray.cluster_utils import Cluster

    repo = tmp_path_factory.mktemp("rayserve_repo")
    write_add_sub(repo, size=SIZE)
    node = dict(node_ip_address="127.0.0.1", num_cpus=2, object_store_memory=80 << 20)
    local = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **node))
    try:
        local.add_node(**node)
        ray.init(address=local.address, log_to_driver=False)
        port = free_port()
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        yield local, port, repo
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            local.shutdown()


@pytest.fixture(scope="module")
def pinned(cluster):
    """Two replicas, at most one per node: one on each. Yields (handle,
    base url of its routes)."""
    _, port, repo = cluster
    app = pyserver.rayserve.app(repo, num_replicas=2, max_replicas_per_node=1,
                                ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=2,
                                health_check_period_s=2)
    handle = serve.run(app, name=PINNED, route_prefix="/")
    _wait_for("two healthy replicas", lambda: _healthy_with(PINNED, 2))
    yield handle, f"127.0.0.1:{port}"
    serve.delete(PINNED)


def _node_ids() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((1, SIZE)).astype(np.float32)
    b = rng.standard_normal((1, SIZE)).astype(np.float32)
    return a, b


def _tc_inputs(a, b, binary=True):
    inputs = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
              httpclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


def _post_json(url: str, body: dict, timeout: float = 30, request_id: str | None = None):
    """(status, headers, JSON body) of a POST through Ray's proxy;
    ``request_id`` (x-request-id) names the request in Ray's proxy and
    replica logs."""
    headers = {"Content-Type": "application/json"}
    if request_id is not None:
        headers["x-request-id"] = request_id
    request = urllib.request.Request(f"http://{url}", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = raw
        return e.code, dict(e.headers), doc


def _json_infer_body(a, b) -> dict:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(a.shape),
                        "data": a.reshape(-1).tolist()},
                       {"name": "INPUT1", "datatype": "FP32", "shape": list(b.shape),
                        "data": b.reshape(-1).tolist()}]}


def _sums_match(doc: dict, a, b) -> bool:
    outputs = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
               for o in doc["outputs"]}
    return np.allclose(outputs["OUTPUT0"], a + b, atol=1e-6) and \
        np.allclose(outputs["OUTPUT1"], a - b, atol=1e-6)


# -- KServe v2 over Ray's proxy ---------------------------------------------------------


def test_tritonclient_through_the_ray_proxy(pinned):
    _, url = pinned
    client = httpclient.InferenceServerClient(url=url)
    try:
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.get_server_metadata()["name"]
        assert client.is_model_ready("add_sub")
        assert client.is_model_ready("add_sub", "1")
        assert not client.is_model_ready("no_such_model")
        metadata = client.get_model_metadata("add_sub")
        assert metadata["name"] == "add_sub" and metadata["versions"] == ["1"]
        assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]
        assert client.get_model_config("add_sub")["max_batch_size"] == 8
        assert client.get_model_repository_index() == [
            {"name": "add_sub", "version": "1", "state": "READY"}]

        a, b = _inputs(1)
        # binary inputs, outputs as tritonclient asks by default
        result = client.infer("add_sub", _tc_inputs(a, b))
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, atol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, atol=1e-6)
        assert result.get_response()["model_version"] == "1"

        # JSON inputs, one output asked for as JSON, a version, a request id
        outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
        result = client.infer("add_sub", _tc_inputs(a, b, binary=False), model_version="1",
                              outputs=outputs, request_id="r-7")
        response = result.get_response()
        assert response["id"] == "r-7"
        assert [o["name"] for o in response["outputs"]] == ["OUTPUT1"]
        assert "data" in response["outputs"][0]
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, atol=1e-6)

        # a batch of 3, binary outputs asked for explicitly
        a3, b3 = np.vstack([a] * 3), np.vstack([b] * 3)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        result = client.infer("add_sub", _tc_inputs(a3, b3), outputs=outputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a3 + b3, atol=1e-6)

        # a bad request: Triton's status and message
        wrong = np.zeros((1, 3), np.float32)
        with pytest.raises(InferenceServerException) as bad:
            client.infer("add_sub", _tc_inputs(wrong, wrong))
        assert bad.value.status() == "400"
        assert "unexpected shape for input 'INPUT0'" in bad.value.message()
        with pytest.raises(InferenceServerException) as unknown:
            client.infer("no_such_model", _tc_inputs(a, b))
        assert unknown.value.status() == "404"
        assert "no_such_model" in unknown.value.message()
    finally:
        client.close()


def test_error_answers_have_triton_shape(pinned):
    _, url = pinned
    a, b = _inputs(2)
    status, headers, doc = _post_json(f"{url}/v2/models/add_sub/infer", _json_infer_body(a, b))
    assert status == 200 and _sums_match(doc, a, b)
    assert headers.get(NODE_HEADER) or headers.get(NODE_HEADER.title())

    status, _, doc = _post_json(f"{url}/v2/models/add_sub/infer",
                                {"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                             "shape": [1, SIZE], "data": [1.0] * SIZE}]})
    assert status == 400 and set(doc) == {"error"}
    assert "INPUT1" in doc["error"]

    # (Triton answers a JSON of the wrong type with its JSON parser's code, INTERNAL)
    status, _, doc = _post_json(f"{url}/v2/models/add_sub/infer", {"inputs": "nope"})
    assert status == 500 and set(doc) == {"error"}
    assert "Unable to parse 'inputs'" in doc["error"]

    status, _, doc = _post_json(f"{url}/v2/models/add_sub/versions/9/infer",
                                _json_infer_body(a, b))
    assert status in (400, 404) and set(doc) == {"error"}

    status, _, doc = _post_json(f"{url}/v2/models/add_sub/versions/x/infer",
                                _json_infer_body(a, b))
    assert status == 400 and set(doc) == {"error"}


# -- the handle API -------------------------------------------------------------------------


def test_handle_api(pinned):
    handle, _ = pinned
    a, b = _inputs(3)
    outputs = handle.infer.remote("add_sub", {"INPUT0": a, "INPUT1": b}).result()
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    np.testing.assert_allclose(outputs["OUTPUT0"], a + b, atol=1e-6)
    np.testing.assert_allclose(outputs["OUTPUT1"], a - b, atol=1e-6)

    only = handle.infer.remote("add_sub", {"INPUT0": a, "INPUT1": b}, version=1,
                               outputs=["OUTPUT1"]).result()
    assert list(only) == ["OUTPUT1"]

    assert handle.ready.remote().result()
    assert handle.models.remote().result()["add_sub"]["state"] == "READY"
    assert handle.model_config.remote("add_sub").result()["name"] == "add_sub"
    assert handle.model_metadata.remote("add_sub").result()["versions"] == ["1"]

    # the API's error class and message come back through the handle
    with pytest.raises(tritonserver.InvalidArgumentError) as bad:
        handle.infer.remote("add_sub", {"INPUT0": a}).result()
    assert "INPUT1" in str(bad.value)
    with pytest.raises(tritonserver.TritonError) as unknown:
        handle.infer.remote("no_such_model", {"INPUT0": a, "INPUT1": b}).result()
    assert "no_such_model" in str(unknown.value)


# -- two nodes --------------------------------------------------------------------------------


def _placements(handle, replicas: int = 2) -> dict:
    """{replica id: where it runs}, asked of the handle until ``replicas``
    different ones answered (or 200 asks)."""
    placements = {}
    for _ in range(200):
        where = handle.where.remote().result()
        placements[where["replica_id"]] = where
        if len(placements) == replicas:
            break
    return placements


def test_requests_spread_over_replicas_on_both_nodes(pinned):
    handle, url = pinned
    nodes = _node_ids()
    assert len(nodes) == 2

    # the handle: each replica says where it runs
    placements = _placements(handle)
    assert {w["node_id"] for w in placements.values()} == nodes

    # HTTP through the one proxy, on the head: it prefers the replica on its
    # own node and gives the other node's replica what that one has no room
    # for (max_ongoing_requests), so concurrent clients are answered on both
    with _Load(url, threads=4) as load:
        _wait_for("answers from both nodes", lambda: load.nodes_seen() == nodes)
    assert load.answered > 0 and not load.wrong, load.wrong[:3]
    assert load.unfinished == 0, load.failures[-5:]


class _Load:
    """Client threads sending add_sub through Ray's proxy until stopped.
    Each request is sent until it gets a 200 (a failure is retried: the
    request was not answered); every 200 is checked against numpy. Once
    stopped, a thread whose request is not answered yet goes on retrying it
    for ``grace_s`` before it counts as ``unfinished``.

    An attempt not answered within ``request_timeout_s`` is abandoned (and
    counted in ``timeouts``) and sent again, because Ray's proxy may never
    answer a request it was handing to a replica when that replica died
    (seen with Ray 2.60 on a loaded machine). Its router retries on another
    replica a request it had not yet seen the dying one accept, but the
    dying replica may already have taken the request's body from the proxy,
    which hands each message out once: the other replica's ``await
    request.body()`` then waits, until the client goes away, for a body that
    never comes (the handler never got past reading the body). Or the
    retried request stays in the proxy and reaches no replica at all. Each
    attempt is named in Ray's logs (x-request-id) as it is in ``failures``."""

    def __init__(self, url: str, threads: int = 3, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 grace_s: float = GRACE_S):
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.grace_s = grace_s
        self.name = uuid.uuid4().hex[:6]
        self.stop = threading.Event()
        self.give_up_at = float("inf")
        self.lock = threading.Lock()
        self.answered = 0
        self.wrong: list = []
        self.failures: list = []
        self.timeouts = 0
        self.unfinished = 0
        self.replicas: set[str] = set()
        self.nodes: set[str] = set()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                        for n in range(threads)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.give_up_at = time.monotonic() + self.grace_s
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.grace_s + self.request_timeout_s + WAIT_S)
        assert not any(t.is_alive() for t in self.threads)

    def _run(self, worker: int):
        seed = worker * 1_000_000
        while not self.stop.is_set():
            seed += 1
            a, b = _inputs(seed)
            attempt = 0
            while True:
                attempt += 1
                request_id = f"load-{self.name}-{worker}-{seed}-{attempt}"
                try:
                    status, headers, doc = _post_json(
                        f"{self.url}/v2/models/add_sub/infer", _json_infer_body(a, b),
                        timeout=self.request_timeout_s, request_id=request_id)
                except TimeoutError as e:  # sent, not answered in time
                    status, headers, doc = None, {}, repr(e)
                    with self.lock:
                        self.timeouts += 1
                except Exception as e:  # noqa: BLE001 (a connection cut: not answered)
                    status, headers, doc = None, {}, repr(e)
                if status == 200:
                    headers = {k.lower(): v for k, v in headers.items()}
                    with self.lock:
                        self.answered += 1
                        self.replicas.add(headers.get(REPLICA_HEADER, ""))
                        self.nodes.add(headers.get(NODE_HEADER, ""))
                        if not _sums_match(doc, a, b):
                            self.wrong.append((seed, doc))
                    break
                with self.lock:
                    self.failures.append((request_id, status, str(doc)[:200]))
                if self.stop.is_set() and time.monotonic() >= self.give_up_at:
                    with self.lock:
                        self.unfinished += 1
                    return
                time.sleep(0.05)

    def count(self) -> int:
        with self.lock:
            return self.answered

    def nodes_seen(self) -> set[str]:
        with self.lock:
            return set(self.nodes)


def test_a_killed_replica_is_replaced_and_no_answered_request_is_lost(pinned):
    handle, url = pinned
    nodes = _node_ids()
    placements = _placements(handle)
    head = ray.get_runtime_context().get_node_id()
    # the head's replica: the one the proxy (on the head) sends most to
    victim = next(w for w in placements.values() if w["node_id"] == head)
    survivor = next(w for w in placements.values() if w["node_id"] != head)

    with _Load(url) as load:
        _wait_for("load to flow", lambda: load.count() >= 20)
        ray.kill(ray.get_actor(victim["actor_name"], namespace="serve"), no_restart=True)
        killed_at = load.count()

        def replaced():
            ids = set()
            for _ in range(20):
                ids.add(handle.where.remote().result()["replica_id"])
            return victim["replica_id"] not in ids and len(ids) == 2 and \
                _healthy_with(PINNED, 2)

        _wait_for("the killed replica's replacement", replaced)
        # the load goes on over the new pair of replicas
        target = load.count() + 30
        _wait_for("load after the replacement", lambda: load.count() >= target)

    assert not load.wrong, load.wrong[:3]
    assert load.unfinished == 0, load.failures[-5:]
    # only a request in flight when the replica died may go unanswered (and
    # be sent again): at most one per client thread
    assert load.timeouts <= len(load.threads), load.failures[-5:]
    assert load.answered > killed_at
    after = {handle.where.remote().result()["replica_id"]: None for _ in range(50)}
    assert victim["replica_id"] not in after and survivor["replica_id"] in after

    # the replacement runs where the killed one did (one replica per node)
    placements = _placements(handle)
    assert {w["node_id"] for w in placements.values()} == nodes
    new_one = next(w for rid, w in placements.items() if rid != survivor["replica_id"])
    assert new_one["node_id"] == victim["node_id"] and new_one["pid"] != victim["pid"]


# -- autoscaling ---------------------------------------------------------------------------------


def test_autoscaling_config(cluster):
    _, port, repo = cluster
    autoscaling = {"min_replicas": 1, "initial_replicas": 1, "max_replicas": 2,
                   "target_ongoing_requests": 1, "upscale_delay_s": 1, "downscale_delay_s": 600}
    app = pyserver.rayserve.app(repo, autoscaling_config=autoscaling,
                                ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=4)
    handle = serve.run(app, name=AUTO, route_prefix="/auto")
    try:
        _wait_for("one healthy replica", lambda: _healthy_with(AUTO, 1))

        # served under its route prefix, tritonclient with a base path
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{port}/auto")
        try:
            assert client.is_model_ready("add_sub")
            a, b = _inputs(4)
            result = client.infer("add_sub", _tc_inputs(a, b))
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, atol=1e-6)
        finally:
            client.close()
        np.testing.assert_allclose(
            handle.infer.remote("add_sub", {"INPUT0": a, "INPUT1": b}).result()["OUTPUT1"],
            a - b, atol=1e-6)

        # four clients keep more than target_ongoing_requests in flight: Serve
        # adds the second replica, and no more than max_replicas
        with _Load(f"127.0.0.1:{port}/auto", threads=4) as load:
            _wait_for("the scale-up to two replicas", lambda: _healthy_with(AUTO, 2))
            target = load.count() + 20
            _wait_for("load on two replicas", lambda: load.count() >= target)
            assert _running(AUTO) <= 2
        assert not load.wrong, load.wrong[:3]
        assert load.unfinished == 0, load.failures[-5:]
    finally:
        serve.delete(AUTO)


def test_build_app_reads_the_cli_arguments(tmp_path):
    """`serve run pyserver.rayserve:build_app key=value ...` (no cluster needed)."""
    bound = pyserver.rayserve.build_app({
        "model_repository": f"{tmp_path}/a,{tmp_path}/b", "model_control_mode": "explicit",
        "startup_models": "add_sub,other", "min_replicas": "1", "max_replicas": "3",
        "target_ongoing_requests": "2", "num_cpus": "0.5", "max_ongoing_requests": "4"})
    deployment = bound._bound_deployment
    assert deployment.name == "pyserver"
    autoscaling = deployment._deployment_config.autoscaling_config
    assert (autoscaling.min_replicas, autoscaling.max_replicas,
            autoscaling.target_ongoing_requests) == (1, 3, 2)
    assert deployment.ray_actor_options["num_cpus"] == 0.5
    assert deployment._deployment_config.max_ongoing_requests == 4
    assert deployment.init_args == ([f"{tmp_path}/a", f"{tmp_path}/b"],)
    assert deployment.init_kwargs["startup_models"] == ["add_sub", "other"]
    assert deployment.init_kwargs["model_control_mode"] == "explicit"
    with pytest.raises(ValueError, match="model_repository"):
        pyserver.rayserve.build_app({})
    with pytest.raises(ValueError, match="unknown"):
        pyserver.rayserve.build_app({"model_repository": "m", "replicas": "2"})
