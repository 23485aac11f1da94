// Where one TRITONBACKEND_Request's responses go, and how far the request
// has come: shared by the request, its response factories and its
// responses, so that what a backend sends from its own threads after
// ModelInstanceExecute returned (Triton allows it, decoupled or not) still
// lands, in the order it was sent.
//
// Two ways out. A caller that waits for the request (WaitDone, then Take)
// gets everything at once: pyserver does this for a request of a model that
// is not decoupled which its backend finished inside Execute. A decoupled
// request goes late (GoLate), and so does one the backend still holds when
// Execute returns (GoLateUnlessDone): from then on each response is handed
// to a hook on the thread that sent it, one sender at a time, and the hook
// is told which call is the last (the final flag, or every handle gone
// without it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "triton/core/tritonserver.h"

// The object behind TRITONSERVER_BufferAttributes (here, as outputs carry one).
struct TRITONSERVER_BufferAttributes {
  size_t byte_size = 0;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
};

namespace pyserver::triton {

// One tensor a response carries: its bytes are owned here (CPU memory).
struct OutputTensor {
  std::string name;
  TRITONSERVER_DataType datatype;
  std::vector<int64_t> shape;
  std::vector<char> data;
  TRITONSERVER_BufferAttributes attributes;  // TRITONBACKEND_OutputBufferAttributes
};

// A parameter of a request or a response, as TRITONSERVER_ParameterType
// types it: what a backend reads with TRITONBACKEND_RequestParameter and
// sets on its responses, and what BLS requests and responses carry.
struct Parameter {
  std::string name;
  TRITONSERVER_ParameterType type = TRITONSERVER_PARAMETER_STRING;
  std::string string_value;  // also BYTES
  int64_t int_value = 0;
  bool bool_value = false;
  double double_value = 0;
  // What the C API's vvalue points at: a string's characters, else the value.
  const void* value() const;
};

// What a response may carry, from the model's config: the output names it
// declares, and for each output with a `reshape`, its shape as the model
// makes it (reshape.shape) and as clients see it (dims). As Triton's core
// adds a response output: an undeclared name is refused, a reshaped one
// reported with the config's dims.
struct OutputRules {
  struct Reshape {
    std::vector<int64_t> from;  // reshape.shape
    std::vector<int64_t> to;    // dims
  };
  std::string model_name;
  bool batching = false;  // max_batch_size > 0: a leading batch dimension
  std::vector<std::string> names;
  std::vector<std::pair<std::string, Reshape>> reshapes;

  // The shape to report for output `name` made as `shape`, or false when
  // the config declares no such output (with the names empty, any goes).
  bool Apply(const std::string& name, std::vector<int64_t>* shape) const;
};

// One response a backend sent: outputs, or an error; final or not.
struct SentResponse {
  std::vector<std::unique_ptr<OutputTensor>> outputs;
  std::vector<Parameter> parameters;
  bool has_response = false;  // false: only the final flag (factory)
  bool has_error = false;
  TRITONSERVER_Error_Code error_code = TRITONSERVER_ERROR_UNKNOWN;
  std::string error_message;
  bool final = false;
};

class ResponseSink {
 public:
  // sent is null when the request's last handle went without a final flag.
  // Returns whether the request has been cancelled meanwhile.
  using DeliverHook = bool (*)(void* owner, SentResponse* sent, bool last);
  // Once the last response was delivered and the request released.
  using DoneHook = void (*)(void* owner);

  // A response, or the final flag alone; dropped once the last was delivered.
  void Push(SentResponse response);
  // A response or response factory made for the request / gone.
  void AddHolder();
  void DropHolder();
  // TRITONBACKEND_RequestRelease. True when the request object was handed
  // off (HandOff) and the releasing caller must now delete it.
  bool MarkReleased();
  // After Execute: the request object is deleted by whoever releases it.
  // False when the backend already released it (the caller deletes it).
  bool HandOff();

  // Blocks until the request is released and nothing more can come (the
  // final flag was sent, or no factory or response is left).
  void WaitDone();
  std::vector<SentResponse> Take();

  // TRITONBACKEND_StateUpdate: the request's new value of one implicit
  // state (replacing one of the same name); TakeStates after WaitDone.
  void UpdateState(std::unique_ptr<OutputTensor> state);
  std::vector<std::unique_ptr<OutputTensor>> TakeStates();

  // The model's rules for the outputs of this request's responses (null:
  // none checked). Set before the backend sees the request.
  void SetOutputRules(std::shared_ptr<const OutputRules> rules) { rules_ = std::move(rules); }
  const OutputRules* output_rules() const { return rules_.get(); }

  // TRITONBACKEND_RequestIsCancelled / ResponseFactoryIsCancelled: set when
  // the server learns it: at the batch's start, through the flag the
  // model's scheduler sets as the request is cancelled while it runs
  // (Scheduler::WatchRunning), or at a late response.
  void SetCancelled() { cancelled_->store(true, std::memory_order_relaxed); }
  bool IsCancelled() const { return cancelled_->load(std::memory_order_relaxed); }
  const std::shared_ptr<std::atomic<bool>>& cancelled_flag() const { return cancelled_; }

  // The index of the request's next reported response (response statistics
  // count per index, as Triton's response factory does).
  uint32_t NextResponseIndex() { return next_response_index_.fetch_add(1); }

  // Everything queued so far, and all that follows, goes to deliver(owner,
  // ...) on the sending thread; done(owner) once when the last was
  // delivered and the request released. Call without locks the hooks take.
  void GoLate(DeliverHook deliver, DoneHook done, void* owner);

  // GoLate, unless the request is already released and finished (then
  // false: nothing more can come, and the caller Take()s what was sent).
  // For a request whose Execute returned: the instance moves on to its next
  // batch while the backend answers this one from its own threads.
  bool GoLateUnlessDone(DeliverHook deliver, DoneHook done, void* owner);

  // Undoes GoLate for a request its backend never took (Execute failed):
  // waits out a delivery in progress, then calls no hook again. True if
  // done(owner) had not been called (the caller releases owner itself).
  // Call without locks the hooks take.
  bool Detach();

 private:
  bool FinishedLocked() const { return final_ || (released_ && holders_ == 0); }
  void GoLateLocked(DeliverHook deliver, DoneHook done, void* owner,
                    std::unique_lock<std::mutex>& lock);
  // Hands queued responses to the hook; one drainer at a time keeps order.
  void DrainLocked(std::unique_lock<std::mutex>& lock);

  std::shared_ptr<const OutputRules> rules_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<uint32_t> next_response_index_{0};
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<SentResponse> sent_;
  std::vector<std::unique_ptr<OutputTensor>> states_;
  int holders_ = 0;
  bool released_ = false;
  bool handed_off_ = false;
  bool final_ = false;      // a final flag was pushed
  DeliverHook deliver_ = nullptr;
  DoneHook done_ = nullptr;
  void* owner_ = nullptr;
  bool draining_ = false;
  bool last_delivered_ = false;
  bool done_called_ = false;
};

}  // namespace pyserver::triton
