"""gRPC transport options: TLS (server-only and mutual) with tritonclient's
own ssl arguments, and gzip response compression seen on the wire and
through tritonclient."""

import shutil
import subprocess
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc_options import GrpcOptionError, frontend_options, tls_context
from pyserver.testing import write_add_sub
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)
from tests.integration.test_grpc_h2 import Client, frame, grpc_status, infer_message

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="the openssl command makes the test certificates")

A = np.arange(16, dtype=np.float32).reshape(1, 16)


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for localhost/127.0.0.1 and a client
    certificate, both signed by the CA."""
    d = tmp_path_factory.mktemp("certs")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{who}.crt",
                 cwd=d)
    return {name: str(d / name) for name in
            ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def _add_sub_inputs():
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
              grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(A)
    return inputs


def _check_infer(client):
    result = client.infer("add_sub", _add_sub_inputs())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - A)


def test_tls_with_tritonclient(tmp_path, start_grpc, certs):  # noqa: F811
    write_add_sub(tmp_path)
    ctx = tls_context(certs["server.crt"], certs["server.key"])
    s = start_grpc(tmp_path, frontend_kwargs={"ssl_context": ctx})
    port = s.grpc.port
    with grpcclient.InferenceServerClient(f"localhost:{port}", ssl=True,
                                          root_certificates=certs["ca.crt"]) as client:
        assert client.is_server_live()
        _check_infer(client)
    # A plaintext (h2c) client gets nowhere on a TLS port, and the port
    # keeps serving TLS clients afterwards.
    with grpcclient.InferenceServerClient(f"127.0.0.1:{port}") as plain:
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=5)
    with grpcclient.InferenceServerClient(f"localhost:{port}", ssl=True,
                                          root_certificates=certs["ca.crt"]) as client:
        _check_infer(client)


def test_mutual_tls_requires_a_client_certificate(tmp_path, start_grpc, certs):  # noqa: F811
    write_add_sub(tmp_path)
    ctx = tls_context(certs["server.crt"], certs["server.key"], certs["ca.crt"], mutual=True)
    s = start_grpc(tmp_path, frontend_kwargs={"ssl_context": ctx})
    url = f"localhost:{s.grpc.port}"
    with grpcclient.InferenceServerClient(url, ssl=True, root_certificates=certs["ca.crt"]) as c:
        with pytest.raises(InferenceServerException):
            c.is_server_live(client_timeout=5)
    with grpcclient.InferenceServerClient(
            url, ssl=True, root_certificates=certs["ca.crt"], private_key=certs["client.key"],
            certificate_chain=certs["client.crt"]) as client:
        assert client.is_server_ready()
        _check_infer(client)


def test_tls_options_from_the_command_line(certs):
    import argparse

    from pyserver.frontends import grpc_options
    from pyserver.frontends.grpc_keepalive import KeepaliveOptions

    p = argparse.ArgumentParser()
    grpc_options.add_cli_arguments(p)
    opts = frontend_options(p.parse_args([]))
    assert opts == {"response_compression": 0, "reuse_port": False,
                    "keepalive": KeepaliveOptions(),
                    "max_response_pool_size": 0,  # Triton's defaults (INT_MAX: no bound)
                    "io_threads": 0}  # the event loop reads and writes
    opts = frontend_options(p.parse_args(["--grpc-max-response-pool-size=16",
                                          "--grpc-infer-thread-count=3"]))
    assert opts["max_response_pool_size"] == 16 and opts["io_threads"] == 3
    with pytest.raises(SystemExit):
        p.parse_args(["--grpc-infer-thread-count=-1"])
    for bad in ("0", "-3", "x"):
        with pytest.raises(SystemExit):
            p.parse_args([f"--grpc-max-response-pool-size={bad}"])
    opts = frontend_options(p.parse_args([
        "--reuse-grpc-port=true", "--grpc-header-forward-pattern=x-.*",
        "--grpc-keepalive-time=1000", "--grpc-keepalive-timeout=500",
        "--grpc-keepalive-permit-without-calls=1", "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=100", "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=60000", "--grpc-max-connection-age-grace=5000"]))
    assert opts["reuse_port"] and opts["header_forward_pattern"] == "x-.*"
    assert opts["keepalive"] == KeepaliveOptions(1000, 500, True, 0, 100, 0, 60000, 5000)
    with pytest.raises(ValueError, match="--grpc-keepalive-timeout must be >= 0, not -1"):
        frontend_options(p.parse_args(["--grpc-keepalive-timeout=-1"]))
    opts = frontend_options(p.parse_args([
        "--grpc-use-ssl=true", f"--grpc-server-cert={certs['server.crt']}",
        f"--grpc-server-key={certs['server.key']}",
        "--grpc-infer-response-compression-level=high"]))
    assert opts["response_compression"] == 9 and opts["ssl_context"] is not None
    with pytest.raises(GrpcOptionError, match="needs --grpc-server-cert"):
        frontend_options(p.parse_args(["--grpc-use-ssl=true"]))
    with pytest.raises(GrpcOptionError, match="needs --grpc-root-cert"):
        frontend_options(p.parse_args([
            "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={certs['server.crt']}",
            f"--grpc-server-key={certs['server.key']}"]))
    with pytest.raises(GrpcOptionError, match="cannot load"):
        tls_context(certs["ca.crt"], "/nonexistent.key")
    with pytest.raises(SystemExit):
        p.parse_args(["--grpc-infer-response-compression-level=extreme"])


def test_response_compression(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path)
    s = start_grpc(tmp_path, frontend_kwargs={"response_compression": 6})
    c = Client(s.grpc.port)
    try:
        # A client that accepts gzip gets a gzip-compressed message, flagged.
        headers, body, _ = c.result(c.request(
            body=frame(infer_message()), headers=[("grpc-accept-encoding", "identity,gzip")]))
        assert grpc_status(headers) == (0, "")
        assert headers["grpc-encoding"] == "gzip"
        assert body[0] == 1
        assert int.from_bytes(body[1:5], "big") == len(body) - 5
        plain = zlib.decompress(body[5:], 31)
        # One that does not (no header, or identity only) gets it plain.
        for extra in ([], [("grpc-accept-encoding", "identity")]):
            headers, body, _ = c.result(c.request(body=frame(infer_message()), headers=extra))
            assert grpc_status(headers) == (0, "") and "grpc-encoding" not in headers
            assert body[0] == 0 and body[5:] == plain
    finally:
        c.close()
    # grpcio (tritonclient) accepts gzip and reads the compressed answers.
    with grpcclient.InferenceServerClient(s.grpc_url) as client:
        _check_infer(client)
        assert client.get_model_metadata("add_sub").name == "add_sub"


def test_no_compression_by_default(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path)
    s = start_grpc(tmp_path)
    c = Client(s.grpc.port)
    try:
        headers, body, _ = c.result(c.request(
            body=frame(infer_message()), headers=[("grpc-accept-encoding", "identity,gzip")]))
        assert "grpc-encoding" not in headers and body[0] == 0
    finally:
        c.close()
