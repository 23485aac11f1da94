#include "pyserver/sequence_batch_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "test_util.h"

namespace pyserver {
namespace {

using testing::Harness;
using testing::Tokens;

RequestInfo Seq(Token token, uint64_t corr, uint32_t flags = 0) {
  RequestInfo info;
  info.token = token;
  info.batch_size = 1;
  info.correlation_id = corr;
  info.sequence_flags = flags;
  return info;
}

constexpr uint32_t kStart = kSequenceStart;
constexpr uint32_t kEnd = kSequenceEnd;

std::unique_ptr<Scheduler> Make(Harness& h, SequenceBatcherConfig c) {
  c.model_name = "seq";
  std::unique_ptr<Scheduler> s;
  EXPECT_TRUE(SequenceBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  return s;
}

SequenceBatchScheduler* AsSeq(const std::unique_ptr<Scheduler>& s) {
  return static_cast<SequenceBatchScheduler*>(s.get());
}

// The tokens of the next batch, taken by an instance on its own thread.
std::future<std::vector<Token>> NextAsync(Scheduler* s) {
  return std::async(std::launch::async, [s] {
    Batch b;
    return s->NextBatch(&b) ? Tokens(b) : std::vector<Token>{};
  });
}

// One sequence starts and its batch waits (for `quiet`, at least); a
// second one starts, and the two run together.
void ExpectTheFirstWaitsForASecond(Scheduler* s, std::chrono::milliseconds quiet) {
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  auto fut = NextAsync(s);
  EXPECT_EQ(fut.wait_for(quiet), std::future_status::timeout);
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id).ok());
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), (std::vector<Token>{11, 21}));
}

TEST(SequenceBatcher, TritonsErrorsForBadSequenceRequests) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 4;
  auto s = Make(h, c);
  uint64_t id;
  Status st = s->Enqueue(Seq(1, 0, kStart), &id);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArg);
  EXPECT_EQ(st.message(),
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID");
  st = s->Enqueue(Seq(1, 7), &id);
  EXPECT_EQ(st.message(),
            "inference request for sequence 7 to model 'seq' must specify the START flag on the "
            "first request of the sequence");
  RequestInfo named = Seq(1, 99);
  named.correlation_label = "user-42";
  EXPECT_EQ(s->Enqueue(named, &id).message(),
            "inference request for sequence user-42 to model 'seq' must specify the START flag "
            "on the first request of the sequence");
  RequestInfo batched = Seq(1, 5, kStart);
  batched.batch_size = 2;
  EXPECT_EQ(s->Enqueue(batched, &id).message(),
            "inference request to model 'seq' must specify batch-size 1 due to requirements of "
            "sequence batcher");
  EXPECT_EQ(s->QueuedCount(), 0u);
}

TEST(SequenceBatcher, OneRequestPerSequencePerBatchInOrder) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 4;
  auto s = Make(h, c);
  uint64_t id;
  // Sequence 1: three requests; sequence 2: two.
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(12, 1), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(22, 2, kEnd), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(13, 1, kEnd), &id).ok());
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{11, 21}));
  EXPECT_EQ(b.requests[0].sequence_flags, kStart);
  EXPECT_EQ(b.requests[1].correlation_id, 2u);
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{12, 22}));
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 1u);  // sequence 2 ended
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{13}));
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 0u);
  // Ended: its ID needs a START again.
  EXPECT_EQ(s->Enqueue(Seq(14, 1), &id).code(), StatusCode::kInvalidArg);
  EXPECT_EQ(h.stats->Snapshot().pending_count, 0);
}

TEST(SequenceBatcher, BacklogWaitsForAFreeSlot) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 0;  // one slot
  auto s = Make(h, c);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id).ok());  // backlog
  ASSERT_TRUE(s->Enqueue(Seq(22, 2, kEnd), &id).ok());    // joins its backlog
  EXPECT_EQ(AsSeq(s)->BackloggedSequences(), 1u);
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{11});
  ASSERT_TRUE(s->Enqueue(Seq(12, 1, kEnd), &id).ok());
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{12});  // sequence 1 ends: slot to sequence 2
  EXPECT_EQ(AsSeq(s)->BackloggedSequences(), 0u);
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{21});
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{22});
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 0u);
}

TEST(SequenceBatcher, IdleSequencesLoseTheirSlot) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 0;
  c.max_sequence_idle_us = 50000;  // 50 ms
  auto s = Make(h, c);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id).ok());  // backlog behind the idle one
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{11});
  // Sequence 1 goes quiet: the waiting instance reaps it and runs sequence 2.
  auto fut = std::async(std::launch::async, [&] {
    Batch next;
    return s->NextBatch(&next) ? Tokens(next)[0] : Token(0);
  });
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), 21u);
  Status st = s->Enqueue(Seq(12, 1), &id);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArg);  // must START again
}

TEST(SequenceBatcher, SequencesStayOnTheirInstance) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 1;
  c.instance_count = 2;
  auto s = Make(h, c);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id).ok());
  // Two instance threads; each must see only its own sequence, three times.
  std::promise<void> go;
  std::shared_future<void> ready = go.get_future().share();
  auto instance = [&]() {
    ready.wait();
    std::vector<uint64_t> seen;
    Batch b;
    for (int i = 0; i < 3 && s->NextBatch(&b); ++i) seen.push_back(b.requests[0].correlation_id);
    return seen;
  };
  auto a = std::async(std::launch::async, instance);
  auto bb = std::async(std::launch::async, instance);
  go.set_value();
  testing::SleepMs(20);
  for (uint64_t corr : {1, 2}) {
    ASSERT_TRUE(s->Enqueue(Seq(corr * 10 + 2, corr), &id).ok());
    ASSERT_TRUE(s->Enqueue(Seq(corr * 10 + 3, corr, kEnd), &id).ok());
  }
  ASSERT_EQ(a.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(bb.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  std::vector<uint64_t> x = a.get(), y = bb.get();
  ASSERT_EQ(x.size(), 3u);
  ASSERT_EQ(y.size(), 3u);
  EXPECT_TRUE(x[0] == x[1] && x[1] == x[2]);
  EXPECT_TRUE(y[0] == y[1] && y[1] == y[2]);
  EXPECT_NE(x[0], y[0]);
}

TEST(SequenceBatcher, OldestWaitsForAPreferredBatch) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 4;
  c.oldest = true;
  c.max_candidate_sequences = 4;
  c.preferred_batch_sizes = {2};
  c.max_queue_delay_us = 2000000;  // long: only the preferred size releases it
  auto s = Make(h, c);
  ExpectTheFirstWaitsForASecond(s.get(), std::chrono::milliseconds(50));
}

TEST(SequenceBatcher, CancelAndStop) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 0;
  auto s = Make(h, c);
  uint64_t id1, id2, id3;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id1).ok());
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id2).ok());  // backlog
  ASSERT_TRUE(s->Enqueue(Seq(12, 1), &id3).ok());
  EXPECT_TRUE(s->Cancel(id2));
  EXPECT_TRUE(s->Cancel(id3));
  EXPECT_FALSE(s->Cancel(id3));
  s->Stop();
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].code, StatusCode::kCancelled);
  EXPECT_EQ(items[1].code, StatusCode::kCancelled);
  EXPECT_EQ(items[2].code, StatusCode::kUnavailable);
  EXPECT_EQ(items[2].token, 11u);
  Batch b;
  EXPECT_FALSE(s->NextBatch(&b));
  EXPECT_EQ(h.stats->Snapshot().pending_count, 0);
  uint64_t id;
  EXPECT_EQ(s->Enqueue(Seq(31, 3, kStart), &id).code(), StatusCode::kUnavailable);
}

TEST(SequenceBatcher, DirectWaitsForMinimumSlotUtilization) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 4;  // four slots
  c.max_queue_delay_us = 10000000;  // 10 s: never reached here
  c.minimum_slot_utilization = 0.5f;
  auto s = Make(h, c);
  // One slot of four ready: it waits for a second.
  ExpectTheFirstWaitsForASecond(s.get(), std::chrono::milliseconds(100));
  uint64_t id;
  // Below the utilization, the delay still bounds the wait.
  Harness h2;
  c.max_queue_delay_us = 50000;  // 50 ms
  auto s2 = Make(h2, c);
  ASSERT_TRUE(s2->Enqueue(Seq(31, 3, kStart), &id).ok());
  Batch b;
  ASSERT_TRUE(s2->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{31});
  EXPECT_GE(b.dequeue_ns - b.requests[0].enqueue_ns, 50000000u);
  // Without a utilization (Triton's default 0) direct never waits.
  Harness h3;
  c.minimum_slot_utilization = 0;
  c.max_queue_delay_us = 10000000;
  auto s3 = Make(h3, c);
  ASSERT_TRUE(s3->Enqueue(Seq(41, 4, kStart), &id).ok());
  auto fut3 = NextAsync(s3.get());
  ASSERT_EQ(fut3.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut3.get(), std::vector<Token>{41});
}

TEST(SequenceBatcher, IterativeSequencesRunAgainUntilEnded) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 0;  // one slot
  c.iterative = true;
  auto s = Make(h, c);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(21, 2, kStart), &id).ok());  // backlog
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{11});
  EXPECT_EQ(b.requests[0].sequence_flags, kStart);
  // Rescheduled: the same request again, without START, keeps its slot.
  ASSERT_TRUE(s->Enqueue(Seq(11, 1), &id).ok());
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{11});
  EXPECT_EQ(b.requests[0].sequence_flags, 0u);
  EXPECT_EQ(AsSeq(s)->BackloggedSequences(), 1u);
  // Released for good: the slot goes to the backlogged sequence.
  EXPECT_TRUE(s->EndSequence(1));
  EXPECT_FALSE(s->EndSequence(1));
  EXPECT_EQ(AsSeq(s)->BackloggedSequences(), 0u);
  EXPECT_EQ(s->Enqueue(Seq(12, 1), &id).code(), StatusCode::kInvalidArg);  // over
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{21});
  // A sequence ended while it waits in the backlog runs what it has queued,
  // then frees its slot.
  ASSERT_TRUE(s->Enqueue(Seq(31, 3, kStart), &id).ok());
  EXPECT_TRUE(s->EndSequence(3));
  // Sequence 2 is rescheduled, then cancelled while queued: it is over, and
  // its slot goes to sequence 3.
  ASSERT_TRUE(s->Enqueue(Seq(22, 2), &id).ok());
  EXPECT_TRUE(s->Cancel(id));
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 1u);
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{31});
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 0u);
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].code, StatusCode::kCancelled);
  EXPECT_EQ(items[0].token, 22u);
  EXPECT_EQ(h.stats->Snapshot().pending_count, 0);
}

TEST(SequenceBatcher, EndSequenceWithRequestsStillQueued) {
  Harness h;
  SequenceBatcherConfig c;
  c.max_batch_size = 2;
  auto s = Make(h, c);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Seq(11, 1, kStart), &id).ok());
  ASSERT_TRUE(s->Enqueue(Seq(12, 1), &id).ok());
  EXPECT_TRUE(s->EndSequence(1));
  EXPECT_FALSE(s->EndSequence(7));  // never started
  EXPECT_EQ(s->Enqueue(Seq(13, 1), &id).code(), StatusCode::kInvalidArg);
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{11});
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 1u);  // 12 still to run
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{12});
  EXPECT_EQ(AsSeq(s)->ActiveSequences(), 0u);
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

// An instance stamps a slot's activity while another thread, whose clock
// reading is a little older, enqueues: the slot must not look idle (a
// negative age once wrapped around as a huge one).
TEST(SequenceBatcher, ActivityNewerThanTheReaperClockIsNotIdle) {
  Harness h;
  SequenceBatcherConfig c;
  c.model_name = "seq";
  c.max_batch_size = 4;
  std::unique_ptr<Scheduler> s;
  ASSERT_TRUE(SequenceBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  uint64_t id;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  auto instance = std::async(std::launch::async, [&] {
    Batch b;
    while (s->NextBatch(&b)) {
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      for (uint64_t n = 0; n < 300 && !stop; ++n) {
        const uint64_t corr = 1 + t * 100000 + n;
        for (int k = 0; k < 4; ++k) {
          uint32_t flags = (k == 0 ? kSequenceStart : 0) | (k == 3 ? kSequenceEnd : 0);
          RequestInfo info;
          info.token = corr * 10 + k;
          info.batch_size = 1;
          info.correlation_id = corr;
          info.sequence_flags = flags;
          uint64_t rid;
          if (!s->Enqueue(info, &rid).ok()) failures++;
        }
      }
    });
  }
  for (std::thread& th : clients) th.join();
  stop = true;
  while (s->QueuedCount() > 0) testing::SleepMs(1);
  s->Stop();
  instance.wait();
  (void)id;
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace pyserver
