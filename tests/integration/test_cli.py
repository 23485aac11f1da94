"""`python -m pyserver` as a user runs it: the bundled example repository,
and a broken repository that must explain itself and exit non-zero."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]


def wait_until_ready(client, proc, timeout=60):
    """Until the server process answers ready; fails with its output if it exits."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if client.is_server_ready():
                return
        except Exception:
            pass
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "server did not become ready"
        time.sleep(0.1)


def test_serves_the_example_repository():
    port, grpc_port, metrics_port = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserver", "--model-repository", str(ROOT / "examples/model_repository"),
         "--http-port", str(port), "--http-address", "127.0.0.1",
         "--grpc-port", str(grpc_port), "--grpc-address", "127.0.0.1",
         "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        wait_until_ready(client, proc)
        # the README's snippet
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.float32)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        # the same over gRPC, and the metrics endpoint counts both
        import tritonclient.grpc as grpcclient
        gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        ginputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
                   grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        ginputs[0].set_data_from_numpy(a)
        ginputs[1].set_data_from_numpy(b)
        np.testing.assert_array_equal(gclient.infer("add_sub", ginputs).as_numpy("OUTPUT0"), a + b)
        import urllib.request
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2' in scrape
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "successfully loaded 'add_sub' version 1" in out


def test_config_error_exits_with_file_and_line(tmp_path):
    model = tmp_path / "bad"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "bad"\nplatform: "onnxruntime_onnx"\nmax_batch_sise: 4\n')
    http_port, grpc_port, metrics_port = free_ports(3)
    proc = subprocess.run(
        [sys.executable, "-m", "pyserver", "--model-repository", str(tmp_path),
         "--http-port", str(http_port), "--grpc-port", str(grpc_port),
         "--metrics-port", str(metrics_port)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode != 0
    assert f"{model / 'config.pbtxt'}:3:" in proc.stderr
    assert "max_batch_sise" in proc.stderr and "max_batch_size" in proc.stderr


def start_cli(args, env: dict | None = None):
    """``python -m pyserver ARGS`` on free ports (``env``: added to this
    process's environment), once it is live: (process, HTTP client, ports)."""
    ports = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserver", *args,
         "--http-port", str(ports[0]), "--http-address", "127.0.0.1",
         "--grpc-port", str(ports[1]), "--grpc-address", "127.0.0.1",
         "--metrics-port", str(ports[2]), "--metrics-address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=None if env is None else {**os.environ, **env})
    client = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}")
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.is_server_live():
                return proc, client, ports
        except Exception:
            pass
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)


def test_startup_log_poll_mode_and_exit_on_error_false(tmp_path):
    from pyserver.testing import write_add_sub
    write_add_sub(tmp_path, name="good")
    bad = write_add_sub(tmp_path, name="broken")
    (bad / "1" / "model.onnx").write_bytes(b"junk")
    proc, client, ports = start_cli(
        ["--model-repository", str(tmp_path), "--exit-on-error=false",
         "--model-control-mode=poll", "--repository-poll-secs=1", "--strict-readiness=false"])
    try:
        # Not strict: ready (once every endpoint listens) though a model failed.
        deadline = time.monotonic() + 30
        while not client.is_server_ready():
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.05)
        assert client.is_model_ready("good") and not client.is_model_ready("broken")
        write_add_sub(tmp_path, name="later")
        deadline = time.monotonic() + 30
        while not client.is_model_ready("later"):
            assert time.monotonic() < deadline, "poll did not load the new model"
            time.sleep(0.1)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    table = [line for line in out.splitlines() if line.startswith(("|", "+"))]
    assert [c.strip() for c in table[1].split("|")[1:4]] == ["Model", "Version", "Status"]
    rows = {cells[1].strip(): (cells[2].strip(), cells[3].strip())
            for cells in (line.split("|") for line in table[3:-1])}
    assert rows["good"] == ("1", "READY")
    # the version that failed, and core's reason with its code's name
    assert rows["broken"][0] == "1" and rows["broken"][1].startswith("UNAVAILABLE: ")
    assert f"Started HTTPService at 127.0.0.1:{ports[0]}" in out
    assert f"Started GRPCInferenceService at 127.0.0.1:{ports[1]}" in out
    assert f"Started Metrics Service at 127.0.0.1:{ports[2]}" in out
    assert "'later' appeared in the model repository" in out


def test_model_config_name_flag(tmp_path):
    from pyserver.testing import write_add_sub
    d = write_add_sub(tmp_path, name="m")
    (d / "configs").mkdir()
    (d / "configs" / "tiny.pbtxt").write_text(
        (d / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 1"))
    proc, client, _ = start_cli(["--model-repository", str(tmp_path), "--model-config-name=tiny"])
    try:
        deadline = time.monotonic() + 30
        while not client.is_server_ready():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert client.get_model_config("m")["max_batch_size"] == 1
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_check_repo_reports_every_problem_with_file_and_line(tmp_path):
    from pyserver.testing import write_add_sub
    write_add_sub(tmp_path, name="fine")
    typo = write_add_sub(tmp_path, name="typo")
    (typo / "config.pbtxt").write_text(
        'name: "typo"\nplatform: "onnxruntime_onnx"\nmax_batch_sise: 4\n')
    nodt = write_add_sub(tmp_path, name="nodt")
    text = (nodt / "config.pbtxt").read_text()
    (nodt / "config.pbtxt").write_text(
        text.replace('{ name: "INPUT1" data_type: TYPE_FP32', '{ name: "INPUT1"'))
    missing = write_add_sub(tmp_path, name="missing")
    (missing / "1" / "model.onnx").unlink()
    wrong_io = write_add_sub(tmp_path, name="wrong_io")
    (wrong_io / "config.pbtxt").write_text(
        (wrong_io / "config.pbtxt").read_text().replace('"OUTPUT1"', '"OUTPUTX"'))
    write_add_sub(tmp_path, name="warm", extra='model_warmup [ { name: "s" batch_size: 1 inputs '
                  '{ key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] '
                  'input_data_file: "absent" } } } ]')
    proc = subprocess.run([sys.executable, "-m", "pyserver", "check-repo", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith(f"{typo / 'config.pbtxt'}:3: model 'typo': ") for line in lines)
    assert any("Did you mean 'max_batch_size'?" in line for line in lines)
    # the line of INPUT1's declaration in the add_sub config is 6
    assert any(line.startswith(f"{nodt / 'config.pbtxt'}:6: model 'nodt': input 'INPUT1' "
                               "has no data_type") for line in lines)
    assert any(line.startswith(f"{missing / '1' / 'model.onnx'}: model 'missing': ")
               for line in lines)
    assert any(line.startswith(f"{wrong_io / 'config.pbtxt'}:10: model 'wrong_io': output "
                               "'OUTPUTX' is not an output of model.onnx") for line in lines)
    assert any("model 'warm': model_warmup: failed to open text file for read" in line
               for line in lines)
    assert not any("'fine'" in line for line in lines)
    assert "5 problem(s) in 5 of 6 model(s)" in proc.stderr

    ok = subprocess.run([sys.executable, "-m", "pyserver", "check-repo",
                         str(ROOT / "examples/model_repository")],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout == ""


def test_tritonserver_logging_tracing_and_thread_flags(tmp_path):
    from pyserver.testing import write_add_sub
    write_add_sub(tmp_path / "models")
    log_file, trace_file = tmp_path / "server.log", tmp_path / "trace.json"
    proc, client, ports = start_cli(
        ["--model-repository", str(tmp_path / "models"), f"--log-file={log_file}",
         "--log-format=ISO8601", "--log-info=true", f"--trace-config=triton,file={trace_file}",
         "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1",
         "--trace-config=triton,log-frequency=1",
         # what a tritonserver command line often carries: socket pump
         # threads for HTTP and gRPC, and flags with no effect here
         "--http-thread-count=8", "--grpc-infer-thread-count=4", "--rate-limit=off",
         "--buffer-manager-thread-count=2",
         # GPU 0's pool: without CUDA, said in the log and ignored
         "--cuda-memory-pool-byte-size=0:67108864"])
    try:
        deadline = time.monotonic() + 30
        while not client.is_server_ready():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        settings = client.get_trace_settings()
        assert settings["trace_level"] == ["TIMESTAMPS"] and settings["trace_rate"] == "1"
        assert settings["trace_file"] == str(trace_file) and settings["log_frequency"] == "1"
        assert client.get_log_settings()["log_file"] == str(log_file)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for inp in inputs:
            inp.set_data_from_numpy(a)
        client.infer("add_sub", inputs)
        written = trace_file.with_name(trace_file.name + ".0")  # log-frequency 1: a file each
        deadline = time.monotonic() + 10
        while not (written.exists() and written.read_text().strip()):
            assert time.monotonic() < deadline, "no trace written"
            time.sleep(0.1)
        stamps = [t["name"] for t in json.loads(written.read_text())[0]["timestamps"]]
        assert "COMPUTE_START" in stamps  # the model loaded after tracing was set stamps too
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "--http-thread-count has no effect" not in out
    assert "--buffer-manager-thread-count has no effect" in out
    # Triton's console lines, here ISO8601: "<time>Z I <pid> <file>:<line>] \"<message>\""
    import re
    assert re.search(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ cli\.py:\d+\] '
                     r'"--buffer-manager-thread-count has no effect on this server '
                     r'\(see --help\)"$',
                     out, re.M), out
    from pyserver.engine.memory import cuda_runtime_info
    cuda = cuda_runtime_info()
    if not cuda["available"]:
        assert f"--cuda-memory-pool-byte-size has no effect: {cuda['reason']}" in out
    assert "Started HTTPService at" in log_file.read_text()


@pytest.mark.parametrize("flag, message", [
    ("--rate-limit-resource=R", "--rate-limit-resource option format is "
     "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R"),
    # --host-policy: Triton's texts (runtime/host_policy.py)
    ("--host-policy=cpu", "--host-policy option format is '<policy name>,<setting>=<value>'. "
     "Got cpu"),
    ("--host-policy=cpu,cpus=0-1", "Unsupported host policy setting 'cpus' is specified, "
     "supported settings are 'numa-node', 'cpu-cores'"),
    ("--host-policy=cpu,cpu-cores=0", "host policy setting 'cpu-cores' format is "
     "'<lower_cpu_core_id>-<upper_cpu_core_id>'. Got 0"),
    ("--trace-config=opentelemetry,url=localhost:4318", "trace mode 'opentelemetry' is not supported"),
    ("--trace-config=mode=opentelemetry", "trace mode 'opentelemetry' is not supported"),
    ("--trace-config=speed=3", "expected [triton,]KEY=VALUE"),
    ("--trace-config=rate=often", "Unable to parse 'trace_rate', got: often"),
    ("--trace-config=level=loud", "invalid value for trace level option: loud"),
    ("--cuda-memory-pool-byte-size=64MB",
     "--cuda-memory-pool-byte-size expects <GPU device ID>:<pool byte size>, got '64MB'"),
    ("--cuda-memory-pool-byte-size=0:-1", "the GPU device ID and the size must be >= 0"),
    ("--model-namespacing=true", "--model-namespacing=true is not supported"),
    ("--allow-sagemaker=true", "there is no SageMaker endpoint"),
    ("--allow-vertex-ai=1", "there is no Vertex AI endpoint"),
    ("--http-header-forward-pattern=(", "'(' is not a valid regular expression"),
    ("--grpc-header-forward-pattern=[a", "--grpc-header-forward-pattern '[a' is not a valid"),
    ("--grpc-keepalive-time=-5", "--grpc-keepalive-time must be >= 0, not -5"),
    # a group in two restrictions: Triton's line, for HTTP as for gRPC (#21)
    ("--allow-http=true --http-restricted-api=health:a=b --http-restricted-api=health:c=d",
     "restricted api 'health' can not be specified in multiple config groups"),
    ("--allow-grpc=true --grpc-restricted-protocol=health:a=b "
     "--grpc-restricted-protocol=health:c=d",
     "restricted protocol 'health' can not be specified in multiple config groups"),
])
def test_unusable_tritonserver_flags_stop_the_server_with_a_reason(tmp_path, flag, message):
    proc = subprocess.run([sys.executable, "-m", "pyserver", "--model-repository", str(tmp_path),
                           "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false",
                           *flag.split(" ")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert message in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_reused_ports_deprecated_trace_flags_and_flags_without_effect(tmp_path):
    """Two servers listen on the same HTTP and gRPC ports with
    --reuse-http-port/--reuse-grpc-port (a third, without, cannot), the
    deprecated --trace-* flags set the trace settings, and the flags of
    things this server does not have are accepted and said in the log."""
    from pyserver.testing import write_add_sub
    write_add_sub(tmp_path / "models")
    trace_file = tmp_path / "trace.json"
    http_port, grpc_port = free_ports(2)

    def launch(*extra):
        return subprocess.Popen(
            [sys.executable, "-m", "pyserver", "--model-repository", str(tmp_path / "models"),
             "--http-address=127.0.0.1", f"--http-port={http_port}",
             "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--allow-metrics=false",
             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    reuse = ["--reuse-http-port=true", "--reuse-grpc-port=true"]
    first = launch(*reuse, f"--trace-file={trace_file}", "--trace-level=TIMESTAMPS",
                   "--trace-rate=1", "--trace-log-frequency=5", "--trace-config=rate=2",
                   "--repoagent-directory=/opt/tritonserver/repoagents", "--model-namespacing=false",
                   "--allow-sagemaker=false", "--host-policy=numa0,cpu-cores=0-1",
                   "--grpc-keepalive-time=60000", "--grpc-keepalive-permit-without-calls=true",
                   "--model-load-retry-count=1")
    second = third = None
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        wait_until_ready(client, first)
        settings = client.get_trace_settings()
        assert settings["trace_file"] == str(trace_file)
        assert settings["trace_level"] == ["TIMESTAMPS"] and settings["log_frequency"] == "5"
        assert settings["trace_rate"] == "2"  # --trace-config wins over --trace-rate
        second = launch(*reuse)
        third = launch()  # no reuse: the ports are taken
        assert third.wait(60) == 1
        refused = third.stdout.read()
        assert "failed to start HTTP service: " in refused and "address already in use" in refused
        assert "Traceback" not in refused
        deadline = time.monotonic() + 60
        out = ""
        while "Started GRPCInferenceService" not in out:
            assert second.poll() is None and time.monotonic() < deadline, out
            out += second.stdout.readline()
        assert "Started HTTPService at 127.0.0.1:%d" % http_port in out
    finally:
        for proc in (first, second, third):
            if proc is not None and proc.poll() is None:
                proc.terminate()
        log = first.communicate(timeout=30)[0]
        if second is not None:
            second.communicate(timeout=30)
    assert "'--trace-file' is deprecated: use '--trace-config triton,file=<value>'" in log
    assert "--repoagent-directory has no effect on this server" in log

