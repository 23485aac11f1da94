"""In-process servers for integration tests: a real Server and HttpFrontend
on a uvloop loop in a background thread, bound to 127.0.0.1 on a free port."""

import asyncio
import threading
from pathlib import Path

import pytest
import uvloop

from pyserver.frontends.http import HttpFrontend
from pyserver.server.server import Server


class RunningServer:
    def __init__(self, repo, **server_kwargs):
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = Server(str(repo), **server_kwargs)
        self.http = HttpFrontend(self.server, "127.0.0.1", 0)
        try:
            self.call(self.server.start())
            self.call(self.http.start())
        except BaseException:
            self.close()
            raise
        self.url = f"127.0.0.1:{self.http.port}"

    def call(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn, *args):
        """Runs a plain function on the server's loop thread."""
        async def wrapper():
            return fn(*args)
        return self.call(wrapper())

    def close(self):
        try:
            self.call(self.http.stop())
            self.call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture
def start_server():
    started = []

    def start(repo, **kwargs):
        s = RunningServer(repo, **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


# Where a Python model's instances run (pyserver_execution_mode): tests of
# what a model sees and may do run in both.
PYTHON_MODES = ("process", "thread")
THREAD_MODE = 'parameters { key: "pyserver_execution_mode" value { string_value: "thread" } }'


def use_execution_mode(repo, mode: str) -> None:
    """Makes every Python model in ``repo`` run in ``mode``."""
    if mode == "process":
        return
    for config in Path(repo).glob("*/config.pbtxt"):
        text = config.read_text()
        if 'backend: "python"' in text:
            config.write_text(text + "\n" + THREAD_MODE + "\n")


@pytest.fixture(params=PYTHON_MODES)
def python_mode(request):
    return request.param
