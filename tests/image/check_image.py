"""Starts pyserver's image the way a container runtime would and talks to it.

No container engine runs here, so this does what one does, with buildah for
the image and util-linux for the rest: a working container from the image
(`buildah from`), its root filesystem mounted (`buildah mount`) and then, in
new mount and PID namespaces (`unshare`; the network is the host's), that
root remounted read-only with a fresh tmpfs on /tmp and /dev/shm, the model
repository bound read-only at /models, and the image's ENTRYPOINT + CMD run
as its USER (uid 1000) with exactly its ENV and WORKDIR. The server is PID 1
there, as in a container, so SIGTERM must stop it.

Then: ready within the deadline (start-to-ready time printed), an inference
over HTTP and one over gRPC with tritonclient, the image's HEALTHCHECK command
run inside the container's namespaces (`nsenter`, as `docker exec` would)
passes, and fails against a port nobody serves, nothing but /tmp is writable,
and SIGTERM stops the server with status 0. Then once more as KServe's Triton
runtime starts it (no command; args `tritonserver --model-store=/models ...`),
which must serve too, with /opt/tritonserver/bin/tritonserver (Triton's path
for the command) runnable. Everything is torn down on every exit path; each
wait has a deadline.

    python tests/image/check_image.py --image localhost/pyserver:cpu \
        --models DIR --workdir DIR [--buildah "buildah ..."]

Run as root (docker/image.sh test does, with buildah's storage under build/).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

# Runs on the host in the new mount namespace, then becomes the server.
# $1 root, $2 models, $3 user, $4 workdir, the rest: env -i NAME=VALUE... CMD...
_SETUP = r"""
set -eu
root=$1 models=$2 user=$3 workdir=$4
shift 4
mount --make-rprivate /
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount -o remount,bind,ro "$root/sys" 2>/dev/null || true
mount -t tmpfs -o mode=755,size=1m tmpfs "$root/dev"
for node in null zero full random urandom tty; do
  touch "$root/dev/$node"
  mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir -p "$root/dev/shm" "$root/dev/pts"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -t tmpfs -o mode=1777,size=256m tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=1777,size=512m tmpfs "$root/tmp"
mkdir -p "$root/models"
mount --bind "$models" "$root/models"
mount -o remount,bind,ro "$root/models"
mount -o remount,bind,ro "$root"
exec chroot --userspec="$user" "$root" /usr/bin/env -i -C "$workdir" "$@"
"""


class Failure(Exception):
    pass


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Container:
    def __init__(self, buildah: list[str], image: str, workdir: Path):
        self.buildah = buildah
        self.image = image
        self.workdir = workdir
        self.name = f"pyserver-image-test-{os.getpid()}"
        self.root: str | None = None
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.models: Path | None = None
        self.log_path = workdir / "server.log"
        self.log = None
        config = json.loads(self._buildah("inspect", "--type", "image", image))
        docker = config.get("Docker", {}).get("config", {}) or {}
        oci = config.get("OCIv1", {}).get("config", {}) or {}
        self.env = oci.get("Env") or docker.get("Env") or []
        self.entrypoint = oci.get("Entrypoint") or docker.get("Entrypoint") or []
        self.cmd = oci.get("Cmd") or docker.get("Cmd") or []
        self.user = oci.get("User") or docker.get("User") or ""
        self.cwd = oci.get("WorkingDir") or docker.get("WorkingDir") or "/"
        self.healthcheck = (docker.get("Healthcheck") or {}).get("Test") or []
        self.labels = oci.get("Labels") or docker.get("Labels") or {}
        self.exposed = sorted((oci.get("ExposedPorts") or docker.get("ExposedPorts") or {}).keys())

    def _buildah(self, *args: str, timeout: float = 120) -> str:
        out = subprocess.run([*self.buildah, *args], capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise Failure(f"{shlex.join(['buildah', *args])} failed: {out.stderr.strip()}")
        return out.stdout.strip()

    def create(self) -> None:
        self._buildah("from", "--pull=never", "--name", self.name, self.image)
        self.root = self._buildah("mount", self.name)

    def start(self, args: list[str], env: dict[str, str], cmd: list[str] | None = None) -> None:
        """ENTRYPOINT + CMD + args; `cmd` replaces the image's CMD, as
        `docker run IMAGE ARGS...` or a pod's `args` do."""
        environment = dict(e.split("=", 1) for e in self.env)
        environment.update(env)
        command = [*self.entrypoint, *(self.cmd if cmd is None else cmd), *args]
        if self.log:
            self.log.close()
        self.log = open(self.log_path, "ab")
        self.pid = None
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
             "sh", "-c", _SETUP, "setup", self.root, str(self.models), self.user or "0:0", self.cwd,
             *(f"{k}={v}" for k, v in environment.items()), *command],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def server_pid(self, timeout: float = 10) -> int:
        """The server's host PID: unshare's child (PID 1 in the namespace)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            except OSError:
                children = []
            if children:
                # The setup script's process becomes the server (exec); it
                # is past the setup once its root is the container's.
                pid = int(children[0])
                try:
                    if os.readlink(f"/proc/{pid}/root") != "/":
                        return pid
                except OSError:
                    pass
            if self.proc.poll() is not None:
                raise Failure(f"the container exited with status {self.proc.returncode} before the server started")
            time.sleep(0.1)
        raise Failure("the server's process did not appear")

    def exec(self, command: list[str], env: dict[str, str] | None = None, timeout: float = 30,
             user: str | None = None) -> subprocess.CompletedProcess:
        """`docker exec`: a command in the server's mount namespace, root and cwd, as USER."""
        environment = dict(e.split("=", 1) for e in self.env)
        environment.update(env or {})
        uid, _, gid = (user or self.user or "0:0").partition(":")
        nsenter = ["nsenter", "--target", str(self.pid), "--mount", "--pid", "--root", "--wd",
                   f"--setuid={uid}", f"--setgid={gid or uid}"]
        return subprocess.run([*nsenter, "/usr/bin/env", "-i",
                               *(f"{k}={v}" for k, v in environment.items()), *command],
                              capture_output=True, text=True, timeout=timeout)

    def stop(self, timeout: float = 40) -> int | None:
        """SIGTERM to the server (PID 1 in its namespace); its exit status, or None if it hung."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def remove(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # --kill-child: the server dies with unshare.
            os.killpg(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.log:
            self.log.close()
        for args in (("umount", self.name), ("rm", self.name)):
            try:
                self._buildah(*args, timeout=60)
            except (Failure, subprocess.TimeoutExpired) as e:
                print(f"cleanup: {e}", file=sys.stderr)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _wait_ready(container: Container, url: str, timeout: float) -> float:
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        if container.proc.poll() is not None:
            raise Failure(f"the server exited with status {container.proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.1)
    raise Failure(f"{url} was not ready within {timeout:.0f} s")


def _check_infer(http_port: int, grpc_port: int) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.0, dtype=np.float32)
    for name, module, url in (("HTTP", httpclient, f"127.0.0.1:{http_port}"),
                              ("gRPC", grpcclient, f"127.0.0.1:{grpc_port}")):
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput("INPUT0", [1, 16], "FP32"), module.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        if not (np.array_equal(result.as_numpy("OUTPUT0"), a + b) and
                np.array_equal(result.as_numpy("OUTPUT1"), a - b)):
            raise Failure(f"{name} infer: wrong outputs")
        client.close()
        print(f"  {name} infer on add_sub: ok")


def _stop(container: Container, timeout: float) -> None:
    code = container.stop(timeout=timeout)
    if code is None:
        raise Failure(f"SIGTERM did not stop the server within {timeout:.0f} s")
    if code != 0:
        raise Failure(f"the server exited with status {code} on SIGTERM")
    print("  SIGTERM: stopped with status 0")


def run(args: argparse.Namespace) -> float:
    buildah = shlex.split(args.buildah)
    container = Container(buildah, args.image, Path(args.workdir))
    container.models = Path(args.models).resolve()
    print(f"image {args.image}: entrypoint {container.entrypoint} cmd {container.cmd} user "
          f"{container.user!r} workdir {container.cwd} ports {container.exposed}")
    if container.user.split(":")[0] != "1000":
        raise Failure(f"the image's USER is {container.user!r}, not 1000")
    if not container.healthcheck or container.healthcheck[0] not in ("CMD", "CMD-SHELL"):
        raise Failure(f"the image has no HEALTHCHECK (built without --format docker?): {container.healthcheck}")
    for want in ("8000/tcp", "8001/tcp", "8002/tcp"):
        if want not in container.exposed:
            raise Failure(f"the image does not EXPOSE {want}")
    for label in ("org.opencontainers.image.title", "org.opencontainers.image.revision"):
        if label not in container.labels:
            raise Failure(f"the image has no label {label}")
    http_port, grpc_port, metrics_port = _free_ports(3)
    try:
        container.create()
        started = time.monotonic()
        container.start([f"--http-port={http_port}", f"--grpc-port={grpc_port}",
                         f"--metrics-port={metrics_port}"], {"HEALTHCHECK_PORT": str(http_port)})
        container.pid = container.server_pid()
        _wait_ready(container, f"http://127.0.0.1:{http_port}/v2/health/ready", args.ready_timeout)
        ready = time.monotonic() - started
        print(f"  ready {ready:.2f} s after start (container setup included)")
        status = Path(f"/proc/{container.pid}/status").read_text()
        uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
        if uid != "1000":
            raise Failure(f"the server runs as uid {uid}, not 1000")
        print("  runs as uid 1000, PID 1 of its namespace")
        # the image installs jemalloc, and the command re-executes onto it
        # (pyserver/runtime/allocator.py) without changing the PID
        if "libjemalloc" not in Path(f"/proc/{container.pid}/maps").read_text():
            raise Failure("the server does not run on jemalloc (libjemalloc2 missing from the image?)")
        print("  malloc: jemalloc")
        _check_infer(http_port, grpc_port)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            if b"nv_inference_request_success" not in r.read():
                raise Failure("metrics: no nv_inference_request_success")
        print("  metrics: ok")

        kind, *test = container.healthcheck
        command = test if kind == "CMD" else ["/bin/sh", "-c", test[0]]
        good = container.exec(command, {"HEALTHCHECK_PORT": str(http_port)})
        if good.returncode != 0:
            raise Failure(f"HEALTHCHECK failed with status {good.returncode}: {good.stderr.strip()[-500:]}")
        bad = container.exec(command, {"HEALTHCHECK_PORT": str(_free_ports(1)[0])})
        if bad.returncode == 0:
            raise Failure("HEALTHCHECK passes against a port nobody serves")
        print("  HEALTHCHECK: passes, and fails against a dead port")

        # As root, so that only a read-only mount (not permissions) refuses.
        probe = container.exec(["/bin/sh", "-c", "touch /tmp/probe || exit 1; "
                                "for f in /probe /opt/probe /models/probe; do "
                                "touch $f 2>&1 | grep -q 'Read-only file system' || exit 2; done"], user="0:0")
        if probe.returncode != 0:
            raise Failure(f"only /tmp should be writable (status {probe.returncode}): {probe.stderr.strip()}")
        print("  root filesystem and /models read-only, /tmp writable")

        _stop(container, args.stop_timeout)

        # KServe's Triton runtime: no command, the args `tritonserver` and
        # its flags (here the ports too). The entrypoint runs them as given.
        container.start([], {}, cmd=["tritonserver", "--model-store=/models", f"--http-port={http_port}",
                                     f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}",
                                     "--allow-grpc=true", "--allow-http=true"])
        container.pid = container.server_pid()
        _wait_ready(container, f"http://127.0.0.1:{http_port}/v2/health/ready", args.ready_timeout)
        _check_infer(http_port, grpc_port)
        triton_path = container.exec(["/opt/tritonserver/bin/tritonserver", "--help"])
        if triton_path.returncode != 0 or not triton_path.stdout.startswith("usage: tritonserver"):
            raise Failure(f"/opt/tritonserver/bin/tritonserver --help: status {triton_path.returncode}")
        print("  KServe's args (tritonserver first) serve; /opt/tritonserver/bin/tritonserver runs")
        _stop(container, args.stop_timeout)
        return ready
    except Failure:
        print(f"--- server log (last lines; all in {container.log_path}) ---\n{container.tail()}",
              file=sys.stderr)
        raise
    finally:
        container.remove()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True)
    p.add_argument("--models", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--buildah", default="buildah")
    p.add_argument("--ready-timeout", type=float, default=120)
    p.add_argument("--stop-timeout", type=float, default=45)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("check_image.py: run as root (mounts and chroot)", file=sys.stderr)
        return 2
    try:
        run(args)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"check_image.py: FAILED: {e}", file=sys.stderr)
        return 1
    print("check_image.py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
