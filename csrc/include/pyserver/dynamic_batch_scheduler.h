// DynamicBatchScheduler: Triton's dynamic batcher.
//
// Instances pull batches: an idle instance becomes the one "leader" that
// evaluates the queue (other idle instances wait behind it), so a batch is
// formed exactly when an instance can run it, as Triton does when it waits
// for a free payload slot. Rules, as in Triton:
//  - a batch that reaches a preferred size is sent at once (the largest
//    reachable preferred size wins);
//  - otherwise requests wait up to max_queue_delay counted from the oldest
//    request of the candidate batch, then everything up to max_batch_size goes;
//  - with no delay, whatever is queued goes;
//  - requests are never split; requests with different shape keys never share
//    a batch when the equal-shape rule applies;
//  - priority levels are served lowest level first; queue policies reject or
//    delay expired requests and bound the queue. A request's deadline is
//    kept by a thread of its own (started with the first deadline), so it
//    expires on time while every instance is busy, as Triton's batcher thread
//    does.
// A BatchStrategy (custom batching) may end a batch before any of these
// rules would; its batch is not topped up later. The first request of a
// batch always goes, even one the strategy refuses: a batch must hold one,
// and a refused lone request would otherwise never run.
// Opt-in eager policy (ours): the idle instance takes what is queued at once,
// so batching adds no latency at low load and still batches under load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pyserver/adaptive_spin.h"
#include "pyserver/batch_strategy.h"
#include "pyserver/priority_queue.h"
#include "pyserver/scheduler.h"

namespace pyserver {

struct DynamicBatcherConfig {
  uint32_t max_batch_size = 1;
  std::vector<uint32_t> preferred_batch_sizes;  // empty -> {max_batch_size}
  uint64_t max_queue_delay_us = 0;
  uint32_t priority_levels = 0;
  uint32_t default_priority_level = 0;
  QueuePolicy default_policy;
  std::map<uint32_t, QueuePolicy> priority_policies;
  bool preserve_ordering = false;
  bool enforce_equal_shapes = false;
  bool eager = false;
  // Test hook (TRITONSERVER_DELAY_SCHEDULER): form no batch until this many
  // requests are queued, once.
  uint32_t delay_scheduler_count = 0;
  // An idle instance spins at most this long for new work before it sleeps
  // (while such spins have paid lately: adaptive_spin.h), and spins at most
  // the end of a batching wait this long (the part that sleeping would
  // oversleep; the rest of the wait sleeps).
  uint64_t idle_spin_us = 50;
  uint64_t wait_spin_us = 200;
  // Custom batching (null: none); shared with whoever loaded it, held by
  // the scheduler until Stop().
  std::shared_ptr<BatchStrategy> strategy;
};

class DynamicBatchScheduler : public Scheduler {
 public:
  static Status Create(const DynamicBatcherConfig& config, std::shared_ptr<ModelStats> stats,
                       std::shared_ptr<CompletionQueue> completions,
                       std::unique_ptr<Scheduler>* scheduler);
  ~DynamicBatchScheduler() override;

  Status Enqueue(const RequestInfo& info, uint64_t* id) override;
  Status EnqueueForTaker(const RequestInfo& info, uint64_t* id, bool* wait_holds) override;
  bool NextBatch(Batch* batch) override;
  // A batch if the rules send one now (never while a batching delay runs).
  bool TryNextBatch(Batch* batch, uint64_t* due_ns) override;
  bool TakeReadyBatch(Batch* batch) override;
  void ParkInstances(bool parked) override;
  size_t TopUp(Batch* batch) override;
  void Stop() override;
  size_t QueuedCount() const override;

 protected:
  bool CancelQueued(uint64_t id) override;

 private:
  enum class Decision { kSend, kWait, kEmpty };

  DynamicBatchScheduler(const DynamicBatcherConfig& config,
                        std::shared_ptr<BatchStrategy> strategy, std::shared_ptr<ModelStats> stats,
                        std::shared_ptr<CompletionQueue> completions);

  // Under mu_. Decides what the leader does now: send the first *count
  // requests, wait until *wake_at_ns, or wait for a request. Expired requests
  // under REJECT are moved into *rejected.
  Decision FormBatch(uint64_t now_ns, size_t* count, bool* saturated, uint64_t* wake_at_ns,
                     std::vector<QueuedRequest>* rejected);
  bool IsPreferred(uint32_t size) const;
  // Under mu_: moves the first `count` queued requests into *batch.
  void TakeBatch(size_t count, bool saturated, uint64_t now_ns, bool after_idle, Batch* batch);
  // Drops the lock and spins until a request arrives or deadline_ns; true
  // if one arrived. Called with mu_ held; returns with it held.
  bool SpinForArrival(std::unique_lock<std::mutex>* lock, uint64_t deadline_ns);
  // Under mu_: how long before a batching wait's end (remaining_ns away)
  // the leader stops sleeping and spins, and the learning of it from a
  // timed wait that was to end at target_ns.
  uint64_t WakeMargin(uint64_t remaining_ns) const;
  void LearnOversleep(uint64_t target_ns);
  // Under mu_: applies the queue policies' timeouts due at now_ns, moving
  // the requests they reject into *rejected.
  void ExpireDue(uint64_t now_ns, std::vector<QueuedRequest>* rejected);
  // The deadline keeper: sleeps until the earliest deadline, expires what is
  // due, until Stop().
  void KeepDeadlines();

  const DynamicBatcherConfig config_;  // its strategy moved out, into strategy_
  const bool has_strategy_;
  const uint32_t max_preferred_;
  const uint64_t max_delay_ns_;

  mutable std::mutex mu_;
  std::condition_variable leader_cv_;
  std::condition_variable follower_cv_;
  PriorityQueue queue_;
  // Custom batching, until Stop() lets it go (the library is finalized
  // once the model has let go of it too).
  std::shared_ptr<BatchStrategy> strategy_;
  bool stopped_ = false;
  bool parked_ = false;  // see Scheduler::ParkInstances
  bool leader_present_ = false;
  bool leader_waiting_ = false;
  // TryNextBatch()'s caller was told to wait for a batching delay (and
  // asks again as it ends); cleared by the next evaluation of the queue.
  bool taker_waiting_ = false;
  uint64_t wake_threshold_ = 1;   // queued batch size that re-wakes the leader
  uint64_t queued_batch_size_ = 0;
  uint64_t next_deadline_ns_ = 0;  // earliest request deadline, 0 = none
  std::condition_variable deadline_cv_;  // an earlier deadline, or Stop()
  std::thread deadline_keeper_;          // started by the first deadline
  uint32_t delay_count_ = 0;
  std::atomic<uint64_t> arrivals_{0};  // enqueues so far, read while spinning
  AdaptiveSpin idle_spin_;             // the idle leader's spin (config_.idle_spin_us)
  static constexpr uint64_t kMinWakeMarginNs = 5000;
  static constexpr uint64_t kWakeMarginSlackNs = 5000;
  uint64_t wake_margin_ns_ = 60000;  // under mu_: see WakeMargin()
};

}  // namespace pyserver
