// Trace ids: one sequence for the process, drawn by the server's tracer
// (engine/trace_id.pyx) and by the traces C programs make
// (TRITONSERVER_InferenceTraceNew), so that no two traces share an id.
#pragma once

#include <cstdint>

namespace pyserver {

// The next id; 0 is never given (it names no trace).
uint64_t NextTraceId();

}  // namespace pyserver
