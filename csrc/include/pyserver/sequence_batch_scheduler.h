// SequenceBatchScheduler: Triton's sequence batcher, for stateful models.
//
// Every request carries a correlation ID and START/END flags. A sequence is
// bound to one slot of one instance from its START until its END request is
// taken, so all its requests run on the same instance, in order, one per
// batch. A batch holds the next request of several sequences (at most one
// each, up to max_batch_size), oldest first. Sequences that find every slot
// taken wait in a backlog, in arrival order, and get the next slot freed.
// A bound sequence that sends nothing for max_sequence_idle_microseconds
// loses its slot; its next request must START again.
//
// Slots per instance: max(1, max_batch_size) for the direct strategy,
// max_candidate_sequences for oldest. Oldest waits up to max_queue_delay
// for a preferred batch size; direct waits as long for at least
// minimum_slot_utilization of its slots to be ready (at 0, the default, it
// never waits). Batches hold only ready
// requests; rows are not pinned to slot positions (the control tensors, not
// the row, tell a model which sequence a row belongs to).
//
// Iterative sequences (iterative_sequence: true): a sequence is one request
// that the model runs again and again (the backend releases it with
// RESCHEDULE and it is enqueued anew, without START). It has no END
// request: the sequence ends when the backend releases the request for good
// (EndSequence) or when its queued request is cancelled.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pyserver/scheduler.h"

namespace pyserver {

struct SequenceBatcherConfig {
  std::string model_name;
  uint32_t max_batch_size = 0;              // 0: the model does not batch
  uint32_t instance_count = 1;
  uint64_t max_sequence_idle_us = 1000000;  // Triton's default: 1 s
  bool oldest = false;                      // strategy: direct unless oldest
  uint32_t max_candidate_sequences = 0;     // oldest: slots per instance (0: batch size)
  std::vector<uint32_t> preferred_batch_sizes;  // oldest
  // Both strategies: how long a ready request may wait for a fuller batch
  // (oldest: a preferred size; direct: minimum_slot_utilization).
  uint64_t max_queue_delay_us = 0;
  float minimum_slot_utilization = 0;           // direct: fraction of slots ready
  bool preserve_ordering = false;
  bool iterative = false;                       // iterative_sequence
};

class SequenceBatchScheduler : public Scheduler {
 public:
  static Status Create(const SequenceBatcherConfig& config, std::shared_ptr<ModelStats> stats,
                       std::shared_ptr<CompletionQueue> completions,
                       std::unique_ptr<Scheduler>* scheduler);
  ~SequenceBatchScheduler() override;

  Status Enqueue(const RequestInfo& info, uint64_t* id) override;
  // The calling thread is an instance: the first call from a thread binds it
  // to the next instance index, and it only ever gets its own sequences.
  bool NextBatch(Batch* batch) override;
  // The sequence `correlation_id` sends nothing more: its slot goes to the
  // next sequence once its queued requests are taken (at once when none
  // are). Returns false when the sequence is not active.
  bool EndSequence(uint64_t correlation_id) override;
  void Stop() override;
  size_t QueuedCount() const override;

  // Sequences bound to a slot, and waiting in the backlog (for tests).
  size_t ActiveSequences() const;
  size_t BackloggedSequences() const;

 protected:
  bool CancelQueued(uint64_t id) override;

 private:
  struct Slot {
    uint32_t instance = 0;
    bool bound = false;
    uint64_t correlation_id = 0;
    bool end_queued = false;     // its END arrived: no more requests will come
    uint64_t last_activity_ns = 0;
    std::deque<QueuedRequest> queue;
  };
  struct BacklogSequence {
    uint64_t correlation_id = 0;
    bool end_queued = false;
    std::deque<QueuedRequest> queue;
  };

  SequenceBatchScheduler(const SequenceBatcherConfig& config, std::shared_ptr<ModelStats> stats,
                         std::shared_ptr<CompletionQueue> completions);

  uint32_t InstanceOfCaller();                      // lock held
  void Bind(size_t slot, BacklogSequence* from);    // lock held
  void ReleaseSlot(size_t slot);                    // lock held
  void ReapIdle(uint64_t now_ns);                   // lock held
  uint64_t NextIdleDeadline() const;                // lock held; 0: none
  // Slots of `instance` with a request ready, oldest head first; lock held.
  std::vector<size_t> ReadySlots(uint32_t instance) const;

  const SequenceBatcherConfig config_;
  const uint32_t slots_per_instance_;
  const uint32_t max_rows_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::vector<Slot> slots_;                        // instance-major
  std::vector<size_t> free_slots_;                 // a stack
  std::unordered_map<uint64_t, size_t> active_;    // correlation ID -> slot, until END queued
  std::deque<std::shared_ptr<BacklogSequence>> backlog_;
  std::unordered_map<uint64_t, std::shared_ptr<BacklogSequence>> backlog_index_;
  std::unordered_map<std::thread::id, uint32_t> instance_of_thread_;
  size_t queued_ = 0;
};

}  // namespace pyserver
