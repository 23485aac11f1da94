// Spinning that stops where it does not pay: AdaptiveSpin's learning, a spin
// cut short once its thread was descheduled, and the schedulers' and the
// completion queue's waits built on them. Timing checks use generous margins
// and compare CPU burnt against what an unconditional spin would burn.
#include "pyserver/adaptive_spin.h"

#include <gtest/gtest.h>
#include <time.h>

#include <thread>

#include "pyserver/clock.h"
#include "pyserver/dynamic_batch_scheduler.h"
#include "pyserver/pass_through_scheduler.h"
#include "pyserver/spin.h"
#include "test_util.h"

namespace pyserver {
namespace {

using testing::Harness;
using testing::Req;
using testing::SleepMs;

uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

TEST(AdaptiveSpin, SpinsUntilSpinsMissThenProbes) {
  AdaptiveSpin spin(1000);
  EXPECT_EQ(spin.Budget(), 1000u);  // no evidence yet: spin
  int misses = 0;
  while (spin.spinning()) {
    spin.Record(false);
    ASSERT_LT(++misses, 20);
  }
  EXPECT_GE(misses, 3);  // one miss does not stop it
  int spun = 0;
  for (uint32_t i = 0; i < 4 * AdaptiveSpin::kProbeEvery; ++i) spun += spin.Budget() > 0;
  EXPECT_EQ(spun, 4);  // one probe in kProbeEvery waits
}

TEST(AdaptiveSpin, CaughtSpinsTurnItBackOn) {
  AdaptiveSpin spin(1000);
  for (int i = 0; i < 40; ++i) spin.Record(false);
  EXPECT_FALSE(spin.spinning());
  int hits = 0;
  while (!spin.spinning()) {
    spin.Record(true);
    ASSERT_LT(++hits, 20);
  }
  EXPECT_EQ(spin.Budget(), 1000u);
  EXPECT_LE(spin.score(), AdaptiveSpin::kOne);
  for (int i = 0; i < 100; ++i) spin.Record(true);
  EXPECT_LE(spin.score(), AdaptiveSpin::kOne);
  EXPECT_GT(spin.score(), AdaptiveSpin::kOne - 16);
}

TEST(AdaptiveSpin, CatchesLaterThanItPaysStopIt) {
  AdaptiveSpin spin(300, 50);
  EXPECT_EQ(spin.pay_ns(), 50u);
  EXPECT_EQ(spin.Budget(), 300u);  // on: the whole spin
  for (int i = 0; i < 20; ++i) spin.Record(true, 40);  // in time: stays on
  EXPECT_TRUE(spin.spinning());
  int late = 0;
  while (spin.spinning()) {
    spin.Record(true, 150);  // caught, but after a wake-up's worth of spinning
    ASSERT_LT(++late, 20);
  }
  EXPECT_GE(late, 3);
  // Off: a probe spins only as long as a catch would still pay.
  for (uint32_t i = 0; i < 2 * AdaptiveSpin::kProbeEvery; ++i) {
    const uint64_t budget = spin.Budget();
    EXPECT_TRUE(budget == 0 || budget == 50u) << budget;
  }
  EXPECT_EQ(AdaptiveSpin(30, 50).pay_ns(), 30u);  // never more than the spin
  EXPECT_EQ(AdaptiveSpin(300).pay_ns(), 300u);    // by default any catch pays
}

TEST(AdaptiveSpin, NoMaximumNeverSpins) {
  AdaptiveSpin spin(0);
  for (uint32_t i = 0; i < 2 * AdaptiveSpin::kProbeEvery; ++i) EXPECT_EQ(spin.Budget(), 0u);
}

TEST(SpinUntil, StopsOnceItsThreadWasAway) {
  // The condition "takes" the core away once (as a descheduled thread
  // would find): the spin then ends long before its deadline.
  int calls = 0;
  const uint64_t start = NowNs();
  bool done = SpinUntil(start + 10ull * 1000 * 1000 * 1000, [&] {
    if (++calls == 10) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return false;
  });
  EXPECT_FALSE(done);
  EXPECT_LT(NowNs() - start, 2ull * 1000 * 1000 * 1000);
}

TEST(SpinUntil, ReturnsWhenDone) {
  int calls = 0;
  EXPECT_TRUE(SpinUntil(NowNs() + 10ull * 1000 * 1000 * 1000, [&] { return ++calls > 500; }));
}

TEST(DynamicBatcherWaits, ABatchingWaitSleepsAndEndsOnTime) {
  // A 20 ms delay with a spin window longer than it: before, the whole
  // wait spun; now it sleeps to the last few tens of µs.
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.max_queue_delay_us = 20 * 1000;
  c.wait_spin_us = 100 * 1000;
  std::unique_ptr<Scheduler> s;
  ASSERT_TRUE(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Req(1), &id).ok());
  const uint64_t start = NowNs();
  const uint64_t cpu0 = ThreadCpuNs();
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  const uint64_t waited = NowNs() - start, cpu = ThreadCpuNs() - cpu0;
  EXPECT_EQ(b.requests.size(), 1u);
  EXPECT_GE(waited, 19ull * 1000 * 1000);  // the delay counts from the enqueue
  EXPECT_LT(waited, 2000ull * 1000 * 1000);
  EXPECT_LT(cpu, 10ull * 1000 * 1000) << "the batching wait spun instead of sleeping";
}

TEST(DynamicBatcherWaits, AnArrivalDuringTheSleepStillCompletesTheBatch) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 2;
  c.max_queue_delay_us = 5 * 1000 * 1000;  // never reached: the second request fills it
  std::unique_ptr<Scheduler> s;
  ASSERT_TRUE(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Req(1), &id).ok());
  std::thread late([&] {
    SleepMs(20);
    uint64_t id2;
    EXPECT_TRUE(s->Enqueue(Req(2), &id2).ok());
  });
  const uint64_t start = NowNs();
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  late.join();
  EXPECT_EQ(b.requests.size(), 2u);
  EXPECT_LT(NowNs() - start, 2000ull * 1000 * 1000);
}

// Requests 10 ms apart to an instance whose idle spin is 4 ms: every spin
// misses. Returns the instance thread's CPU over its last 12 waits, which
// spinning every time would make 12 x 4 ms.
uint64_t LateIdleWaitsCpuNs(Scheduler* s) {
  constexpr int kWaits = 24;
  uint64_t late_cpu = 0;
  std::thread feeder([&] {
    for (int i = 0; i < kWaits; ++i) {
      SleepMs(10);
      uint64_t id;
      EXPECT_TRUE(s->Enqueue(Req(i + 1), &id).ok());
    }
  });
  for (int i = 0; i < kWaits; ++i) {
    const uint64_t cpu0 = ThreadCpuNs();
    Batch b;
    EXPECT_TRUE(s->NextBatch(&b));
    if (i >= kWaits - 12) late_cpu += ThreadCpuNs() - cpu0;
  }
  feeder.join();
  return late_cpu;
}

TEST(DynamicBatcherWaits, IdleSpinStopsWhenArrivalsComeLaterThanIt) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 1;
  c.idle_spin_us = 4000;
  std::unique_ptr<Scheduler> s;
  ASSERT_TRUE(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  EXPECT_LT(LateIdleWaitsCpuNs(s.get()), 24ull * 1000 * 1000);  // at most a probe spins
}

TEST(PassThroughWaits, IdleSpinStopsWhenArrivalsComeLaterThanIt) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false, 4000);
  EXPECT_LT(LateIdleWaitsCpuNs(&s), 24ull * 1000 * 1000);
}

TEST(CompletionQueueWaits, MeetingNoSpinningWaiterStopsSpinning) {
  Harness h;
  const uint64_t cpu0 = ThreadCpuNs();
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(h.completions->SpinUntilWaiter(2000 * 1000));
  // 40 unconditional spins would burn 80 ms of this thread's CPU; a handful
  // of misses and a probe or two burn ~20 ms. CPU time, not wall time: on
  // a busy machine the spins are descheduled, which costs wall time only.
  EXPECT_LT(ThreadCpuNs() - cpu0, 60ull * 1000 * 1000);
}

TEST(CompletionQueueWaits, ASpinningWaiterIsMet) {
  Harness h;
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    while (!stop.load()) h.completions->SpinWaitNonEmpty(1000 * 1000);
  });
  // A spin also ends when this thread is descheduled (starting the waiter
  // may do that), so look until met, within a generous bound.
  bool met = false;
  const uint64_t start = NowNs();
  while (!met && NowNs() - start < 5ull * 1000 * 1000 * 1000) {
    met = h.completions->SpinUntilWaiter(1000 * 1000);
  }
  EXPECT_TRUE(met);
  stop = true;
  waiter.join();
}

}  // namespace
}  // namespace pyserver
