# cython: language_level=3
"""Host memory for batches: gathering many request tensors into one
contiguous batch tensor, a pool of (CUDA-pinned when possible) host buffers,
pools of device memory per GPU, and CUDA stream handles; all in csrc, loaded
without CUDA at build time."""
from cpython.buffer cimport (
    PyBUF_ANY_CONTIGUOUS,
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from libcpp.memory cimport unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.status cimport Status, check_status


cdef size_t _NOGIL_BYTES = 64 << 10  # smaller copies cost less than a GIL hand-off
cdef object _empty = None


cdef size_t _copy_into(list sources, out, size_t nogil_from) except? 0:
    """Copies each buffer in ``sources`` back to back into ``out``; the GIL
    is released for copies of ``nogil_from`` bytes and more. A source that
    is not C-contiguous raises BufferError."""
    cdef Py_buffer dst
    cdef vector[Py_buffer] bufs
    cdef vector[const void*] ptrs
    cdef vector[size_t] sizes
    cdef Py_buffer b
    cdef size_t total = 0, written
    cdef Py_ssize_t i, n = len(sources)
    PyObject_GetBuffer(out, &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)
    bufs.reserve(n)
    try:
        for i in range(n):
            try:
                PyObject_GetBuffer(sources[i], &b, PyBUF_C_CONTIGUOUS)
            except ValueError as e:  # numpy's word for "not C-contiguous"
                raise BufferError(f"gather source {i}: {e}") from None
            bufs.push_back(b)
            ptrs.push_back(b.buf)
            sizes.push_back(<size_t>b.len)
            total += <size_t>b.len
        if total > <size_t>dst.len:
            raise ValueError(f"gather needs {total} bytes, destination has {dst.len}")
        if total >= nogil_from:
            # Safe without the GIL: every buffer is pinned by its Py_buffer export.
            with nogil:
                written = GatherCopy(ptrs.data(), sizes.data(), <size_t>n, dst.buf)
        else:
            written = GatherCopy(ptrs.data(), sizes.data(), <size_t>n, dst.buf)
        return written
    finally:
        for i in range(<Py_ssize_t>bufs.size()):
            PyBuffer_Release(&bufs[i])
        PyBuffer_Release(&dst)


def gather(list sources, out):
    """Copies each buffer in ``sources`` back to back into ``out`` (a
    writable C-contiguous buffer, e.g. a numpy array) with the GIL released.
    Returns the number of bytes written. A source that is not C-contiguous
    raises BufferError (the caller makes it so and calls again)."""
    return _copy_into(sources, out, 0)


def gather_batch(list requests):
    """The inputs of a batch of requests (objects with ``arrays``, a dict of
    numpy arrays by input name, all with the same names, and
    ``batch_size``): each input's arrays back to back in one new array, its
    first dimension the batch. The same result as gathering each input in
    Python (np.empty, then gather), without the per-request Python steps;
    the GIL is released only for copies of 64 KiB and more. None when an
    input holds Python objects (BYTES) or a source is not row-major: the
    caller's path handles those."""
    global _empty
    cdef Py_ssize_t total = 0
    cdef dict batched = {}
    if _empty is None:
        import numpy
        _empty = numpy.empty
    for r in requests:
        total += r.batch_size
    for name, value in (<dict>requests[0].arrays).items():
        dtype = value.dtype
        if dtype.hasobject:
            return None
        out = _empty((total,) + value.shape[1:], dtype)
        try:
            _copy_into([(<dict>r.arrays)[name] for r in requests], out, _NOGIL_BYTES)
        except BufferError:
            return None  # not row-major: the caller copies it first
        batched[name] = out
    return batched


# ---------------------------------------------------------------- CUDA runtime


def cuda_runtime_info(library=None):
    """What the CUDA runtime offers this process: ``{"available": bool,
    "reason": str, "library": str, "device_count": int}``. ``library``: a
    libcudart path to try instead of the default names (e.g. the one inside
    an nvidia-cuda-runtime wheel)."""
    cdef CudaRuntime* rt
    cdef unique_ptr[CudaRuntime] own
    cdef vector[string] names
    if library is None:
        rt = &CudaRuntime.Get()
    else:
        names.push_back(str(library).encode())
        own.reset(new CudaRuntime(names))
        rt = own.get()
    return {"available": rt.available(), "reason": rt.reason().decode(),
            "library": rt.library().decode(), "device_count": rt.device_count()}


def cuda_add_search_paths(list paths):
    """libcudart files to try after the default names; effective only before
    the first use of CUDA in the process."""
    cdef vector[string] names
    for p in paths:
        names.push_back(str(p).encode())
    CudaRuntime.AddSearchPaths(names)


def cuda_pci_bus_ids(library=None):
    """The PCI bus IDs of the GPUs CUDA shows this process, in CUDA's order
    (empty without a usable runtime). ``library``: as for cuda_runtime_info."""
    cdef CudaRuntime* rt
    cdef unique_ptr[CudaRuntime] own
    cdef vector[string] names
    cdef string bus_id
    if library is None:
        rt = &CudaRuntime.Get()
    else:
        names.push_back(str(library).encode())
        own.reset(new CudaRuntime(names))
        rt = own.get()
    ids = []
    if not rt.available():
        return ids
    for device in range(rt.device_count()):
        check_status(rt.PciBusId(device, &bus_id))
        ids.append(bus_id.decode())
    return ids


def cuda_set_device(int device):
    """Makes ``device`` current for the calling thread."""
    check_status(CudaRuntime.Get().SetDevice(device))


def cuda_malloc(size_t nbytes):
    """Device memory on the current device; returns its address."""
    cdef void* ptr = NULL
    cdef Status st
    with nogil:  # cudaMalloc may synchronize the device
        st = CudaRuntime.Get().Malloc(&ptr, nbytes)
    check_status(st)
    return <size_t>ptr


def cuda_free(size_t ptr):
    cdef Status st
    with nogil:
        st = CudaRuntime.Get().Free(<void*>ptr)
    check_status(st)


def cuda_copy_to_device(size_t dst, src, size_t stream):
    """Queues a copy of the host buffer ``src`` to device address ``dst`` on
    ``stream``. Asynchronous only when ``src`` is pinned; ``src`` must stay
    alive until the stream is synchronized."""
    cdef Py_buffer b
    cdef Status st
    PyObject_GetBuffer(src, &b, PyBUF_ANY_CONTIGUOUS)
    try:
        with nogil:  # b pins the source while the copy is queued
            st = CudaRuntime.Get().MemcpyAsync(<void*>dst, b.buf, <size_t>b.len, 1, <void*>stream)
    finally:
        PyBuffer_Release(&b)
    check_status(st)


def cuda_copy_to_host(dst, size_t src, size_t stream):
    """Queues a copy from device address ``src`` into the writable host
    buffer ``dst`` (its whole size) on ``stream``."""
    cdef Py_buffer b
    cdef Status st
    PyObject_GetBuffer(dst, &b, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE)
    try:
        with nogil:
            st = CudaRuntime.Get().MemcpyAsync(b.buf, <void*>src, <size_t>b.len, 2, <void*>stream)
    finally:
        PyBuffer_Release(&b)
    check_status(st)


def cuda_stream_synchronize(size_t stream):
    """Waits, GIL released, until the work queued on ``stream`` is done."""
    cdef Status st
    with nogil:
        st = CudaRuntime.Get().StreamSynchronize(<void*>stream)
    check_status(st)


# ---------------------------------------------------------------- pinned pool

cdef char* _BYTE_FORMAT = b"B"


cdef class _Pool:
    """What the pinned and the CUDA pools share: csrc's MemoryPool."""

    def trim(self):
        """Frees the cached (unused) blocks."""
        with nogil:
            self.pool.Trim()

    def stats(self):
        cdef MemoryPoolStats s = self.pool.stats()
        return {"capacity": s.capacity, "in_use_bytes": s.in_use_bytes,
                "cached_bytes": s.cached_bytes, "reuses": s.reuses,
                "allocations": s.allocations, "unpooled": s.unpooled, "pinned": s.pinned,
                "device": s.device}


cdef class PinnedMemoryPool(_Pool):
    """Host buffers from csrc's pool: page-locked through CUDA when a device
    is usable (``use_cuda``), plain page-aligned memory otherwise; cached per
    size class up to ``capacity`` bytes, served unpooled beyond it."""

    def __cinit__(self, size_t capacity, bint use_cuda=True, cuda_library=None):
        cdef const CudaRuntime* rt = NULL
        cdef vector[string] names
        if use_cuda:
            if cuda_library is None:
                rt = &CudaRuntime.Get()
            else:
                names.push_back(str(cuda_library).encode())
                self.own_runtime.reset(new CudaRuntime(names))
                rt = self.own_runtime.get()
        self.c.reset(new CPinnedMemoryPool(capacity, rt))
        self.pool = self.c.get()

    @property
    def pinned(self):
        """True when the pool's blocks are page-locked by CUDA."""
        return self.c.get().pinned()

    def allocate(self, size_t nbytes):
        """A writable ``HostBuffer`` of ``nbytes`` (numpy: ``np.frombuffer``).
        The block returns to the pool when the buffer and every view of it
        are gone."""
        cdef HostBuffer buf = HostBuffer.__new__(HostBuffer)
        cdef Status st
        with nogil:  # may call cudaHostAlloc or the allocator: no Python objects touched
            st = self.c.get().Allocate(nbytes, &buf.block)
        check_status(st)
        buf.pool = self
        buf.shape[0] = <Py_ssize_t>nbytes
        return buf





cdef class HostBuffer:
    """One block from a PinnedMemoryPool, exposed through the buffer protocol."""

    @property
    def nbytes(self):
        return self.shape[0]

    @property
    def pinned(self):
        return self.block.pinned

    def __len__(self):
        return self.shape[0]

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.block.data
        view.obj = self
        view.len = self.shape[0]
        view.readonly = 0
        view.itemsize = 1
        view.format = _BYTE_FORMAT if (flags & PyBUF_FORMAT) else NULL
        view.ndim = 1
        view.shape = <Py_ssize_t*>self.shape if (flags & PyBUF_ND) else <Py_ssize_t*>NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __dealloc__(self):
        # Views hold a reference to this object, so no export outlives it.
        if self.pool is not None and self.block.data != NULL:
            self.pool.c.get().Release(self.block)
            self.block.data = NULL


# ---------------------------------------------------------------- CUDA memory pool


cdef class CudaMemoryPool(_Pool):
    """Device memory on GPU ``device`` from csrc's pool: blocks cached per
    size class up to ``capacity`` bytes (--cuda-memory-pool-byte-size), plain
    cudaMalloc beyond it. ``cuda_library``: a libcudart to load instead of
    the process's runtime (tests)."""

    def __cinit__(self, int device, size_t capacity, cuda_library=None):
        cdef const CudaRuntime* rt
        cdef vector[string] names
        cdef unique_ptr[CCudaMemoryPool] made
        if cuda_library is None:
            rt = &CudaRuntime.Get()
        else:
            names.push_back(str(cuda_library).encode())
            self.own_runtime.reset(new CudaRuntime(names))
            rt = self.own_runtime.get()
        check_status(CCudaMemoryPool.Create(rt[0], device, capacity, &made))
        self.c.reset(made.release())
        self.pool = self.c.get()

    @property
    def device(self):
        return self.c.get().device()

    def allocate(self, size_t nbytes):
        """A ``DeviceBlock`` of at least ``nbytes``; its memory returns to the
        pool when the block is closed or collected."""
        cdef DeviceBlock blk = DeviceBlock.__new__(DeviceBlock)
        cdef Status st
        with nogil:  # cudaMalloc may synchronize the device
            st = self.c.get().Allocate(nbytes, &blk.block)
        check_status(st)
        blk.pool = self
        return blk



cdef class DeviceBlock:
    """One block of a CudaMemoryPool: ``ptr`` (the device address) and
    ``nbytes`` (what was asked for; the block may hold more)."""

    @property
    def ptr(self):
        return <size_t>self.block.data

    @property
    def nbytes(self):
        return self.block.size

    @property
    def capacity(self):
        """What the block holds: ``nbytes`` rounded up to its size class."""
        return self.block.capacity

    @property
    def device(self):
        return self.block.device

    @property
    def pooled(self):
        return self.block.pooled

    def close(self):
        """Returns the memory to the pool now; ``ptr`` is 0 after."""
        if self.pool is not None and self.block.data != NULL:
            with nogil:  # an unpooled block is cudaFree'd, which may synchronize
                self.pool.c.get().Release(self.block)
            self.block.data = NULL

    def __dealloc__(self):
        if self.pool is not None and self.block.data != NULL:
            self.pool.c.get().Release(self.block)
            self.block.data = NULL


# ---------------------------------------------------------------- CUDA streams


cdef class CudaStreamPool:
    """``count`` non-blocking CUDA streams on ``device``, handed out
    round-robin as integer handles (``cudaStream_t``), for backends that take
    a raw stream (TensorRT's execute_async_v3, CuPy's ExternalStream)."""
    cdef unique_ptr[CCudaStreamPool] c

    def __cinit__(self, int device, int count=2):
        check_status(CCudaStreamPool.Create(CudaRuntime.Get(), device, count, &self.c))

    def next(self):
        return <size_t>self.c.get().Next()

    @property
    def device(self):
        return self.c.get().device()

    def __len__(self):
        return self.c.get().size()

    def synchronize(self):
        cdef Status st
        with nogil:  # blocks until the GPU drains the streams
            st = self.c.get().Synchronize()
        check_status(st)
