"""Client shared memory: Triton's system (POSIX) and CUDA shared-memory extensions.

Protocol-neutral: the HTTP and gRPC frontends call the same manager, which
keeps Triton's error texts and codes (server/src/shared_memory_manager.cc,
common.cc, http_server.cc).

A region is registered under a name; requests then refer to a byte range of
it (``shared_memory_region``/``_offset``/``_byte_size``). ``acquire`` checks
the range and returns a ``ShmLease``: inputs become zero-copy numpy views over
the mapping, outputs are written into it. A lease holds a reference on its
region; unregistering a region that in-flight requests still use only marks
it, and it is unmapped when the last lease is released (as Triton does).

CUDA regions are real only when CuPy imports and sees a GPU (imported
lazily); otherwise registering one is refused with UNSUPPORTED, status lists
none and unregistering all of them succeeds (perf_analyzer calls it).
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import threading

import numpy as np

from pyserver.kernel.dtypes import WIRE_TO_NUMPY, serialize_bytes_tensor
from pyserver.kernel.errors import Code, ServerError, request_prefix

__all__ = ["SharedMemoryManager", "ShmLease", "CLIENT_SHM_DISABLED", "RESERVED_KEY_PREFIX"]

# common.h kClientShmDisabledErrorStr
CLIENT_SHM_DISABLED = ("Client shared memory is disabled. Start the server with "
                       "'--allow-client-shm=true' to enable.")
# common.h kTritonSharedMemoryRegionPrefix: keys the Python backend uses internally.
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"

SYSTEM = "system"
CUDA = "cuda"
_SIZE_MAX = (1 << 64) - 1
CUDA_IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)
_CUDA_IPC_LAZY_ENABLE_PEER_ACCESS = 1


def _err(code: Code, msg: str) -> ServerError:
    return ServerError(code, msg)


# ---------------------------------------------------------------- CUDA (lazy)

_cuda_state: list = []  # [cupy module or None], filled on first use


def _cupy():
    """The cupy module when it imports and a GPU is visible, else None."""
    if not _cuda_state:
        try:
            import cupy  # noqa: PLC0415 (lazy: a CPU install has no CuPy)

            if cupy.cuda.runtime.getDeviceCount() <= 0:
                cupy = None
        except Exception:  # ImportError, or CUDA driver/runtime missing
            cupy = None
        _cuda_state.append(cupy)
    return _cuda_state[0]


def _cuda_allocation_size(ptr: int) -> int | None:
    """Size of the allocation that holds ``ptr`` (cuMemGetAddressRange), or
    None when the driver entry point is not reachable."""
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuMemGetAddressRange_v2
        base = ctypes.c_uint64()
        size = ctypes.c_size_t()
        fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                       ctypes.c_uint64]
        if fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) != 0:
            return None  # no current context or no such entry point: cannot check
        # bytes from ptr to the end of its allocation
        return int(size.value) - (ptr - int(base.value))
    except Exception:
        return None


# ---------------------------------------------------------------- regions


class _Region:
    __slots__ = ("name", "key", "offset", "byte_size", "kind", "device_id", "_mmap", "fd",
                 "view", "device_ptr", "refs", "awaiting_unregister")

    def __init__(self, name, key, offset, byte_size, kind, device_id=0):
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.kind = kind
        self.device_id = device_id
        self._mmap = None
        # The shm object stays open (system): its size is checked before each
        # use, since pages the owner truncated away fault (SIGBUS) when touched.
        self.fd = -1
        self.view = None        # memoryview of exactly byte_size bytes (system)
        self.device_ptr = 0     # base device pointer (cuda)
        self.refs = 0
        self.awaiting_unregister = False

    def status(self) -> dict:
        if self.kind == SYSTEM:
            return {"name": self.name, "key": self.key, "offset": self.offset,
                    "byte_size": self.byte_size}
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def check_backed(self, offset: int, byte_size: int) -> None:
        """Fails (INVALID_ARG) when the shm object no longer holds the bytes
        [offset, offset + byte_size) of this region: its owner truncated it
        after registering. Reading such pages would kill the server."""
        if self.kind != SYSTEM or byte_size == 0:
            return
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            size = -1
        end = self.offset + offset + byte_size
        if size < end:
            raise _err(Code.INVALID_ARG,
                       f"shared memory region '{self.name}' (key '{self.key}') was truncated "
                       f"to {max(size, 0)} bytes after it was registered; the request needs "
                       f"bytes up to {end}")

    def close(self):
        if self.kind == SYSTEM:
            fd, self.fd = self.fd, -1
            if fd >= 0:
                os.close(fd)
            view, self.view = self.view, None
            mm, self._mmap = self._mmap, None
            if view is not None:
                try:
                    view.release()
                except BufferError:
                    pass
            if mm is not None:
                try:
                    mm.close()
                except BufferError:
                    # numpy views of the region are still alive somewhere (a
                    # model kept an input): the mapping is unmapped when the
                    # last one is collected; dropping our reference is enough.
                    pass
        else:
            ptr, self.device_ptr = self.device_ptr, 0
            if ptr:
                cupy = _cupy()
                try:
                    with cupy.cuda.Device(self.device_id):
                        cupy.cuda.runtime.ipcCloseMemHandle(ptr)
                except Exception as e:
                    raise _err(Code.INTERNAL, f"failed to close CUDA IPC handle: {e}") from None


class ShmLease:
    """A validated byte range of a registered region, held by one request.

    ``release()`` (idempotent) must be called when the request is done."""

    __slots__ = ("_manager", "_region", "offset", "byte_size")

    def __init__(self, manager: "SharedMemoryManager", region: _Region, offset: int,
                 byte_size: int):
        self._manager = manager
        self._region = region
        self.offset = offset
        self.byte_size = byte_size

    @property
    def kind(self) -> str:
        return self._region.kind

    @property
    def device_id(self) -> int:
        return self._region.device_id

    def memory(self) -> memoryview:
        """The bytes of this range (system memory only), writable, no copy."""
        region = self._region
        if region.kind != SYSTEM:
            raise _err(Code.INTERNAL, f"shared memory region '{region.name}' is not in "
                                      "system memory")
        return region.view[self.offset:self.offset + self.byte_size]

    def as_array(self, datatype: str, shape, *, input_name: str = "", model_name: str = "",
                 request_id: str = "") -> np.ndarray:
        """The range as an input tensor: a read-only numpy view (system memory;
        a CUDA region is copied to the host). Checks the byte size against
        datatype and shape with core's texts."""
        npdt = WIRE_TO_NUMPY.get(datatype)
        if npdt is None:
            raise _err(Code.INVALID_ARG, f"invalid datatype for input {input_name}")
        shape = tuple(int(d) for d in shape)
        count = math.prod(shape)
        if self._region.kind == SYSTEM:
            buf = self.memory()
        else:
            buf = memoryview(self._device_to_host())
        if datatype == "BYTES":
            return _parse_bytes(buf, count, shape, input_name, model_name, request_id)
        expected = count * npdt.itemsize
        if expected != self.byte_size:
            raise _err(
                Code.INVALID_ARG,
                f"{request_prefix(request_id)}input byte size mismatch for input '{input_name}' for "
                f"model '{model_name}'. Expected {expected}, got {self.byte_size}")
        if count == 0:
            return np.empty(shape, npdt)
        arr = np.frombuffer(buf, dtype=npdt, count=count).reshape(shape)
        arr.flags.writeable = False
        return arr

    def write(self, output_name: str, data: np.ndarray, datatype: str | None = None) -> int:
        """Writes an output tensor at the start of this range; returns the
        number of bytes written. Too small: Triton's allocator error."""
        if datatype == "BYTES" or (datatype is None and data.dtype == np.object_):
            raw = np.frombuffer(serialize_bytes_tensor(data), dtype=np.uint8)
        else:
            arr = np.ascontiguousarray(data)
            raw = arr.reshape(-1).view(np.uint8) if arr.size else np.empty(0, np.uint8)
        n = raw.nbytes
        if n > self.byte_size:
            raise _err(
                Code.INTERNAL,
                f"shared memory size specified with the request for output '{output_name}' "
                f"({self.byte_size} bytes) should be at least {n} bytes to hold the results")
        if n == 0:
            return 0
        region = self._region
        if region.kind == SYSTEM:
            region.check_backed(self.offset, n)
            dst = np.frombuffer(region.view, dtype=np.uint8, count=n, offset=self.offset)
            np.copyto(dst, raw)
        else:
            cupy = _cupy()
            with cupy.cuda.Device(region.device_id):
                cupy.cuda.runtime.memcpy(region.device_ptr + self.offset, raw.ctypes.data, n,
                                         cupy.cuda.runtime.memcpyHostToDevice)
        return n

    def _device_to_host(self) -> np.ndarray:
        region = self._region
        host = np.empty(self.byte_size, np.uint8)
        if self.byte_size:
            cupy = _cupy()
            with cupy.cuda.Device(region.device_id):
                cupy.cuda.runtime.memcpy(host.ctypes.data, region.device_ptr + self.offset,
                                         self.byte_size, cupy.cuda.runtime.memcpyDeviceToHost)
        return host

    def release(self):
        manager, self._manager = self._manager, None
        if manager is not None:
            manager._release(self._region)


def _parse_bytes(buf, count, shape, input_name, model_name, request_id) -> np.ndarray:
    end = len(buf)
    out = []
    pos = 0
    while pos < end:
        if pos + 4 > end:
            raise _err(
                Code.INVALID_ARG,
                f"{request_prefix(request_id)}incomplete string length indicator for inference input "
                f"'{input_name}' for model '{model_name}', expecting 4 bytes but only "
                f"{end - pos} bytes available")
        n = int.from_bytes(buf[pos:pos + 4], "little")
        pos += 4
        if pos + n > end:
            raise _err(
                Code.INVALID_ARG,
                f"{request_prefix(request_id)}element byte size indicator exceeds the end of the buffer "
                f"for inference input '{input_name}' for model '{model_name}'")
        out.append(bytes(buf[pos:pos + n]))
        pos += n
        if len(out) > count:
            break
    if len(out) < count:
        raise _err(
            Code.INVALID_ARG,
            f"{request_prefix(request_id)}expected {count} string elements for inference input "
            f"'{input_name}' for model '{model_name}', got {len(out)}")
    if len(out) > count:
        raise _err(
            Code.INVALID_ARG,
            f"{request_prefix(request_id)}unexpected number of string elements {count + 1} for "
            f"inference input '{input_name}' for model '{model_name}', expecting {count}")
    arr = np.empty(count, dtype=np.object_)
    arr[:] = out
    return arr.reshape(shape)


def _validate_key(name: str, key: str):
    """common.cc ValidateSharedMemoryKey."""
    stripped = key.lstrip("/")
    if not stripped:
        raise _err(Code.INVALID_ARG,
                   f"cannot register shared memory region '{name}' - invalid shm key '{key}'")
    if stripped.startswith(RESERVED_KEY_PREFIX):
        raise _err(Code.INVALID_ARG,
                   f"cannot register shared memory region '{name}' with key '{key}' as the key "
                   f"contains the reserved prefix '{RESERVED_KEY_PREFIX}'")


def _shm_open(key: str) -> int:
    """shm_open(key, O_RDWR): the POSIX object, never an arbitrary file."""
    stripped = key.lstrip("/")
    if "/" in stripped or stripped in (".", ".."):
        # glibc's shm_open rejects these (EINVAL); never walk the filesystem.
        raise OSError("invalid shared memory name")
    try:
        import _posixshmem  # CPython's binding of shm_open (Linux, macOS)

        return _posixshmem.shm_open("/" + stripped, os.O_RDWR, mode=0o600)
    except ImportError:
        flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        return os.open(os.path.join("/dev/shm", stripped), flags)


class SharedMemoryManager:
    """Registered client shared-memory regions (system and CUDA), by name.

    Region names share one namespace for both kinds, as in Triton."""

    def __init__(self, allow_client_shm: bool = False):
        self.allow_client_shm = bool(allow_client_shm)
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    # -- helpers ---------------------------------------------------------------

    def _check_allowed(self):
        if not self.allow_client_shm:
            raise _err(Code.UNSUPPORTED, CLIENT_SHM_DISABLED)

    @staticmethod
    def cuda_available() -> bool:
        return _cupy() is not None

    # -- registration ------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Registers system shared memory (alias of ``register_system``)."""
        self.register_system(name, key, offset, byte_size)

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_allowed()
        _validate_key(name, key)
        offset = int(offset)
        byte_size = int(byte_size)
        with self._lock:
            if name in self._regions:
                raise _err(Code.ALREADY_EXISTS,
                           f"shared memory region '{name}' already in manager")
            try:
                fd = _shm_open(key)
            except OSError:
                raise _err(Code.INTERNAL,
                           f"Unable to open shared memory region: '{key}'") from None
            try:
                try:
                    st = os.fstat(fd)
                except OSError:
                    raise _err(Code.INTERNAL,
                               f"Invalid shared memory region: '{key}'") from None
                if not stat.S_ISREG(st.st_mode) or st.st_size < 0:
                    raise _err(Code.INTERNAL, f"Invalid shared memory region: '{key}'")
                if offset < 0 or byte_size < 0 or offset + byte_size > st.st_size:
                    raise _err(Code.INVALID_ARG,
                               f"failed to register shared memory region '{name}': invalid args")
                if byte_size == 0:
                    # mmap(2) of length 0 fails with EINVAL in Triton.
                    raise _err(Code.INVALID_ARG,
                               f"failed to register shared memory region '{name}': unable to "
                               f"process address space{os.strerror(22)}")
                # mmap offsets must be page aligned: map from the page below.
                gran = mmap.ALLOCATIONGRANULARITY
                start = offset - offset % gran
                lead = offset - start
                try:
                    mm = mmap.mmap(fd, lead + byte_size, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
                except (OSError, ValueError) as e:
                    reason = os.strerror(e.errno) if getattr(e, "errno", None) else str(e)
                    raise _err(Code.INVALID_ARG,
                               f"failed to register shared memory region '{name}': unable to "
                               f"process address space{reason}") from None
            except BaseException:
                os.close(fd)
                raise
            region = _Region(name, key, offset, byte_size, SYSTEM)
            region.fd = fd
            region._mmap = mm
            region.view = memoryview(mm)[lead:lead + byte_size]
            self._regions[name] = region

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Registers CUDA memory exported by another process (cudaIpcMemHandle_t)."""
        self._check_allowed()
        cupy = _cupy()
        if cupy is None:
            # Triton built without GPU support answers every CUDA register so.
            raise _err(Code.INVALID_ARG,
                       f"failed to register CUDA shared memory region: '{name}', GPUs not "
                       "supported")
        if len(raw_handle) != CUDA_IPC_HANDLE_SIZE:
            # What cudaIpcOpenMemHandle of such bytes comes to in Triton (gRPC
            # hands them over unchecked; HTTP checks the length first).
            raise _err(Code.INVALID_ARG,
                       "failed to register shared memory region: invalid args")
        device_id = int(device_id)
        byte_size = int(byte_size)
        with self._lock:
            if name in self._regions:
                raise _err(Code.ALREADY_EXISTS,
                           f"shared memory region '{name}' already in manager")
            try:
                with cupy.cuda.Device(device_id):
                    ptr = int(cupy.cuda.runtime.ipcOpenMemHandle(
                        bytes(raw_handle), _CUDA_IPC_LAZY_ENABLE_PEER_ACCESS))
                    size = _cuda_allocation_size(ptr)
            except Exception:
                raise _err(Code.INVALID_ARG,
                           "failed to register shared memory region: invalid args") from None
            if size is not None and byte_size > size:
                with cupy.cuda.Device(device_id):
                    cupy.cuda.runtime.ipcCloseMemHandle(ptr)
                raise _err(Code.INVALID_ARG,
                           f"failed to register shared memory region '{name}': invalid args")
            region = _Region(name, "", 0, byte_size, CUDA, device_id)
            region.device_ptr = ptr
            self._regions[name] = region

    def unregister(self, name: str | None = None, kind: str = SYSTEM) -> None:
        """Unregisters ``name`` (None or "": every region of ``kind``). A name
        that is not registered (as ``kind``) is not an error. A region in use
        by in-flight requests goes when the last of them is done."""
        self._check_allowed()
        failed = []
        with self._lock:
            if name:
                names = [name]
            else:
                names = [n for n, r in self._regions.items() if r.kind == kind]
            for n in names:
                region = self._regions.get(n)
                if region is None or region.kind != kind:
                    continue
                if region.refs > 0:
                    region.awaiting_unregister = True
                    continue
                try:
                    region.close()
                except ServerError:
                    if name:
                        raise
                    failed.append(n)
                    continue
                del self._regions[n]
        if failed:
            label = "system" if kind == SYSTEM else "cuda"
            raise _err(Code.INTERNAL,
                       f"Failed to unregister the following {label} shared memory regions: "
                       + "".join(f"{n} ," for n in failed))

    def close(self) -> None:
        """Server shutdown: drops every region, in use or not."""
        self.unregister_all()

    def unregister_all(self) -> None:
        """Server shutdown: drops every region, in use or not."""
        with self._lock:
            regions = list(self._regions.values())
            self._regions.clear()
        for region in regions:
            try:
                region.close()
            except ServerError:
                pass

    def status(self, name: str | None = None, kind: str = SYSTEM) -> list[dict]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values() if r.kind == kind]
            region = self._regions.get(name)
            if region is None:
                label = "cuda" if kind == CUDA else "system"
                raise _err(Code.NOT_FOUND,
                           f"Unable to find {label} shared memory region: '{name}'")
            if region.kind != kind:
                if region.kind == CUDA:
                    raise _err(Code.NOT_FOUND,
                               f"The region named '{name}' is registered as CUDA shared memory, "
                               "not system shared memory")
                raise _err(Code.NOT_FOUND,
                           f"The region named '{name}' is registered as system shared memory, "
                           "not CUDA shared memory")
            return [region.status()]

    # -- use by requests ----------------------------------------------------------

    def acquire(self, name: str, offset: int = 0, byte_size: int = 0) -> ShmLease:
        """shared_memory_manager.cc GetMemoryInfo: checks the range and takes a
        reference on the region."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise _err(Code.NOT_FOUND, f"Unable to find shared memory region: '{name}'")
            size = region.byte_size if region.byte_size > 0 else 0
            if offset >= size:
                raise _err(Code.INVALID_ARG,
                           f"Invalid offset for shared memory region: '{name}'")
            if byte_size > _SIZE_MAX - offset:
                raise _err(
                    Code.INVALID_ARG,
                    f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) "
                    f"exceeds maximum value ({_SIZE_MAX}) for region '{name}'")
            if offset + byte_size > size:
                raise _err(Code.INVALID_ARG,
                           f"Invalid offset + byte size for shared memory region: '{name}'")
            region.check_backed(offset, byte_size)
            region.refs += 1
        return ShmLease(self, region, offset, byte_size)

    def input_array(self, region: str, offset: int, byte_size: int, datatype: str, shape, *,
                    input_name: str = "", model_name: str = "",
                    request_id: str = "") -> tuple[np.ndarray, ShmLease]:
        """An input tensor read from a region: (zero-copy view, lease to release)."""
        lease = self.acquire(region, offset, byte_size)
        try:
            arr = lease.as_array(datatype, shape, input_name=input_name, model_name=model_name,
                                 request_id=request_id)
        except BaseException:
            lease.release()
            raise
        return arr, lease

    def output_writer(self, region: str, offset: int, byte_size: int) -> ShmLease:
        """A lease whose ``write(name, array)`` stores an output into the region."""
        return self.acquire(region, offset, byte_size)

    def _release(self, region: _Region):
        with self._lock:
            region.refs -= 1
            if region.refs > 0 or not region.awaiting_unregister:
                return
            if self._regions.get(region.name) is region:
                del self._regions[region.name]
        try:
            region.close()
        except ServerError:
            pass
