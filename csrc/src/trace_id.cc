#include "pyserver/trace_id.h"

#include <atomic>

namespace pyserver {

namespace {
std::atomic<uint64_t> g_next_trace_id{1};
}  // namespace

uint64_t NextTraceId() { return g_next_trace_id.fetch_add(1, std::memory_order_relaxed); }

}  // namespace pyserver
