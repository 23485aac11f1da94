"""The Python backend, server side: one worker process per model instance,
started, fed and supervised from here.

A ``ProcessPythonBackend`` is one instance (the registry builds one per instance).
Its constructor starts the worker (``stub.py`` in a fresh interpreter, with
its sockets and shared regions inherited) and waits until the model's
``initialize`` has run; a failure there fails the load with the model's
traceback. ``execute_requests`` (called on the instance's thread, one batch
at a time) writes the batch's tensors into the input region, sends one
message, and reads back one per-request result each.

Decoupled models answer through their requests' response senders: each
response arrives on the worker's control channel (read by its own thread)
and goes into the request's ResponseStream (see Server.submit_stream),
during execute or long after; the batch completing only releases the
requests. A BLS call, a custom metric or model control from the model is
handled by services.py.

Supervision: a waiter thread per worker notices its exit however it happens.
A worker that dies fails the batch it was running with an error that names
the model, the instance, the exit code or signal and the Python traceback of
a fatal signal; ``healthy()`` is False until a new worker (restarted at once,
then with backoff if it keeps failing) has initialized again.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pyserver.backends._common import instance_host_placement
from pyserver.backends.base import RESCHEDULED, Capability
from pyserver.backends.python import channel
from pyserver.backends.python.execution_env import execution_env
from pyserver.backends.python.instance import (
    EXECUTE_TIMEOUT_PARAMETER,
    ServedInstance,
    code_of,
    execute_timeout,
    log_from_model,
    word_parameter,
    worker_error,
)
from pyserver.backends.python.loop_driver import WorkerLoopDriver
from pyserver.config import instance_count
from pyserver.engine import now_ns
from pyserver.engine.worker_relay import GroupSender, ResultReader, batch_start
from pyserver.kernel.dtypes import (
    BYTES_CODE,
    CODE_TO_NUMPY,
)
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")

# Queued batches go to a worker in groups (backends/python/loop_driver.py) while its
# regions stay this small. A group's outputs all stay in the output region
# until the server has read the last of them, so for tensors of megabytes a
# group would grow the region by that many batches at once: those go one
# batch per message.
GROUP_REGION_LIMIT = 8 << 20

STUB_PATH = str(Path(__file__).with_name("stub.py"))
# Thread pools of numeric libraries read these at import; each worker gets
# its share of the cores unless the server's environment already says.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
FINALIZE_TIMEOUT_S = 30.0
RESTART_WAIT_S = 30.0  # how long a request waits for a restarting worker
ASYNC_REGION_SIZE = 64 << 10  # each of the two asynchronous regions, to start with
IS_READY_TIMEOUT_S = 5.0
_RESTART_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)



class WorkerExited(Exception):
    """The worker process went away while it was being talked to."""


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


class _Worker:
    """One worker process and the channels and regions to it."""

    def __init__(self, mode: str, label: str, env: dict, on_exit=None,
                 python: str = sys.executable):
        kind = channel.shm_kind()
        self.kind = kind
        self.label = label
        main_parent, main_child = channel.channel_pair()
        ctrl_parent, ctrl_child = channel.channel_pair()
        child_socks = (*main_child, *ctrl_child)
        fds = [channel.create_fd(kind, f"{label}-in"), channel.create_fd(kind, f"{label}-out"),
               channel.create_fd(kind, f"{label}-crash"), channel.create_fd(kind, f"{label}-up"),
               channel.create_fd(kind, f"{label}-down")]
        size = channel.DEFAULT_REGION_SIZE
        try:
            self.inp = channel.Region(fds[0], size, reserve=True)
            self.out = channel.Region(fds[1], size, reserve=True)
            self.crash_fd = fds[2]
            # The asynchronous traffic (decoupled responses, BLS): "up" is
            # written by the worker, "down" by us, block by block.
            self.up = channel.Region(fds[3], ASYNC_REGION_SIZE, reserve=True)
            self.down = channel.Arena(channel.Region(fds[4], ASYNC_REGION_SIZE, reserve=True))
            args = [python, STUB_PATH, mode, _fd_pair(main_child), _fd_pair(ctrl_child),
                    str(fds[0]), str(fds[1]), str(fds[2]), str(size),
                    str(fds[3]), str(fds[4]), str(ASYNC_REGION_SIZE)]
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                args, env=env, stdin=subprocess.DEVNULL, close_fds=True,
                pass_fds=(*(s.fileno() for s in child_socks), *fds))
        except BaseException:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            for sock in (*main_parent, *ctrl_parent):
                sock.close()
            raise
        finally:
            for sock in child_socks:
                sock.close()
        self.pid = self.proc.pid
        self.main = channel.Channel(main_parent[0], send_sock=main_parent[1])
        self.ctrl = channel.Channel(ctrl_parent[0], send_sock=ctrl_parent[1])
        self.exited = threading.Event()
        self.returncode: int | None = None
        self.crash_report = ""
        # Batches sent and not yet answered, and when it last made progress
        # (a batch sent or answered): what the hang watch looks at.
        self.outstanding = 0
        self.progress = 0.0
        self.hung_after = 0.0  # set when it was stopped as hung (seconds)
        self.has_is_ready = False
        self.ready = False
        self.closing = False
        self.on_exit = on_exit
        self.exit_handled = False
        self.on_log = None
        self.on_message = None  # the backend's handler of the worker's other requests
        self._ready_lock = threading.Lock()
        self._ready_cv = threading.Condition()
        self._ready_replies: dict[int, tuple] = {}
        self._ready_seq = 0
        threading.Thread(target=self._wait, name=f"python-waiter:{label}", daemon=True).start()
        self._reader = threading.Thread(target=self._read_control, name=f"python-ctrl:{label}",
                                        daemon=True)
        self._reader.start()

    # -- supervision (own threads) --------------------------------------------------

    def _wait(self):
        self.returncode = self.proc.wait()
        try:
            self.crash_report = os.pread(self.crash_fd, 1 << 16, 0).decode("utf-8", "replace").strip()
        except OSError:
            self.crash_report = ""
        # Unblock whoever is waiting on the sockets (a process the model
        # forked may still hold the worker's ends open).
        for ch in (self.main, self.ctrl):
            ch.shutdown()
        self.exited.set()
        with self._ready_cv:
            self._ready_cv.notify_all()
        if self.on_exit is not None:
            self.on_exit(self)

    def _read_control(self):
        while True:
            try:
                msg = self.ctrl.recv()
            except (EOFError, OSError):
                return
            kind = msg[0]
            if kind == "log":
                _, level, message, filename, line = msg
                if self.on_log is not None:
                    self.on_log(level, message, filename, line)
            elif kind == "is_ready":
                with self._ready_cv:
                    self._ready_replies[msg[1]] = msg[2:]
                    self._ready_cv.notify_all()
            elif kind == "free":
                self.down.free(msg[1])
            elif self.on_message is not None:
                try:
                    self.on_message(self, msg)
                except Exception as err:  # a bad message must not end the reader
                    log.exception("python worker %s: failed to handle %r", self.label, kind)
                    if len(msg) > 1 and type(msg[1]) is int:
                        self.reply(msg[1], ("error", "INTERNAL", f"{type(err).__name__}: {err}"))

    def reply(self, seq: int, payload, final: bool = True) -> None:
        """Answers the worker's request ``seq`` (on the control channel)."""
        try:
            self.ctrl.send(("reply", seq, payload, final))
        except OSError:
            pass  # it is gone; its waiters went with it

    def write_tensors(self, tensors) -> tuple:
        """(name, code, array)s into blocks of the region the worker reads
        (it frees them once copied out): (the region's size, their encoding)."""
        encoded, _offsets = self.down.write(tensors)
        return self.down.region.size, encoded

    def exit_text(self) -> str:
        if self.hung_after:
            return (f"did not finish a batch within {self.hung_after:g} s "
                    f"({EXECUTE_TIMEOUT_PARAMETER}) and was killed")
        return describe_exit(self.returncode)

    def report(self) -> str:
        """What the worker wrote before dying (faulthandler's traceback of
        the crashing thread, or our own last traceback; for a hung one, the
        stacks of its threads when it was stopped), or ""."""
        if self.hung_after and self.crash_report:
            # The thread that took the signal (the one executing) first.
            stacks = sorted(self.crash_report.split("\n\n"),
                            key=lambda text: not text.startswith("Current thread"))
            return "Where its threads were when it was stopped:\n" + "\n\n".join(stacks)
        return _crash_summary(self.crash_report)

    def stop_hung(self, timeout: float) -> None:
        """Stops a worker that has not answered a batch for ``timeout`` s:
        its threads' stacks go to the crash descriptor first (faulthandler
        on SIGUSR1, see stub.py), then it is killed. Its exit is then
        handled as a crash's: the batch fails, the worker is restarted."""
        self.hung_after = timeout
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except OSError:
            return
        deadline = time.monotonic() + 1.0  # a stopped process never writes
        while time.monotonic() < deadline and not self.exited.is_set():
            try:
                if os.pread(self.crash_fd, 1, 0):
                    time.sleep(0.05)  # the rest of the dump
                    break
            except OSError:
                break
            time.sleep(0.01)
        try:
            self.proc.kill()  # not kill(): that is a planned stop, not restarted
        except OSError:
            pass

    # -- requests (the caller's thread) ---------------------------------------------

    def call(self, msg):
        """Sends one message and returns the reply (no questions expected)."""
        try:
            self.main.send(msg)
            return self.main.recv()
        except (EOFError, OSError):
            raise WorkerExited() from None

    def is_ready(self, timeout: float) -> tuple[bool, str | None]:
        with self._ready_lock:  # one check in flight per worker
            self._ready_seq += 1
            seq = self._ready_seq
            try:
                self.ctrl.send(("is_ready", seq))
            except OSError:
                return (False, "the worker is not running")
            deadline = time.monotonic() + timeout
            with self._ready_cv:
                while seq not in self._ready_replies:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.exited.is_set():
                        return (False, f"is_ready() did not answer within {timeout:g} s"
                                if not self.exited.is_set() else "the worker is not running")
                    self._ready_cv.wait(left)
                return self._ready_replies.pop(seq)

    def stop(self, timeout: float) -> str | None:
        """Finalizes the model and ends the process (killed after timeout).
        Returns finalize's error, if any."""
        self.closing = True
        error = None
        if not self.exited.is_set():
            try:
                self.main.send(("finalize",))
                deadline = time.monotonic() + timeout
                self.main.sock.settimeout(timeout)
                reply = self.main.recv()
                if reply[0] == "finalized":
                    error = reply[1]
                self.proc.wait(max(0.1, deadline - time.monotonic()))
            except (EOFError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        return error

    def kill(self):
        self.closing = True
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        self.exited.wait(10)
        if threading.current_thread() is not self._reader:
            self._reader.join(1.0)  # the last log records the worker sent
        self.main.close()
        self.ctrl.close()
        self.inp.close()
        self.out.close()
        self.up.close()
        self.down.region.close()
        try:
            os.close(self.crash_fd)
        except OSError:
            pass


class ProcessPythonBackend(ServedInstance):
    """One instance of a Triton Python model (``backend: "python"``) in its
    own worker process (``pyserver_execution_mode`` "process", the default)."""

    # The batch goes to the model as separate requests (Triton's
    # execute(requests) API), executed in the worker process; BLS, metrics
    # and model control go to the server's context. Each instance adds what
    # its model allows (see __init__).
    capabilities = Capability.TAKES_REQUESTS | Capability.OUT_OF_PROCESS | \
        Capability.SERVER_CONTEXT | Capability.TAKES_PLAIN_RECORDS

    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int,
                 context=None):
        super().__init__(model_path, config, instance_name, context)
        self.threads = max(1, int(threads))
        self.shm_kind = channel.shm_kind()
        self._env = _worker_env(self.threads, sum(instance_count(g) for g in config.instance_group))
        scheduling = self._env["PYSERVER_PYTHON_SCHED"] = worker_scheduling(config, self._env)
        # "auto": the loop driver reports each group's start delay here
        self.start_watch = StartDelayWatch() if scheduling == "auto" and hasattr(
            os, "SCHED_BATCH") else None
        # EXECUTION_ENV_PATH: the model's own Python environment.
        exec_env = execution_env(config, str(Path(self.model_path).parent.parent))
        self._python = sys.executable if exec_env is None else exec_env.python
        if exec_env is not None:
            self._env = exec_env.apply(self._env)
        self._lock = threading.Lock()  # held while a batch is in the worker
        # A group of batches into a worker, and a worker's "result" message
        # into each request's result. The event loop's relay uses them
        # alone where nothing more is to be done (send_batches and
        # on_main_message: a decoupled model's requests open and reopen).
        self.sender = GroupSender(self.input_codes, code_of, BYTES_CODE, self.output_names,
                                  self.state_outputs, self.model_name, self.version)
        self.results = ResultReader(CODE_TO_NUMPY, worker_error, RESCHEDULED)
        self.plain_sender = None if self.decoupled else self.sender
        self.plain_results = None if self.decoupled else self.results
        self._state = threading.Condition()
        self._closing = False
        self._restarting = False
        self._down_reason = ""
        self._restarts = 0
        self._restart_thread: threading.Thread | None = None
        self._worker: _Worker | None = None
        self.execute_timeout = execute_timeout(config)
        self._host_policies = context.host_policies if context is not None else None
        worker = _prestarted.claim(self.model_path, config, instance_name)
        if worker is None:
            worker = self._launch(instance_name)
        try:
            # The first instance of a version starts the workers of the
            # others too, so N instances initialize side by side.
            names = _instance_names(config)
            if len(names) > 1 and names[0] == instance_name:
                for other in names[1:]:
                    _prestarted.put(self.model_path, config, other, self._launch(other))
            self._await_ready(worker, instance_name)
        except BaseException:
            worker.kill()
            _prestarted.discard(self.model_path, config)
            raise
        worker.on_exit = self._worker_exited
        self._worker = worker
        if worker.exited.is_set():  # it died between its answer and now
            self._worker_exited(worker)
        caps = type(self).capabilities
        if not self.decoupled:
            # a batch is one message to the worker and its answers on the
            # same socket, which the event loop can drive (loop_driver.py)
            caps |= Capability.LOOP_DRIVEN
        if worker.has_is_ready:  # the model answers readiness itself
            caps |= Capability.READINESS
        self.capabilities = caps
        self.start_seconds = time.monotonic() - worker.started
        if self.execute_timeout:
            threading.Thread(target=self._watch_for_hangs, name=f"python-hangs:{instance_name}",
                             daemon=True).start()
        log.info("python model '%s' instance '%s': worker pid %d ready in %.0f ms "
                 "(tensors through %s shared memory)", self.model_name, instance_name,
                 worker.pid, self.start_seconds * 1000, self.shm_kind)

    # -- worker lifecycle ---------------------------------------------------------------

    def _launch(self, instance_name: str) -> _Worker:
        """Starts a worker and sends it its initialize request (no waiting).
        It starts under the instance's host policy (--host-policy), which it
        and every thread it makes inherit: where they run and allocate."""
        placement = instance_host_placement(self.config, instance_name, self._host_policies)
        with placement.applied():
            worker = _Worker("instance", instance_name, self._env, python=self._python)
        worker.on_log = functools.partial(log_from_model, instance_name)
        worker.on_message = self._on_worker_message
        info = {"model_path": self.model_path, "runtime_model": self.runtime_model,
                "model_name": self.model_name, "instance_name": instance_name,
                "args": self._init_args(instance_name), "decoupled": self.decoupled}
        try:
            worker.main.send(("init", info))
        except OSError:
            pass  # it already died: _await_ready reports how
        return worker

    def _await_ready(self, worker: _Worker, instance_name: str) -> None:
        """Waits for the worker's answer to initialize; raises ServerError
        with the model's error (or the way the process ended)."""
        try:
            reply = worker.main.recv()
        except (EOFError, OSError):
            worker.exited.wait(10)
            text = worker.exit_text()
            report = worker.report()
            worker.kill()
            raise ServerError(Code.INTERNAL,
                              f"python model '{self.model_name}' instance '{instance_name}': "
                              f"the worker process (pid {worker.pid}) {text} while starting"
                              + (f"\n{report}" if report else "")) from None
        if reply[0] != "ready":
            worker.closing = True
            worker.kill()
            raise ServerError(Code.INTERNAL, reply[1])
        worker.has_is_ready = reply[1]
        worker.ready = True

    def _start_worker(self) -> _Worker:
        worker = self._launch(self.instance_name)
        self._await_ready(worker, self.instance_name)
        return worker

    def _worker_exited(self, worker: _Worker):
        """Waiter thread: a worker process ended."""
        if worker.closing:
            return
        with self._state:
            if self._closing or worker is not self._worker or worker.exit_handled:
                return
            worker.exit_handled = True
            self._down_reason = (f"its worker process (pid {worker.pid}) {worker.exit_text()}")
            self._restarting = True
            self._state.notify_all()
        report = worker.report()
        # What the worker sent before it died is still in its control
        # socket: let the reader hand it on (it ends at the socket's EOF) so
        # the open requests' errors come after their last responses.
        if threading.current_thread() is not worker._reader:
            worker._reader.join(5.0)
        self._fail_open(ServerError(
            Code.INTERNAL,
            f"python model '{self.model_name}' instance '{self.instance_name}': the worker "
            f"process (pid {worker.pid}) {worker.exit_text()} before sending the final response"
            + (f"\n{report}" if report else "")))
        log.error("python model '%s' instance '%s': worker process (pid %d) %s; restarting it%s",
                  self.model_name, self.instance_name, worker.pid, worker.exit_text(),
                  "\n" + report if report else "")
        self._restart_thread = threading.Thread(
            target=self._restart, name=f"python-restart:{self.instance_name}", daemon=True)
        self._restart_thread.start()

    def _restart(self):
        attempt = 0
        while True:
            delay = _RESTART_BACKOFF_S[min(attempt, len(_RESTART_BACKOFF_S) - 1)]
            with self._state:
                if delay:
                    self._state.wait_for(lambda: self._closing, delay)
                if self._closing:
                    self._restarting = False
                    self._state.notify_all()
                    return
                self._restarting = True
            try:
                worker = self._start_worker()
            except Exception as err:
                attempt += 1
                reason = err.message if isinstance(err, ServerError) else repr(err)
                log.error("python model '%s' instance '%s': restart failed (attempt %d): %s",
                          self.model_name, self.instance_name, attempt, reason)
                with self._state:
                    self._down_reason = f"its worker process could not be restarted: {reason}"
                    self._restarting = False
                    self._state.notify_all()
                continue
            with self._state:
                closing = self._closing
                if not closing:
                    self._worker = worker
            if closing:  # unloaded while it restarted
                worker.stop(FINALIZE_TIMEOUT_S)
                with self._state:
                    self._restarting = False
                    self._state.notify_all()
                return
            with self._state:
                self._restarts += 1
                self._restarting = False
                self._down_reason = ""
                self._state.notify_all()
            log.info("python model '%s' instance '%s': worker restarted (pid %d)",
                     self.model_name, self.instance_name, worker.pid)
            worker.on_exit = self._worker_exited
            if worker.exited.is_set():  # it died already: go round again
                self._worker_exited(worker)
            return

    def _watch_for_hangs(self) -> None:
        """Own thread, with pyserver_execute_timeout_seconds set: stops the
        worker when a batch gets no answer within the timeout."""
        timeout = self.execute_timeout
        tick = min(1.0, timeout / 4)
        while True:
            with self._state:
                if self._state.wait_for(lambda: self._closing, tick):
                    return
            worker = self._worker
            if (worker is None or not worker.outstanding or worker.hung_after
                    or worker.exited.is_set() or time.monotonic() - worker.progress < timeout):
                continue
            log.error("python model '%s' instance '%s': its worker (pid %d) has not finished a "
                      "batch within %g s (%s): stopping it", self.model_name,
                      self.instance_name, worker.pid, timeout, EXECUTE_TIMEOUT_PARAMETER)
            worker.stop_hung(timeout)

    def _live_worker(self) -> _Worker:
        """The worker to send a batch to, waiting for a restart in progress."""
        worker = self._worker
        if worker is not None and worker.ready and not worker.exited.is_set():
            return worker
        deadline = time.monotonic() + RESTART_WAIT_S
        with self._state:
            while True:
                if self._closing:
                    reason = "it is stopping"
                    break
                worker = self._worker
                if worker is not None and worker.ready and not worker.exited.is_set():
                    return worker
                # Down: wait while a restart is under way (or about to be);
                # fail at once when the last restart failed.
                if not self._restarting and self._down_reason:
                    reason = self._down_reason
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    reason = self._down_reason or "its worker process is restarting"
                    break
                self._state.wait(min(left, 0.5))
        raise ServerError(Code.UNAVAILABLE,
                          f"python model '{self.model_name}' instance '{self.instance_name}' "
                          f"is not available: {reason}")

    def loop_driver(self, mv, instance, loop) -> WorkerLoopDriver:
        return WorkerLoopDriver(mv, instance, loop)

    def healthy(self) -> bool:
        """True while the instance's worker is running and initialized."""
        worker = self._worker
        return (not self._closing and worker is not None and worker.ready
                and not worker.exited.is_set())

    def is_ready(self, timeout: float = IS_READY_TIMEOUT_S) -> bool:
        """healthy(), and the model's own is_ready() when it defines one
        (answered within ``timeout`` seconds, else not ready)."""
        if not self.healthy():
            return False
        worker = self._worker
        if not worker.has_is_ready:
            return True
        ready, error = worker.is_ready(timeout)
        if error:
            log.warning("python model '%s' instance '%s': is_ready: %s", self.model_name,
                        self.instance_name, error)
        return ready

    @property
    def pid(self) -> int | None:
        worker = self._worker
        return worker.pid if worker is not None and not worker.exited.is_set() else None

    @property
    def restarts(self) -> int:
        return self._restarts

    def kill(self):
        """A forced stop (the server's exit timeout passed): the worker ends
        now, without finalize, as Triton exits then without unloading; close()
        then fails what the worker never answered."""
        worker = self._worker
        if worker is not None:
            worker.kill()

    def close(self):
        with self._state:
            self._closing = True
            self._state.notify_all()
        self.release_services()
        restart = self._restart_thread
        if restart is not None and restart is not threading.current_thread():
            restart.join(FINALIZE_TIMEOUT_S)  # it stops the worker it was starting
        worker = self._worker
        if worker is None:
            return
        # A batch still in the worker (its thread was given up on) cannot be
        # finalized politely: end the process.
        if worker.closing:
            pass  # killed already (a forced stop)
        elif self._lock.acquire(timeout=1.0):
            try:
                error = worker.stop(FINALIZE_TIMEOUT_S)
            finally:
                self._lock.release()
            if error:
                log.error("python model '%s' instance '%s': finalize failed: %s",
                          self.model_name, self.instance_name, error)
        else:
            worker.kill()
        # Decoupled requests the model never finished (what finalize let it
        # send has arrived: the worker is gone).
        self._fail_open(ServerError(
            Code.UNAVAILABLE,
            f"python model '{self.model_name}' instance '{self.instance_name}' was unloaded "
            "before sending the final response"))

    # -- execution (the instance thread) ---------------------------------------------

    def execute(self, inputs: dict) -> dict:
        raise ServerError(Code.INTERNAL, "the python backend takes requests, not batches")

    def execute_requests(self, pending: list) -> list:
        """Runs one batch: ``pending`` are ModelVersion's PendingRequests
        (validated ``arrays``, the ``request``); returns per request a dict of
        outputs, an (outputs, response parameters) tuple, or a ServerError."""
        worker = self._live_worker()
        with self._lock:
            try:
                return self._execute(worker, pending)
            except WorkerExited:
                raise self.exited_error(worker, len(pending)) from None

    def exited_error(self, worker: _Worker, count: int) -> ServerError:
        """The error of a batch of ``count`` requests whose worker died
        under it (waits for the exit to be known, at most 10 s)."""
        worker.exited.wait(10)
        report = worker.report()
        return ServerError(
            Code.INTERNAL,
            f"python model '{self.model_name}' instance '{self.instance_name}': the worker "
            f"process (pid {worker.pid}) {worker.exit_text()} while executing a batch of "
            f"{count} request(s); it is being restarted" + (f"\n{report}" if report else ""))

    def _execute(self, worker: _Worker, pending: list) -> list:
        try:
            self.send_batch(worker, pending)
            while True:
                results = self.on_main_message(worker, worker.main.recv(), pending)
                if results is not None:
                    return results
        except (EOFError, OSError):
            raise WorkerExited() from None

    # -- one batch, step by step (also driven from the event loop: loop_driver.py) -----

    def take_worker(self) -> _Worker | None:
        """The live worker, reserved for one batch (release_worker() after
        it), or None at once when it is down or busy."""
        if not self._lock.acquire(blocking=False):
            return None
        worker = self._worker
        if worker is not None and worker.ready and not worker.exited.is_set():
            return worker
        self._lock.release()
        return None

    def release_worker(self) -> None:
        self._lock.release()

    @staticmethod
    def main_fd(worker: _Worker) -> int:
        """The descriptor that becomes readable when the worker answers."""
        return worker.main.fileno()

    @staticmethod
    def drain_main(worker: _Worker) -> list:
        """The worker's messages that have all arrived, after one
        non-blocking read (Channel.drain); EOFError once it is gone."""
        try:
            return worker.main.drain()
        except OSError:  # the channel was closed under us (the worker is gone)
            raise EOFError("worker channel closed") from None

    def group_limit(self, limit: int) -> int:
        """How many batches may go to the worker in one message: ``limit``
        while its two regions together stay under GROUP_REGION_LIMIT, else
        one (see there)."""
        worker = self._worker
        if worker is None or worker.inp.size + worker.out.size > GROUP_REGION_LIMIT:
            return 1
        return limit

    def send_batch(self, worker: _Worker, pending: list) -> None:
        """Writes the batch's tensors into the worker's input region and
        sends it the batch (a short message; OSError when it is gone)."""
        self.send_batches(worker, [pending])

    def send_batches(self, worker: _Worker, batches: list,
                     load: int = channel.LOAD_BUSY) -> None:
        """send_batch for several batches in one message: the worker runs
        them one after the other, each as its own execute() call, and
        answers each as it ends (in order, on the same socket).
        ``load``: channel.LOAD_*, how busy the server is (it decides the
        worker's spin for its next message, see stub.py)."""
        groups = self.sender.pack(worker, batches)
        if self.decoupled:
            self._open_requests([p for pending in batches for p in pending], now_ns())
        self.sender.send_packed(worker, groups, load)

    def note_group_start(self, reply, sent_ns: int) -> None:
        """The first answer of a group sent at ``sent_ns`` ("auto"
        scheduling): once its worker's groups start late too often, it
        leaves SCHED_BATCH, and so do the workers that replace it."""
        watch = self.start_watch
        if watch is None or not watch.note(batch_start(reply, sent_ns) - sent_ns):
            return
        self.start_watch = None
        self._env["PYSERVER_PYTHON_SCHED"] = "normal"  # for restarts
        worker = self._worker
        if worker is None:
            return
        try:  # its main thread: the one that runs the batches
            os.sched_setscheduler(worker.pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError as err:
            log.warning("python model '%s' instance '%s': its worker could not leave "
                        "SCHED_BATCH: %s", self.model_name, self.instance_name, err)
            return
        log.info("python model '%s' instance '%s': its worker leaves SCHED_BATCH: more than %d "
                 "of %d groups waited over %d µs for a core (set %s to pin a policy)",
                 self.model_name, self.instance_name, watch.limit, watch.window,
                 watch.late_ns // 1000, SCHEDULING_PARAMETER)

    def on_main_message(self, worker: _Worker, reply, pending: list) -> list | None:
        """Handles one message of the worker about the batch in it: the
        batch's results (returned), a question answered (None), or its
        failure (raised as ServerError)."""
        kind = reply[0]
        if kind == "result":
            results = self.results.read(worker, reply)
            if self.decoupled:  # a rescheduled request opens again when it runs again
                self._close_open([p for p, r in zip(pending, results) if r is RESCHEDULED])
            return results
        worker.progress = time.monotonic()  # (a result's reader notes its own)
        if kind != "query":
            worker.outstanding -= 1
        if kind == "fail":
            error = ServerError(Code.INTERNAL, reply[1])
            if self.decoupled:
                # The batch's error is each request's final response,
                # pushed through its stream so that it arrives after
                # the responses sent before it (the event loop may see
                # the batch's completion before those).
                self._close_open(pending)
                for p in pending:
                    p.future.push(None, error, True)
            raise error
        if kind == "query":
            worker.main.send(("answer", self._answer(reply, pending)))
            return None
        raise ServerError(Code.INTERNAL,
                          f"python model '{self.model_name}': unexpected message "
                          f"{kind!r} from its worker")

    def _answer(self, query, pending):
        if query[1] == "cancelled":
            index = query[2]
            if 0 <= index < len(pending):
                future = pending[index].future
                return bool(future is not None and future.cancelled())
        return None

    # -- what the worker asks of the server (its control reader thread) ------------------

    def _on_worker_message(self, worker: _Worker, msg) -> None:
        kind = msg[0]
        if kind == "resp":
            self._on_response(worker, msg)
        elif kind == "cancelled":
            p = self._open.get(msg[2])
            worker.reply(msg[1], bool(p is not None and p.future.cancelled()))
        elif kind in ("bls", "bls_cancel", "metric", "model"):
            self.services().handle(worker, msg)
        else:
            log.warning("python model '%s': unexpected message %r from its worker",
                        self.model_name, kind)

    def _on_response(self, worker: _Worker, msg) -> None:
        """A response (or the final flag) sent by the model through a
        request's response sender: into the request's stream, then the
        sender is told it went (it waits, as Triton's does)."""
        _, seq, key, size, encoded, params, error, final = msg
        arrived = now_ns()
        outputs = None
        if encoded is not None:
            outputs = channel.read_tensors(worker.up, size, encoded, CODE_TO_NUMPY, copy=True)
        err = worker_error(*error) if error is not None else None
        # The data is copied out: its blocks may be reused.
        worker.reply(seq, self.deliver(key, outputs, params, err, final, arrived))

    # -- auto-complete (load time) ----------------------------------------------------

    @staticmethod
    def auto_complete_config(config, model_path: str, default_max_batch_size: int,
                             runtime_model: str = "") -> None:
        """Runs the model's ``auto_complete_config`` staticmethod (in a short
        lived worker) on ``config`` and puts the completed config in its place.
        Models whose source shows they cannot define one start no worker.
        ``runtime_model``: a Python-based backend's model.py, which runs in
        place of the model's own."""
        if not _may_define_auto_complete(runtime_model or model_path):
            if not config.backend and not config.platform:
                config.backend = "python"
            return
        from google.protobuf import json_format

        from pyserver._proto import ModelConfig
        from pyserver.config import config_to_json

        name = config.name or Path(model_path).parent.parent.name
        if not config.name:
            config.name = name
        env = _worker_env(max(1, (os.cpu_count() or 1)), 1)
        exec_env = execution_env(config, str(Path(model_path).parent.parent))
        if exec_env is not None:
            env = exec_env.apply(env)
        worker = _Worker("autocomplete", f"{name}-autocomplete", env,
                         python=sys.executable if exec_env is None else exec_env.python)
        try:
            info = {"model_path": str(model_path), "runtime_model": runtime_model,
                    "model_name": name, "config_json": json.dumps(config_to_json(config))}
            try:
                reply = worker.call(("init", info))
            except WorkerExited:
                worker.exited.wait(10)
                raise ServerError(Code.INTERNAL,
                                  f"python model '{name}': the auto-complete worker process "
                                  f"{worker.exit_text()}") from None
        finally:
            worker.closing = True
            try:
                worker.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            worker.kill()
        if reply[0] != "config":
            raise ServerError(Code.INTERNAL, reply[1])
        completed = ModelConfig()
        try:
            json_format.ParseDict(json.loads(reply[1]), completed)
        except (json_format.ParseError, ValueError) as err:
            raise ServerError(Code.INVALID_ARG,
                              f"python model '{name}': auto_complete_config returned a config "
                              f"that is not valid: {err}") from None
        if not completed.backend and not completed.platform:
            completed.backend = "python"
        config.CopyFrom(completed)


def _instance_names(config) -> list[str]:
    """The instance names the repository gives a config's instance groups."""
    return [f"{g.name}_{i}" for g in config.instance_group for i in range(instance_count(g))]


class _Prestarted:
    """Workers started ahead for the other instances of a version being
    loaded, until their ProcessPythonBackend claims them. Unclaimed ones (the load
    failed elsewhere) are ended after a while."""

    UNCLAIMED_TIMEOUT_S = 300.0

    def __init__(self):
        self._lock = threading.Lock()
        self._workers: dict[tuple, _Worker] = {}

    def put(self, model_path: str, config, instance_name: str, worker: _Worker) -> None:
        key = (model_path, id(config), instance_name)
        with self._lock:
            self._workers[key] = worker
        timer = threading.Timer(self.UNCLAIMED_TIMEOUT_S, self._expire, (key, worker))
        timer.daemon = True
        timer.start()

    def claim(self, model_path: str, config, instance_name: str) -> _Worker | None:
        with self._lock:
            return self._workers.pop((model_path, id(config), instance_name), None)

    def discard(self, model_path: str, config) -> None:
        """Ends the workers started ahead for a load that failed."""
        with self._lock:
            keys = [k for k in self._workers if k[0] == model_path and k[1] == id(config)]
            workers = [self._workers.pop(k) for k in keys]
        for worker in workers:
            worker.kill()

    def _expire(self, key, worker):
        with self._lock:
            if self._workers.get(key) is not worker:
                return
            del self._workers[key]
        worker.kill()


_prestarted = _Prestarted()


def _crash_summary(text: str) -> str:
    """faulthandler's report cut to its headline and the crashing thread's
    stack (other threads and the extension module list are noise here)."""
    if not text:
        return ""
    lines = text.splitlines()
    if not lines[0].startswith("Fatal Python error"):
        return text
    keep = [lines[0]]
    current = False
    for line in lines[1:]:
        if line.startswith("Current thread") or line.startswith("Stack (most recent call first)"):
            current = True
        elif current and not line.strip():
            break
        if current:
            keep.append(line)
    return "\n".join(keep)


def _fd_pair(socks: tuple) -> str:
    """How a worker is told the (read, write) descriptors of a channel."""
    return f"{socks[0].fileno()},{socks[1].fileno()}"


SCHEDULING_PARAMETER = "pyserver_worker_scheduling"
_SCHEDULING = ("auto", "batch", "normal")


def worker_scheduling(config, env: dict) -> str:
    """The Linux scheduling policy of the model's workers (stub.py): the
    config's pyserver_worker_scheduling, else PYSERVER_PYTHON_SCHED, else
    "auto". "batch" is SCHED_BATCH, "normal" SCHED_OTHER, "auto" SCHED_BATCH
    until its wake-ups wait too often (StartDelayWatch). README, Python
    models, has what each costs."""
    return word_parameter(config, SCHEDULING_PARAMETER, _SCHEDULING,
                          env.get("PYSERVER_PYTHON_SCHED", "auto"))


class StartDelayWatch:
    """Counts how often a worker's groups start late, for "auto" scheduling.

    Under SCHED_BATCH a worker woken with work does not preempt the thread
    running on its core; where no core is free it waits for the next
    scheduler tick (4 ms at 250 Hz). Measured between the loop's send and
    the worker's start of a group's first batch (2 cores, 2 instances,
    10,000+ groups each): with dynamic batching over HTTP at c16, 0.9 % of
    groups waited over 1 ms under SCHED_BATCH against 0.02 % without, and
    requests' p99 was 4-5 ms against 1.6; unbatched over gRPC at c16, where
    SCHED_BATCH served up to 20 % more, 0.12-0.2 % against 0.05-0.07 %.
    So a worker leaves SCHED_BATCH once more than ``limit`` of a window of
    ``window`` groups waited over ``late_ns``: 0.5 %, between those two, on
    windows long enough (2 s at 5k groups/s) that the second case does not
    cross it by chance."""

    __slots__ = ("window", "late_ns", "limit", "groups", "late")

    def __init__(self, window: int = 10_000, late_ns: int = 1_000_000, limit: int = 50):
        self.window = window
        self.late_ns = late_ns
        self.limit = limit
        self.groups = 0
        self.late = 0

    def note(self, delay_ns: int) -> bool:
        """Counts one group's start delay; True once this window has more
        late groups than the limit."""
        if delay_ns > self.late_ns:
            self.late += 1
            if self.late > self.limit:
                return True
        self.groups += 1
        if self.groups >= self.window:
            self.groups = self.late = 0
        return False


def _worker_env(threads: int, instances: int) -> dict:
    env = dict(os.environ)
    for key in THREAD_ENV:
        if key not in env:
            env[key] = str(threads)
    # How long a worker spins for its next batch under load (stub.py):
    # while the model's workers leave a core free, 100 µs (about what a
    # wake-up saved is worth here: adaptive_spin.h's kSpinPaysNs); once they
    # would take every core, not at all, as spinning then takes the event
    # loop's CPU (2 cores, add_sub HTTP at c16: 2 instances 3.8-4.5k infer/s
    # without, 3.6-3.8k at 100 µs). A longer spin catches its batch too, but
    # late, and the core it holds is the client's and the loop's: 300 µs
    # against 100, bench/python_backend.py c16 unbatched (wrk, h2load),
    # 0.69-0.74x the infer/s at 1.15-1.63x the tree's CPU per inference,
    # batched level (docs/PERFORMANCE_LOG.md, #28's eighth step). Within the bound it
    # spins only while its spins catch the next batch (channel.py, csrc
    # adaptive_spin.h).
    env.setdefault("PYSERVER_PYTHON_EXEC_SPIN_US",
                   "100" if instances < (os.cpu_count() or 1) else "0")
    env["PYTHONUNBUFFERED"] = "1"  # a model's print() shows up at once, as in Triton
    return env


def _may_define_auto_complete(model_path: str) -> bool:
    """False only when the source plainly cannot give TritonPythonModel an
    auto_complete_config: the name appears nowhere and the class is defined
    at top level with no base class (or ``object``) and no decorator.
    Anything else runs the worker.

    A textual check, not ``ast.parse``: CPython 3.11's AST construction is
    not thread-safe (models load in parallel, and other threads' traceback
    formatting uses the parser too); it crashed the server with a
    segmentation fault during garbage collection."""
    try:
        source = Path(model_path).read_text()
    except (OSError, UnicodeDecodeError):
        return True
    if "auto_complete_config" in source:
        return True
    lines = source.splitlines()
    for i, line in enumerate(lines):
        match = _PLAIN_CLASS.match(line)
        if match is None:
            continue
        previous = next((p.strip() for p in reversed(lines[:i]) if p.strip()), "")
        return previous.startswith("@")  # decorated: it may add anything
    return True


_PLAIN_CLASS = re.compile(r"class\s+TritonPythonModel\s*(?:\(\s*(?:object)?\s*\))?\s*:")
