/* A stand-in for libnvidia-ml with the entry points pyserver/frontends/metrics/gpu.py
 * uses. GPUs are found by PCI bus ID "0000:0N:00.0" (N = 1, 2, ...: what
 * csrc/tests/fake_cudart.cc gives device N-1); each reads fixed values, and
 * its energy counter grows by 1500 mJ per read. FAKE_NVML_FAIL_POWER=1 makes
 * power usage fail, as on GPUs that do not report it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int index; unsigned long long energy_mj; } fake_device;
typedef struct { unsigned int gpu; unsigned int memory; } nvml_utilization;
typedef struct { unsigned long long total; unsigned long long free; unsigned long long used; } nvml_memory;

static fake_device devices[8];
static int initialized;

enum { OK = 0, ERROR_UNINITIALIZED = 1, ERROR_INVALID_ARGUMENT = 2, ERROR_NOT_SUPPORTED = 3,
       ERROR_NOT_FOUND = 6 };

int nvmlInit_v2(void) {
    for (int i = 0; i < 8; ++i) { devices[i].index = i; devices[i].energy_mj = 1000000ULL * (i + 1); }
    initialized = 1;
    return OK;
}

int nvmlShutdown(void) { initialized = 0; return OK; }

const char* nvmlErrorString(int result) {
    switch (result) {
        case ERROR_NOT_SUPPORTED: return "Not Supported";
        case ERROR_NOT_FOUND: return "Not Found";
        default: return "Unknown Error";
    }
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, fake_device** device) {
    unsigned int domain, bus, dev, fn;
    if (!initialized) return ERROR_UNINITIALIZED;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4 || bus < 1 || bus > 8)
        return ERROR_NOT_FOUND;
    *device = &devices[bus - 1];
    return OK;
}

int nvmlDeviceGetUUID(fake_device* device, char* uuid, unsigned int length) {
    snprintf(uuid, length, "GPU-fake-%d", device->index);
    return OK;
}

int nvmlDeviceGetUtilizationRates(fake_device* device, nvml_utilization* rates) {
    rates->gpu = 40 + device->index;
    rates->memory = 10;
    return OK;
}

int nvmlDeviceGetMemoryInfo(fake_device* device, nvml_memory* memory) {
    memory->total = 80ULL << 30;
    memory->used = (1ULL << 30) * (device->index + 1);
    memory->free = memory->total - memory->used;
    return OK;
}

int nvmlDeviceGetPowerUsage(fake_device* device, unsigned int* milliwatts) {
    const char* fail = getenv("FAKE_NVML_FAIL_POWER");
    if (fail != NULL && strcmp(fail, "1") == 0) return ERROR_NOT_SUPPORTED;
    *milliwatts = 150500 + 1000 * device->index;
    return OK;
}

int nvmlDeviceGetPowerManagementLimit(fake_device* device, unsigned int* milliwatts) {
    *milliwatts = 700000;
    return OK;
}

int nvmlDeviceGetTotalEnergyConsumption(fake_device* device, unsigned long long* millijoules) {
    device->energy_mj += 1500;
    *millijoules = device->energy_mj;
    return OK;
}
