# cython: language_level=3
"""Connections whose system calls run on the socket pump's threads
(csrc's SocketPump), with the asyncio transport the frontends' protocols
expect.

``SocketPump(loop, threads)`` watches the pump's eventfd from the loop;
``attach(sock, protocol)`` hands it an accepted socket and calls
``protocol.connection_made`` with a ``PumpTransport``. From then on the loop
thread makes no read, write or poll call for that connection: what arrives
comes as ``data_received`` calls when the loop drains the pump (once per
wake-up, for every connection with news), and ``write`` only queues the
bytes for the connection's pump thread. The transport answers what the
frontends use of asyncio's (write, writelines, close, abort, is_closing,
pause_reading, resume_reading, get_extra_info, get_write_buffer_size,
set_write_buffer_limits) and calls the protocol as asyncio does
(eof_received, pause_writing, resume_writing, connection_lost). TLS stays
with the event loop's own transports.
"""
import logging
import os

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from libcpp.memory cimport unique_ptr
from libcpp.vector cimport vector

from pyserver.engine.status cimport check_status

_log = logging.getLogger("pyserver")

# asyncio's default write-buffer limits
DEFAULT_HIGH_WATER = 64 * 1024
DEFAULT_LOW_WATER = 16 * 1024


cdef class ReaderSource:
    cdef unique_ptr[ConnectionReader] new_reader(self):
        return unique_ptr[ConnectionReader]()


cdef tuple progress_tuple(ReaderProgress p):
    return p.state, p.since_ns / 1e9, p.last_read_ns / 1e9


cdef class SocketPump:
    """The loop's side of a pump with ``threads`` I/O threads."""

    def __cinit__(self, loop, int threads):
        check_status(CSocketPump.Create(threads, &self.c))
        self.loop = loop
        self.transports = {}
        self.fd = self.c.get().notify_fd()
        loop.add_reader(self.fd, self._on_events)

    @property
    def threads(self):
        return self.c.get().threads() if self.c else 0

    @property
    def connections(self):
        return len(self.transports)

    def attach(self, sock, protocol, ReaderSource readers=None):
        """Takes an accepted socket (the pump owns it from now on) for
        ``protocol``; returns its transport. With ``readers``, the
        connection's bytes go through a reader of its making first."""
        if not self.c:
            sock.close()
            raise RuntimeError("the socket pump is closed")
        extra = {}
        try:
            extra["peername"] = sock.getpeername()
            extra["sockname"] = sock.getsockname()
        except OSError:
            pass
        cdef int fd = sock.detach()
        cdef PumpTransport t = PumpTransport.__new__(PumpTransport)
        t.pump = self
        t.protocol = protocol
        t.extra = extra
        t.high_water = DEFAULT_HIGH_WATER
        t.low_water = DEFAULT_LOW_WATER
        if readers is None:
            t.connection = self.c.get().Attach(fd)
        else:
            t.has_reader = True
            t.connection = self.c.get().Attach(fd, readers.new_reader())
        self.transports[t.connection] = t
        protocol.connection_made(t)
        return t

    def _on_events(self):
        cdef vector[PumpEvent] events
        cdef PumpTransport t
        cdef size_t i
        if not self.c:
            return
        self.c.get().Drain(&events)
        for i in range(events.size()):
            if events[i].kind == PumpKind.kThreadRestarted:
                # its connections' kClosed events came first
                self.restarts += 1
                _log.error("%s", events[i].data.decode("utf-8", "replace"))
                continue
            t = self.transports.get(events[i].connection)
            if t is None:
                continue
            try:
                kind = events[i].kind
                if kind == PumpKind.kData:
                    t._data(PyBytes_FromStringAndSize(events[i].data.data(),
                                                      <Py_ssize_t>events[i].data.size()))
                elif kind == PumpKind.kEof:
                    t._eof()
                elif kind == PumpKind.kDrained:
                    t._drained()
                else:
                    del self.transports[events[i].connection]
                    t._closed(events[i].error)
            except Exception:
                _log.exception("connection protocol failed")

    cdef int write_answer(self, uint64_t connection, list pieces) except -1:
        """Queues ``pieces`` (bytes-like) on a connection whose reader took
        the request they answer, and hands the connection back to it."""
        cdef Py_buffer view
        if not self.c:
            return 0
        for piece in pieces:
            if type(piece) is bytes:
                self.c.get().Write(connection, PyBytes_AS_STRING(piece),
                                   <size_t>PyBytes_GET_SIZE(piece))
            else:
                PyObject_GetBuffer(piece, &view, PyBUF_C_CONTIGUOUS)
                try:
                    self.c.get().Write(connection, <const char*>view.buf, <size_t>view.len)
                finally:
                    PyBuffer_Release(&view)
        self.c.get().Resume(connection, True, 0)
        return 0

    def _break_thread_for_testing(self, int thread):
        """Makes pump thread ``thread`` fail as a descriptor closed under it
        would (csrc's BreakThreadForTesting), to test that it recovers."""
        self.c.get().BreakThreadForTesting(thread)

    def close(self):
        """Closes every connection at once and stops the threads (their
        protocols get connection_lost)."""
        if not self.c:
            return
        self.loop.remove_reader(self.fd)
        transports, self.transports = self.transports, {}
        with nogil:
            self.c.reset()  # joins the threads and closes the sockets
        for t in transports.values():
            try:
                (<PumpTransport>t)._closed(0)
            except Exception:
                _log.exception("connection protocol failed")


cdef class PumpTransport:
    """One connection of a SocketPump, as an asyncio transport."""

    def write(self, data):
        cdef size_t unsent
        if self.closing or not self.pump.c:
            return
        if type(data) is not bytes:
            data = bytes(data)
        unsent = self.pump.c.get().Write(self.connection, PyBytes_AS_STRING(data),
                                         <size_t>PyBytes_GET_SIZE(data))
        if unsent > self.high_water and not self.write_paused:
            self.write_paused = True
            self.pump.c.get().WatchDrain(self.connection, self.low_water)
            self.protocol.pause_writing()

    def writelines(self, list_of_data):
        # one write: the pieces leave together, as one writev would send them
        self.write(b"".join(list_of_data))

    def close(self):
        """Closes once what is queued has been sent."""
        if self.closing:
            return
        self.closing = True
        if self.pump.c:
            self.pump.c.get().Close(self.connection)

    def abort(self):
        self.closing = True
        if self.pump.c:
            self.pump.c.get().Abort(self.connection)

    def is_closing(self):
        return self.closing

    def pause_reading(self):
        if self.closing or self.read_paused:
            return
        self.read_paused = True
        if self.pump.c:
            self.pump.c.get().SetReading(self.connection, False)

    def resume_reading(self):
        if self.closing or not self.read_paused:
            return
        self.read_paused = False
        if self.pump.c:
            self.pump.c.get().SetReading(self.connection, True)
        if self.held is not None or self.eof_held:
            # as asyncio's transports do: what was held arrives in a later
            # callback, not inside the protocol's own resume_reading() call
            self.pump.loop.call_soon(self._release_held)

    def is_reading(self):
        return not self.read_paused and not self.closing

    def _release_held(self):
        if self.read_paused or self.closing:
            return
        held, self.held = self.held, None
        if held is not None:
            self.protocol.data_received(held)
        if self.eof_held and not self.read_paused and not self.closing:
            self.eof_held = False
            self._eof()

    def resume_reader(self, uint64_t consumed):
        """The protocol has processed ``consumed`` bytes in all and waits
        for more: the connection's reader takes over again if that is all
        it was given."""
        if self.has_reader and not self.closing and self.pump.c:
            self.pump.c.get().Resume(self.connection, False, consumed)

    def reader_progress(self):
        """``(state, since, last_read)`` of the connection's reader, times
        in seconds on the loop's monotonic clock (state: 0 idle, 1 a request
        head arriving, 2 its body, 3 answering one), or None."""
        cdef ReaderProgress p
        if not self.has_reader or not self.pump.c \
                or not self.pump.c.get().Progress(self.connection, &p):
            return None
        return progress_tuple(p)

    def get_extra_info(self, name, default=None):
        return self.extra.get(name, default)

    def get_write_buffer_size(self):
        return self.pump.c.get().Unsent(self.connection) if self.pump.c else 0

    def set_write_buffer_limits(self, high=None, low=None):
        if high is None:
            high = DEFAULT_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self.high_water = high
        self.low_water = low

    cdef int _data(self, bytes data) except -1:
        # Bytes the pump read before it saw a pause_reading() are held until
        # resume_reading(): no data_received() while paused, as asyncio
        # promises (the HTTP connection's pipelining bound relies on it).
        if self.closing:  # closed by us: "no more data will be received"
            return 0
        if self.read_paused or self.held is not None:
            self.held = data if self.held is None else self.held + data
            return 0
        self.protocol.data_received(data)
        return 0

    cdef int _eof(self) except -1:
        if self.closing:
            return 0
        if self.read_paused or self.held is not None:
            self.eof_held = True  # after the held bytes
            return 0
        if not self.protocol.eof_received():
            self.close()
        return 0

    cdef int _drained(self) except -1:
        if self.write_paused and not self.closed:
            self.write_paused = False
            self.protocol.resume_writing()
        return 0

    cdef int _closed(self, int error) except -1:
        if self.closed:
            return 0
        self.closed = True
        self.closing = True
        # OSError picks the errno's subclass: ConnectionResetError, or
        # ConnectionAbortedError when a failed pump thread closed it
        exc = None if error == 0 else OSError(error, os.strerror(error))
        self.protocol.connection_lost(exc)
        return 0
