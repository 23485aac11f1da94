"""A Server on an event loop of its own thread, for callers that are not
on that loop: the in-process API (``pyserver.inprocess``) and
``EmbeddedServer``. Everything that touches the Server runs on its loop;
callers block on the answer or are called back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

__all__ = ["ServerHost"]


class ServerHost:
    """Starts ``server`` on a new loop thread (``start`` blocks until its
    models are loaded, raising what Server.start raises) and stops it."""

    def __init__(self, server, timeout_s: float | None = None):
        import uvloop

        self.server = server
        self._timeout = timeout_s
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="pyserver-inprocess",
                                        daemon=True)
        self._thread.start()
        self.thread_id = self._thread.ident
        self._running = False

    def start(self) -> None:
        try:
            self.call(self.server.start())
        except BaseException:
            self._end_loop()
            raise
        self._running = True

    def call(self, coro, timeout_s: float | None = None):
        """Runs ``coro`` on the loop and returns its result (raises its error)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout_s if timeout_s is not None else self._timeout)

    def run(self, fn, *args):
        """``fn(*args)`` on the loop's thread; its result or error. From the
        loop's own thread it is simply called."""
        if threading.get_ident() == self.thread_id:
            return fn(*args)
        done = concurrent.futures.Future()

        def run_there():
            try:
                done.set_result(fn(*args))
            except BaseException as e:  # handed to the caller's thread
                done.set_exception(e)

        self.loop.call_soon_threadsafe(run_there)
        return done.result(self._timeout)

    def post(self, fn, *args) -> None:
        """``fn(*args)`` on the loop soon, not waited for."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, exit_timeout_s: float = 30.0) -> None:
        """Stops taking requests, waits up to ``exit_timeout_s`` for those in
        flight (then fails them, as the CLI does), stops the models and the
        loop thread."""
        if not self._running:
            return
        self._running = False

        async def shut_down():
            server = self.server
            server.begin_shutdown()
            drained, _ = await server.drain_or_abandon(exit_timeout_s)
            await server.stop(None if drained else time.monotonic() + 1.0)

        try:
            self.call(shut_down(), exit_timeout_s + 60)
        finally:
            self._end_loop()

    def _end_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        if not self._thread.is_alive():
            self.loop.close()
