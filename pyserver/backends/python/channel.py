"""The link between the server and a Python-model worker process, used on
both sides (the worker loads this file by path; of pyserver it imports only
the engine's IPC helpers).

- ``Channel``: length-prefixed pickled messages over Unix stream sockets,
  one per direction (``channel_pair``) (small: names, shapes, offsets, ids;
  never tensor data, except BYTES).
- ``Region``: a shared memory file both processes map. Tensor data goes
  through two regions per worker, one per direction: the writer copies each
  tensor in at an aligned offset, the reader maps it (the worker reads its
  inputs with no copy; the server copies outputs out once). A writer that
  needs more room grows the file and says the new size in its message; the
  reader remaps.

- ``Arena``: blocks of a region for traffic with many messages in flight
  at once (decoupled responses, BLS requests and results): allocated by the
  writer per tensor, freed when the reader is done with them.

Which kind of shared memory backs the regions is decided once per server
process (``shm_kind``): ``memfd`` (Linux memfd_create: anonymous shared
memory that does not count against /dev/shm, so a container's small default
/dev/shm does not matter), else ``devshm`` (a file in /dev/shm, unlinked at
once, when /dev/shm has room), else ``file`` (an unlinked file in the
temporary folder, page-cache backed). PYSERVER_PYTHON_SHM=memfd|devshm|file
forces one.
"""

from __future__ import annotations

import errno
import importlib
import importlib.machinery
import importlib.util
import mmap
import os
import pickle
import socket
import sys
import tempfile
import threading


def engine_module(name: str):
    """The engine's extension ``pyserver.engine.<name>``. A worker loads it
    alone, by its file: importing the pyserver package would pull in the
    whole server (~0.2 s of every worker's start), and a model's own
    environment (EXECUTION_ENV_PATH) has none of the server's packages."""
    full = f"pyserver.engine.{name}"
    module = sys.modules.get(full)
    if module is not None:
        return module
    if "pyserver" in sys.modules:  # the server: its package is loaded
        return importlib.import_module(full)
    folders = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "engine")]
    if os.environ.get("PYSERVER_ENGINE_DIR"):  # searched first, as pyserver.engine does
        folders.insert(0, os.environ["PYSERVER_ENGINE_DIR"])
    for folder in folders:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, name + suffix)
            if os.path.exists(path):
                spec = importlib.util.spec_from_file_location(full, path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[full] = module
                return module
    return importlib.import_module(full)


_ipc = engine_module("ipc")
_INCOMPLETE = _ipc.INCOMPLETE  # FrameReader.take(): no whole message buffered yet
_SpinPolicy = _ipc.SpinPolicy
SPIN_PAYS_NS = _ipc.SPIN_PAYS_NS

# How busy the server was when it sent a worker a group (engine/ipc.pyx)
LOAD_BUSY, LOAD_LOW, LOAD_ALONE = _ipc.LOAD_BUSY, _ipc.LOAD_LOW, _ipc.LOAD_ALONE


def spin_after(load: int, spin_ns: int, low_load_spin_ns: int) -> tuple:
    """The worker's spin for its next message after a group sent at
    ``load``, as recv's (spin_ns, pay_ns) (None: the channel's own spin,
    ``spin_ns``; any catch within it paying).

    At low load the next request is a client's round trip away and a core
    is free, so the worker spins for it (``low_load_spin_ns``) even where
    its instances fill the cores and it would not spin under load. Alone in
    the server (c1), the spin wins no throughput: it pays only where its
    catch comes within about twice a wake-up's cost (SPIN_PAYS_NS; csrc
    adaptive_spin.h). Otherwise any catch within the spin pays: a worker
    kept awake spares the event loop, then the busy thread, a wake-up per
    group; under load the spin is the channel's own, which the server keeps
    about that short (backend._worker_env)."""
    if not load:
        return None, None
    return (max(low_load_spin_ns, spin_ns),
            SPIN_PAYS_NS if load == LOAD_ALONE else None)


_PICKLE = 5
ALIGN = 64
PAGE = mmap.PAGESIZE
DEFAULT_REGION_SIZE = 1 << 20
_DEVSHM_MIN_FREE = 256 << 20


class Channel:
    """Framed messages over a connected stream socket, or over two: one
    read (``sock``), one written (``send_sock``). ``recv`` raises EOFError
    when the peer is gone; ``send`` is safe from several threads.

    A socket per direction keeps a reader blocked in recv asleep while the
    peer reads what it wrote: reading a Unix socket wakes every thread
    sleeping on the writer's socket (to say there is room to write), and a
    reader waiting for data on that same socket wakes for nothing.

    A message that fits the socket buffer goes out in one non-blocking send
    made without releasing the GIL (engine/ipc.pyx FrameWriter): Python's
    socket.send releases and retakes it around the syscall, and under load
    taking it back from the event loop thread can wait for the
    interpreter's switch interval (5 ms).
    """

    def __init__(self, sock: socket.socket, spin_ns: int = 0,
                 send_sock: socket.socket | None = None):
        self.sock = sock
        self.send_sock = sock if send_sock is None else send_sock
        # recv spins up to this long (GIL released) for a message before it
        # blocks: an answer due within microseconds then costs no wake-up.
        # Each kind of spin keeps its own policy (engine/ipc.pyx SpinPolicy):
        # it spins only while such spins have caught their message lately.
        self.spin_ns = spin_ns
        self._spins: dict[tuple, object] = {}
        self._frames = _ipc.FrameReader()
        # whole messages out, one non-blocking send each where they fit
        self.writer = _ipc.FrameWriter(self.send_sock)
        self._read_fd = sock.fileno()

    def send(self, obj) -> None:
        self.writer.send(pickle.dumps(obj, _PICKLE))

    def send_result(self, out_size: int, answers, started_ns: int) -> None:
        """A worker's ("result", out_size, answers, started_ns) for one
        batch: as bytes when ``answers`` are (engine/worker_wire.pxd's
        layout), pickled otherwise; recv() gives the tuple either way."""
        if type(answers) is bytes:
            self.writer.send(_ipc.result_payload(out_size, answers, started_ns))
        else:
            self.send(("result", out_size, answers, started_ns))

    def send_exec(self, in_size: int, groups: list, model_name: str, version: str,
                  load: int) -> None:
        """The server's ("exec", in_size, groups, model_name, version, load)
        for a group of batches: as bytes when every batch is
        (engine/worker_wire.pxd's layout), pickled otherwise."""
        payload = _ipc.exec_payload(in_size, groups, model_name, version, load)
        if payload is not None:
            self.writer.send(payload)
        else:
            self.send(("exec", in_size, groups, model_name, version, load))

    def recv(self, spin_ns: int | None = None, pay_ns: int | None = None):
        """The next message (blocking); ``spin_ns``: this call's spin, in
        place of the channel's; ``pay_ns``: how soon its catch must come to
        count (engine/ipc.pyx SpinPolicy; by default anywhere in the spin)."""
        if spin_ns is None:
            spin_ns = self.spin_ns
        frames = self._frames
        while True:
            obj = frames.take()
            if obj is not _INCOMPLETE:
                return obj
            if spin_ns:
                policy = self._spins.get((spin_ns, pay_ns))
                if policy is None:
                    policy = self._spins[(spin_ns, pay_ns)] = _SpinPolicy(spin_ns, pay_ns)
                policy.wait_readable(self._read_fd)  # then the read rarely sleeps
            try:  # the socket's own blocking read, its timeout included
                got = self.sock.recv_into(frames.space())
            except (ConnectionResetError, BrokenPipeError):
                got = 0
            frames.filled(got)

    def drain(self) -> list:
        """Every message that has all arrived, after one non-blocking read
        of what the socket holds, for a reader on an event loop. EOFError
        when the peer is gone."""
        if self.sock.fileno() < 0:  # closed: its number may be another file's now
            raise OSError(errno.EBADF, "channel closed")
        return self._frames.drain(self._read_fd)

    def fileno(self) -> int:
        """The descriptor that becomes readable when a message arrives."""
        return self._read_fd

    def shutdown(self) -> None:
        """Wakes whoever is blocked on the channel (each call then fails)."""
        for sock in {self.sock, self.send_sock}:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        # Under the send lock, and forgetting the descriptor: a send after
        # close must fail, not write into whatever reuses the number.
        writer = self.writer
        with writer.lock:
            writer.fd = -1
            for sock in {self.sock, self.send_sock}:
                try:
                    sock.close()
                except OSError:
                    pass


# -- shared memory ----------------------------------------------------------------------

_kind_cache: str | None = None


def shm_kind() -> str:
    """The shared memory mechanism this process uses for worker regions."""
    global _kind_cache
    if _kind_cache is None:
        _kind_cache = _choose_kind(os.environ.get("PYSERVER_PYTHON_SHM", ""))
    return _kind_cache


def _choose_kind(forced: str) -> str:
    if forced in ("memfd", "devshm", "file"):
        return forced
    if hasattr(os, "memfd_create"):
        try:
            os.close(os.memfd_create("pyserver-probe", getattr(os, "MFD_CLOEXEC", 1)))
            return "memfd"
        except OSError:
            pass
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= _DEVSHM_MIN_FREE:
            return "devshm"
    except OSError:
        pass
    return "file"


def channel_pair() -> tuple[tuple, tuple]:
    """Two ends of a Channel with a socket per direction: ((read, write)
    sockets of one end, (read, write) of the other)."""
    a_read, b_write = socket.socketpair()
    b_read, a_write = socket.socketpair()
    return (a_read, a_write), (b_read, b_write)


def create_fd(kind: str, label: str) -> int:
    """A new empty shared file descriptor of ``kind`` (close-on-exec; pass it
    to a child with pass_fds)."""
    label = label[:200]  # memfd names and file names have length limits
    if kind == "memfd":
        return os.memfd_create(f"pyserver-{label}", getattr(os, "MFD_CLOEXEC", 1))
    if kind == "devshm":
        fd, path = tempfile.mkstemp(prefix=f"pyserver-{label}-", dir="/dev/shm")
        os.unlink(path)
        return fd
    fd, path = tempfile.mkstemp(prefix=f"pyserver-{label}-")
    os.unlink(path)
    return fd


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _reserve(fd: int, size: int) -> None:
    """Grows the file to ``size`` bytes with the space really reserved, so a
    full tmpfs fails here with ENOSPC rather than with SIGBUS on a write."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            os.ftruncate(fd, size)
        else:
            raise


class Region:
    """One shared memory file mapped in this process."""

    __slots__ = ("fd", "size", "mm")

    def __init__(self, fd: int, size: int, reserve: bool):
        self.fd = fd
        if reserve:
            _reserve(fd, size)
        self.size = size
        self.mm = mmap.mmap(fd, size)

    def ensure(self, needed: int) -> None:
        """Writer side: room for ``needed`` bytes, growing the file."""
        if needed > self.size:
            size = max(_round_up(needed, PAGE), 2 * self.size)
            _reserve(self.fd, size)
            self._remap(size)

    def follow(self, size: int) -> None:
        """Reader side: the writer grew the file to ``size``."""
        if size > self.size:
            self._remap(size)

    def _remap(self, size: int) -> None:
        # The old mapping stays valid while arrays still view it; it goes
        # away with the last of them.
        self.mm = mmap.mmap(self.fd, size)
        self.size = size

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass  # arrays still view it: unmapped when they go
        try:
            os.close(self.fd)
        except OSError:
            pass


# -- arenas: blocks of a region for messages that overlap in time ------------------------


class Arena:
    """Hands out aligned blocks of a Region and takes them back by offset.

    The two main regions carry one batch at a time; the asynchronous
    traffic (decoupled responses, BLS requests and their results) has many
    messages in flight at once, from several threads. Its writer allocates
    a block per tensor here and frees it when the reader says it is done
    with it. A request that does not fit grows the file (doubling), and
    the message says the new size so the reader remaps.
    """

    def __init__(self, region: Region):
        self.region = region
        self._lock = threading.Lock()
        self._free = [[0, region.size]]  # [start, size], sorted, coalesced
        self._used: dict[int, int] = {}

    def alloc(self, nbytes: int) -> int:
        need = _round_up(max(nbytes, 1), ALIGN)
        with self._lock:
            while True:
                for i, block in enumerate(self._free):
                    start, size = block
                    if size >= need:
                        if size == need:
                            del self._free[i]
                        else:
                            block[0] = start + need
                            block[1] = size - need
                        self._used[start] = need
                        return start
                old = self.region.size
                self.region.ensure(old + need)
                added = self.region.size - old
                if self._free and self._free[-1][0] + self._free[-1][1] == old:
                    self._free[-1][1] += added
                else:
                    self._free.append([old, added])

    def free(self, offsets) -> None:
        with self._lock:
            for start in offsets:
                size = self._used.pop(start, None)
                if size is None:
                    continue
                self._insert(start, size)

    def _insert(self, start: int, size: int) -> None:
        free = self._free
        lo, hi = 0, len(free)
        while lo < hi:
            mid = (lo + hi) // 2
            if free[mid][0] < start:
                lo = mid + 1
            else:
                hi = mid
        free.insert(lo, [start, size])
        # Merge with the next block, then with the previous one.
        if lo + 1 < len(free) and start + size == free[lo + 1][0]:
            free[lo][1] += free[lo + 1][1]
            del free[lo + 1]
        if lo > 0 and free[lo - 1][0] + free[lo - 1][1] == start:
            free[lo - 1][1] += free[lo][1]
            del free[lo]

    def in_use(self) -> int:
        with self._lock:
            return sum(self._used.values())

    def write(self, tensors) -> tuple[list, list]:
        """Copies ``[(name, code, array), ...]`` in; returns the encoded list
        ``[(name, code, shape, offset, nbytes, None)]`` (BYTES tensors travel
        inline as object arrays, offset -1) and the offsets to free later."""
        encoded = []
        offsets = []
        for name, code, array in tensors:
            if array.dtype.hasobject:
                encoded.append((name, code, array.shape, -1, 0, array))
                continue
            size = array.nbytes
            start = self.alloc(size)
            offsets.append(start)
            if size:
                flat = array.reshape(-1) if array.flags.c_contiguous else array.ravel()
                self.region.mm[start:start + size] = flat.view("u1")
            encoded.append((name, code, array.shape, start, size, None))
        return encoded, offsets


def read_tensors(region: Region, size: int, encoded, dtypes, copy: bool) -> dict:
    """The arrays of an encoded tensor list written by the peer's Arena:
    copies (``copy``) or views over the region (valid until the peer frees
    the blocks)."""
    import numpy as np

    region.follow(size)
    mm = region.mm
    if copy:
        return engine_module("region_io").read_copies(mm, encoded, dtypes)
    out = {}
    for name, code, shape, start, nbytes, data in encoded:
        if data is None:
            dtype = np.dtype(dtypes[code])
            data = np.frombuffer(mm, dtype, nbytes // dtype.itemsize, start).reshape(shape)
        out[name] = data
    return out
