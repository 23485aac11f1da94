// Scheduler: the interface between a model's request queue and its instances.
//
// Frontends Enqueue() requests; each model instance loops on NextBatch(),
// executes the batch, then calls CompleteBatch(). Requests the scheduler fails
// on its own (queue timeout, cancellation, shutdown) are completed straight
// into the CompletionQueue with their status. Implementations:
// DynamicBatchScheduler, PassThroughScheduler and SequenceBatchScheduler.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pyserver/completion_queue.h"
#include "pyserver/model_stats.h"
#include "pyserver/response_orderer.h"
#include "pyserver/status.h"

namespace pyserver {

// What a frontend knows about a request when it enqueues it.
// Sequence flags of a request (Triton's TRITONSERVER_REQUEST_FLAG_SEQUENCE_*).
enum SequenceFlags : uint32_t { kSequenceStart = 1, kSequenceEnd = 2 };

struct RequestInfo {
  Token token = 0;
  uint32_t batch_size = 0;   // first dim when the model batches, else 0
  uint32_t priority = 0;     // as sent by the client; 0 = default level
  uint64_t timeout_us = 0;   // client's timeout; 0 = none
  uint64_t shape_key = 0;    // equal keys may share a batch (equal-shape rule)
  // Sequence models only: the correlation ID (0 = none; string IDs arrive
  // hashed, with the text in correlation_label for error messages).
  uint64_t correlation_id = 0;
  uint32_t sequence_flags = 0;
  std::string correlation_label;
  // What a BatchStrategy reads of the request (batch_strategy.h); null
  // when the model has none.
  const void* view = nullptr;
};

struct QueuedRequest {
  Token token = 0;
  uint64_t id = 0;           // engine-assigned; used by Cancel()
  uint32_t batch_size = 0;
  uint32_t priority_level = 0;
  uint64_t shape_key = 0;
  uint64_t enqueue_ns = 0;
  uint64_t deadline_ns = 0;  // absolute; 0 = none
  uint64_t correlation_id = 0;
  uint32_t sequence_flags = 0;
  const void* view = nullptr;  // RequestInfo::view
};

// A batch taken by an instance. `sequence` orders batches for preserve_ordering.
struct Batch {
  uint64_t sequence = 0;
  uint64_t dequeue_ns = 0;
  uint32_t batch_size = 0;   // sum of max(1, request batch size)
  // Formed deliberately at this size (a preferred size, a full batch, a
  // shape boundary): TopUp() leaves it as it is.
  bool saturated = false;
  // The instance was idle (spinning on an empty queue) when this batch came:
  // a sign of low load, where the handoff back to the event loop is worth
  // timing carefully (see CompletionQueue::SpinUntilWaiter).
  bool after_idle = false;
  std::vector<QueuedRequest> requests;
};

// Timestamps an instance takes while running a batch (NowNs() clock).
struct BatchTimes {
  uint64_t compute_start_ns = 0;
  uint64_t compute_input_end_ns = 0;
  uint64_t compute_output_start_ns = 0;
  uint64_t compute_end_ns = 0;
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<ModelStats> stats, std::shared_ptr<CompletionQueue> completions,
            bool preserve_ordering);
  virtual ~Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Accepts a request or fails it synchronously (queue full, stopping). On
  // success *id identifies the request for Cancel().
  virtual Status Enqueue(const RequestInfo& info, uint64_t* id) = 0;

  // Enqueue(), and *wait_holds: true when the batching wait that the last
  // TryNextBatch() reported (its *due_ns) still stands with this request
  // queued, so a TryNextBatch() before that time would form no batch and
  // the event loop, whose timer asks again then, need not ask now (the
  // request reaches no preferred or maximum size and carries no deadline,
  // see DynamicBatchScheduler). Default: never; the loop asks each time.
  virtual Status EnqueueForTaker(const RequestInfo& info, uint64_t* id, bool* wait_holds) {
    *wait_holds = false;
    return Enqueue(info, id);
  }

  // Blocks until a batch is ready for this (idle) instance. Returns false once
  // the scheduler is stopped and has nothing more to hand out.
  virtual bool NextBatch(Batch* batch) = 0;

  // Takes a batch only if one is ready now, without waiting: for an
  // instance driven by the event loop, which asks again when a request
  // arrives or its last batch completes, and, when `due_ns` is not null and
  // *due_ns is set non-zero, at that NowNs() time (a batching delay's end)
  // if nothing arrives before. Default: never (instances of such schedulers
  // run on threads).
  virtual bool TryNextBatch(Batch* batch, uint64_t* due_ns) {
    (void)batch;
    if (due_ns != nullptr) *due_ns = 0;
    return false;
  }

  // While parked, instances blocked in NextBatch() take no batch and are not
  // woken by arrivals: the event loop takes every batch with TryNextBatch()
  // instead (a cheap model runs on the loop's own thread, see
  // pyserver/model/inline.py). Unparking wakes them to take what is
  // queued. Default: schedulers whose batches only instances take ignore it.
  virtual void ParkInstances(bool parked) { (void)parked; }

  // Grows a batch already taken by an instance with requests that arrived
  // since, while they fit (Triton lets a payload grow until an instance
  // starts it). An instance calls this right before it starts executing:
  // for a Python backend that is after it got the GIL, so a batch formed at
  // once by a spinning instance still collects what queued meanwhile.
  // Returns the number of requests added. Default: adds nothing.
  virtual size_t TopUp(Batch* batch) { (void)batch; return 0; }

  // Removes a still-queued request and completes it as CANCELLED. Returns
  // false when the request is no longer queued (executing or done); one
  // that runs watched (WatchRunning) has its flag set then.
  bool Cancel(uint64_t id);

  // A request that left the queue for a backend that may ask whether it
  // was cancelled while it runs (TRITONBACKEND_RequestIsCancelled): a
  // Cancel(id) from now on sets *cancelled. The caller unwatches it once
  // the backend has let the request go.
  void WatchRunning(uint64_t id, std::shared_ptr<std::atomic<bool>> cancelled);
  void UnwatchRunning(uint64_t id);

  // Ends a sequence that will send no END request (an iterative sequence,
  // whose request the backend released for good). Returns false when there
  // is no such sequence. Default: schedulers without sequences have none.
  virtual bool EndSequence(uint64_t correlation_id) {
    (void)correlation_id;
    return false;
  }

  // Stops accepting requests, fails everything still queued with UNAVAILABLE
  // and releases every instance blocked in NextBatch().
  virtual void Stop() = 0;

  // For an instance thread: a batch if one is ready now and instances are
  // not parked; never waits. Default: never (CompleteAndNext then waits in
  // NextBatch()).
  virtual bool TakeReadyBatch(Batch* batch) { (void)batch; return false; }

  // Requests queued right now (not yet taken by an instance).
  virtual size_t QueuedCount() const = 0;

  // An instance finished `batch`: records statistics and delivers `token`
  // (which stands for the whole batch) to the completion queue, in dequeue
  // order when preserve_ordering is set. `status` is the batch's outcome.
  void CompleteBatch(const Batch& batch, const BatchTimes& times, Token token,
                     const Status& status);

  // An instance thread's step between two batches: CompleteBatch(done, ...)
  // then the next batch into *next. When a batch is ready at once, `done`'s
  // wake-up of the event loop is held (CompletionQueue::PushHoldingSignal)
  // and *signal_held is set: the caller starts the new batch, which needs
  // the GIL, and then calls completions()->ReleaseHeldSignal(), so the loop
  // wakes into a free GIL instead of taking it from under the instance.
  // Otherwise the loop is woken before this blocks in NextBatch(). Returns
  // NextBatch()'s answer (false once stopped).
  bool CompleteAndNext(const Batch& done, const BatchTimes& times, Token token,
                       const Status& status, Batch* next, bool* signal_held);

  // Only the statistics part of CompleteBatch: for a batch whose caller
  // answers its requests itself (an instance driven by the event loop,
  // which would otherwise signal itself through the completion queue).
  // Not for preserve_ordering, whose order the completion queue keeps.
  void RecordBatch(const Batch& batch, const BatchTimes& times, const Status& status);

  ModelStats* stats() const { return stats_.get(); }
  CompletionQueue* completions() const { return completions_.get(); }

 protected:
  // Cancel()'s part for a request still queued (see Cancel).
  virtual bool CancelQueued(uint64_t id) = 0;

  // Completes requests the scheduler failed on its own, recording stats.
  void FailRequests(std::vector<QueuedRequest>* requests, const Status& status,
                    FailureReason reason);
  uint64_t NextRequestId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t NextBatchSequence() { return next_batch_seq_++; }  // under the subclass lock

 private:
  std::shared_ptr<ModelStats> stats_;
  std::shared_ptr<CompletionQueue> completions_;
  std::unique_ptr<ResponseOrderer> orderer_;  // null unless preserve_ordering
  std::atomic<uint64_t> next_id_{1};
  std::mutex running_mu_;  // guards running_
  std::unordered_map<uint64_t, std::shared_ptr<std::atomic<bool>>> running_;
  uint64_t next_batch_seq_ = 0;
};

}  // namespace pyserver
