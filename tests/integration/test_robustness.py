"""What an attacker or a careless client can do to a running server (#27):
large bodies that must not leave their memory behind."""

import socket
import time

from tests.integration.test_cli import start_cli, wait_until_ready


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _send_body(port: int, size: int) -> bytes:
    header = (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],'
              b'"parameters":{"binary_data_size":64}}]}')
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                  % (len(header), size) + header)
        chunk = bytes(1 << 20)
        left = size - len(header)
        while left > 0:
            n = min(left, len(chunk))
            s.sendall(chunk[:n])
            left -= n
        return s.recv(4096)


def test_memory_of_a_large_body_is_returned_after_the_request(tmp_path):
    """#27 defect 6: after a 1 GiB body and two of 512 MiB the server's RSS
    comes back near where it started, instead of keeping the chunks the
    bodies arrived in (it kept ~240 MB)."""
    from pyserver.testing import write_add_sub

    write_add_sub(tmp_path)
    proc, client, ports = start_cli(["--model-repository", str(tmp_path)])
    try:
        wait_until_ready(client, proc)
        assert client.is_server_live()
        start = _rss_mb(proc.pid)
        for size in (1024 << 20, 512 << 20, 512 << 20):
            answer = _send_body(ports[0], size)
            assert answer.startswith(b"HTTP/1.1 400"), answer  # the data is too long
        time.sleep(1.0)
        after = _rss_mb(proc.pid)
        print(f"RSS {start:.0f} MB -> {after:.0f} MB")
        assert after < start + 48, f"RSS {start:.0f} MB -> {after:.0f} MB"
        assert client.is_server_ready()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
