#include "pyserver/triton/response_sink.h"

#include <utility>

namespace pyserver::triton {

const void* Parameter::value() const {
  switch (type) {
    case TRITONSERVER_PARAMETER_INT:
      return &int_value;
    case TRITONSERVER_PARAMETER_BOOL:
      return &bool_value;
    case TRITONSERVER_PARAMETER_DOUBLE:
      return &double_value;
    default:  // STRING, BYTES
      return string_value.c_str();
  }
}

bool OutputRules::Apply(const std::string& name, std::vector<int64_t>* shape) const {
  if (names.empty()) return true;
  bool declared = false;
  for (const auto& n : names) declared = declared || n == name;
  if (!declared) return false;
  for (const auto& [output, reshape] : reshapes) {
    if (output != name) continue;
    // Triton's InferenceResponse::Output::Reshape: the dims stand where the
    // reshape's were, the batch dimension kept, each -1 of the dims taking
    // the size the model gave the next -1 of the reshape.
    const size_t offset = batching ? 1 : 0;
    std::vector<int64_t> variable;
    for (size_t i = 0; i < reshape.from.size(); ++i) {
      if (reshape.from[i] == -1 && i + offset < shape->size()) {
        variable.push_back((*shape)[i + offset]);
      }
    }
    std::vector<int64_t> reported;
    if (batching && !shape->empty()) reported.push_back((*shape)[0]);
    size_t next = 0;
    for (int64_t dim : reshape.to) {
      reported.push_back(dim != -1 ? dim : (next < variable.size() ? variable[next++] : -1));
    }
    *shape = std::move(reported);
    break;
  }
  return true;
}

void ResponseSink::Push(SentResponse response) {
  std::unique_lock<std::mutex> lock(mu_);
  if (last_delivered_) return;  // Triton ignores what comes after the final flag
  if (response.final) final_ = true;
  sent_.push_back(std::move(response));
  changed_.notify_all();
  DrainLocked(lock);
}

void ResponseSink::AddHolder() {
  std::lock_guard<std::mutex> lock(mu_);
  ++holders_;
}

void ResponseSink::DropHolder() {
  std::unique_lock<std::mutex> lock(mu_);
  --holders_;
  changed_.notify_all();
  DrainLocked(lock);
}

bool ResponseSink::MarkReleased() {
  std::unique_lock<std::mutex> lock(mu_);
  released_ = true;
  changed_.notify_all();
  bool delete_request = handed_off_;
  DrainLocked(lock);
  return delete_request;
}

bool ResponseSink::HandOff() {
  std::lock_guard<std::mutex> lock(mu_);
  if (released_) return false;
  handed_off_ = true;
  return true;
}

void ResponseSink::WaitDone() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return released_ && FinishedLocked(); });
}

std::vector<SentResponse> ResponseSink::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SentResponse> out;
  out.swap(sent_);
  return out;
}

void ResponseSink::UpdateState(std::unique_ptr<OutputTensor> state) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kept : states_) {
    if (kept->name == state->name) {
      kept = std::move(state);
      return;
    }
  }
  states_.push_back(std::move(state));
}

std::vector<std::unique_ptr<OutputTensor>> ResponseSink::TakeStates() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::unique_ptr<OutputTensor>> out;
  out.swap(states_);
  return out;
}

void ResponseSink::GoLate(DeliverHook deliver, DoneHook done, void* owner) {
  std::unique_lock<std::mutex> lock(mu_);
  GoLateLocked(deliver, done, owner, lock);
}

bool ResponseSink::GoLateUnlessDone(DeliverHook deliver, DoneHook done, void* owner) {
  std::unique_lock<std::mutex> lock(mu_);
  if (released_ && FinishedLocked()) return false;
  GoLateLocked(deliver, done, owner, lock);
  return true;
}

void ResponseSink::GoLateLocked(DeliverHook deliver, DoneHook done, void* owner,
                                std::unique_lock<std::mutex>& lock) {
  deliver_ = deliver;
  done_ = done;
  owner_ = owner;
  DrainLocked(lock);
}

bool ResponseSink::Detach() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return !draining_; });
  if (deliver_ == nullptr || done_called_) return false;
  deliver_ = nullptr;
  done_ = nullptr;
  done_called_ = true;
  return true;
}

void ResponseSink::DrainLocked(std::unique_lock<std::mutex>& lock) {
  // Whoever finds the sink idle drains it; others only queue. The hooks run
  // unlocked (they take the GIL); deliver_/done_/owner_ change only while no
  // one drains (they are set once, by GoLate under the lock before any drain
  // can run a hook, and cleared by Detach after waiting drains out).
  if (deliver_ == nullptr || draining_) return;
  draining_ = true;
  for (;;) {
    if (!sent_.empty() && !last_delivered_) {
      std::vector<SentResponse> batch;
      batch.swap(sent_);
      lock.unlock();
      bool last = false;
      for (SentResponse& response : batch) {
        last = response.final;
        if (deliver_(owner_, &response, last)) SetCancelled();
        if (last) break;
      }
      lock.lock();
      if (last) {
        last_delivered_ = true;
        sent_.clear();
      }
    } else if (!last_delivered_ && sent_.empty() && released_ && holders_ == 0) {
      last_delivered_ = true;  // nothing can send the final flag any more
      lock.unlock();
      if (deliver_(owner_, nullptr, true)) SetCancelled();
      lock.lock();
    } else if (last_delivered_ && released_ && !done_called_) {
      done_called_ = true;
      lock.unlock();
      done_(owner_);
      lock.lock();
    } else {
      break;
    }
  }
  draining_ = false;
  changed_.notify_all();  // Detach waits for this
}

}  // namespace pyserver::triton
