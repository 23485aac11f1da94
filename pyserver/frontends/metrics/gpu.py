"""GPU metrics: Triton's ``nv_gpu_utilization``, ``nv_gpu_memory_total_bytes``,
``nv_gpu_memory_used_bytes``, ``nv_gpu_power_usage``, ``nv_gpu_power_limit``
and ``nv_energy_consumption``, labelled ``gpu_uuid``, for each GPU CUDA shows
this process (CUDA_VISIBLE_DEVICES applies).

Triton reads them from DCGM; here they come from NVML (libnvidia-ml, part of
the NVIDIA driver), opened with ctypes at run time, so a machine without a
driver simply has none. GPUs are matched to CUDA's by PCI bus ID (csrc's
CudaRuntime). As for the CPU gauges, nothing runs between scrapes: a scrape
re-reads NVML when ``--metrics-interval-ms`` has passed since the last read.
Energy is the joules used since the server started; a value NVML cannot give
(power on some boards) reads 0, as in Triton, with one warning.
"""

from __future__ import annotations

import ctypes
import logging
import time

log = logging.getLogger("pyserver")

__all__ = ["GPU_HELP", "GpuSampler"]

GPU_HELP = {
    "nv_gpu_utilization": "GPU utilization rate [0.0 - 1.0)",
    "nv_gpu_memory_total_bytes": "GPU total memory, in bytes",
    "nv_gpu_memory_used_bytes": "GPU used memory, in bytes",
    "nv_gpu_power_usage": "GPU power usage in watts",
    "nv_gpu_power_limit": "GPU power management limit in watts",
    "nv_energy_consumption": "GPU energy consumption in joules since the Triton Server started",
}
# family -> type, in Triton's registration order
GPU_FAMILIES = (("nv_gpu_utilization", "gauge"), ("nv_gpu_memory_total_bytes", "gauge"),
                ("nv_gpu_memory_used_bytes", "gauge"), ("nv_gpu_power_usage", "gauge"),
                ("nv_gpu_power_limit", "gauge"), ("nv_energy_consumption", "counter"))


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class _Gpu:
    def __init__(self, bus_id: str, uuid: str, handle):
        self.bus_id = bus_id
        self.uuid = uuid
        self.handle = handle
        self.values = dict.fromkeys(GPU_HELP, 0.0)
        self.energy_start_mj: int | None = None
        self.warned: set = set()


class GpuSampler:
    """``families()`` -> [(name, type, [(labels, value)])]; ``gpus`` empty
    and ``reason`` set when there is nothing to read. ``nvml_library`` and
    ``bus_ids`` (the CUDA-visible GPUs' PCI bus IDs) default to the system's."""

    def __init__(self, interval_s: float = 2.0, nvml_library: str | None = None,
                 bus_ids: list[str] | None = None, clock=time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self.gpus: list[_Gpu] = []
        self.reason = ""
        if bus_ids is None:
            from pyserver.engine.memory import cuda_pci_bus_ids
            from pyserver.kernel.errors import ServerError
            try:
                bus_ids = cuda_pci_bus_ids()
            except ServerError as err:  # a device CUDA lists but cannot describe
                self.reason = f"CUDA gives no PCI bus IDs: {err.message}"
                return
        if not bus_ids:
            self.reason = "no GPU is visible to CUDA"
            return
        try:
            self._nvml = ctypes.CDLL(nvml_library or "libnvidia-ml.so.1")
        except OSError as err:
            self.reason = f"NVML (the driver's libnvidia-ml) could not be loaded: {err}"
            return
        self._nvml.nvmlErrorString.restype = ctypes.c_char_p
        err = self._nvml.nvmlInit_v2()
        if err:
            self.reason = f"NVML did not initialize: {self._error(err)}"
            return
        for index, bus_id in enumerate(bus_ids):
            handle = ctypes.c_void_p()
            err = self._nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(),
                                                              ctypes.byref(handle))
            if err:
                log.warning("GPU metrics will not be available for device %d: NVML does not "
                            "find bus %s (%s)", index, bus_id, self._error(err))
                continue
            uuid = ctypes.create_string_buffer(96)
            err = self._nvml.nvmlDeviceGetUUID(handle, uuid, ctypes.c_uint(len(uuid)))
            if err:
                log.warning("GPU metrics will not be available for device %d: no UUID (%s)",
                            index, self._error(err))
                continue
            gpu = _Gpu(bus_id, uuid.value.decode(), handle)
            log.info("Collecting metrics for GPU %d: %s", index, gpu.uuid)
            self.gpus.append(gpu)
        self._read()
        self._last_read = clock()

    def _error(self, code: int) -> str:
        return self._nvml.nvmlErrorString(code).decode(errors="replace")

    def refresh(self) -> None:
        if self.gpus and self._clock() - self._last_read >= self.interval_s:
            self._read()
            self._last_read = self._clock()

    def _query(self, gpu: _Gpu, family: str, fn, *out) -> bool:
        err = fn(gpu.handle, *[ctypes.byref(o) for o in out])
        if err == 0:
            return True
        if family not in gpu.warned:  # said once; the value reads 0 meanwhile
            gpu.warned.add(family)
            log.warning("Unable to get %s for GPU %s: %s", family, gpu.uuid, self._error(err))
        return False

    def _read(self) -> None:
        nvml = self._nvml
        for gpu in self.gpus:
            v = gpu.values
            util = _Utilization()
            v["nv_gpu_utilization"] = util.gpu * 0.01 if self._query(
                gpu, "nv_gpu_utilization", nvml.nvmlDeviceGetUtilizationRates, util) else 0.0
            memory = _Memory()
            ok = self._query(gpu, "nv_gpu_memory_total_bytes", nvml.nvmlDeviceGetMemoryInfo, memory)
            v["nv_gpu_memory_total_bytes"] = float(memory.total) if ok else 0.0
            v["nv_gpu_memory_used_bytes"] = float(memory.used) if ok else 0.0
            milliwatts = ctypes.c_uint()
            v["nv_gpu_power_usage"] = milliwatts.value / 1000.0 if self._query(
                gpu, "nv_gpu_power_usage", nvml.nvmlDeviceGetPowerUsage, milliwatts) else 0.0
            limit = ctypes.c_uint()
            v["nv_gpu_power_limit"] = limit.value / 1000.0 if self._query(
                gpu, "nv_gpu_power_limit", nvml.nvmlDeviceGetPowerManagementLimit, limit) else 0.0
            energy = ctypes.c_ulonglong()
            if self._query(gpu, "nv_energy_consumption",
                           nvml.nvmlDeviceGetTotalEnergyConsumption, energy):
                if gpu.energy_start_mj is None:
                    gpu.energy_start_mj = energy.value
                v["nv_energy_consumption"] = (energy.value - gpu.energy_start_mj) / 1000.0

    def families(self) -> list[tuple[str, str, list]]:
        if not self.gpus:
            return []
        self.refresh()
        return [(name, typ, [({"gpu_uuid": g.uuid}, g.values[name]) for g in self.gpus])
                for name, typ in GPU_FAMILIES]
