#include "pyserver/cuda_stream_pool.h"

#include "pyserver/cuda_runtime.h"

namespace pyserver {

Status CudaStreamPool::Create(const CudaRuntime& runtime, int device, int count,
                              std::unique_ptr<CudaStreamPool>* pool) {
  if (count <= 0) {
    return Status(StatusCode::kInvalidArg, "a CUDA stream pool needs at least one stream");
  }
  CudaDeviceScope scope(runtime, device);  // streams belong to the current device
  PYSERVER_RETURN_IF_ERROR(scope.status());
  std::unique_ptr<CudaStreamPool> created(new CudaStreamPool(runtime, device));
  for (int i = 0; i < count; ++i) {
    void* stream = nullptr;
    PYSERVER_RETURN_IF_ERROR(runtime.StreamCreate(&stream));  // the destructor frees the rest
    created->streams_.push_back(stream);
  }
  *pool = std::move(created);
  return Status::Ok();
}

CudaStreamPool::~CudaStreamPool() {
  if (streams_.empty()) return;
  CudaDeviceScope scope(runtime_, device_);
  for (void* stream : streams_) runtime_.StreamDestroy(stream);
}

void* CudaStreamPool::Next() {
  return streams_[next_.fetch_add(1, std::memory_order_relaxed) % streams_.size()];
}

Status CudaStreamPool::Synchronize() const {
  for (void* stream : streams_) PYSERVER_RETURN_IF_ERROR(runtime_.StreamSynchronize(stream));
  return Status::Ok();
}

}  // namespace pyserver
