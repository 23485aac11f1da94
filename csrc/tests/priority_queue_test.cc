#include "pyserver/priority_queue.h"

#include <gtest/gtest.h>

namespace pyserver {
namespace {

QueuedRequest R(uint64_t id, uint32_t level, uint64_t deadline = 0) {
  QueuedRequest r;
  r.id = id;
  r.token = id;
  r.priority_level = level;
  r.deadline_ns = deadline;
  return r;
}

std::vector<uint64_t> Ids(const PriorityQueue& q) {
  std::vector<uint64_t> out;
  q.ForEach([&](const QueuedRequest& r) {
    out.push_back(r.id);
    return true;
  });
  return out;
}

TEST(PriorityQueue, LevelMapping) {
  PriorityQueue q(3, 2, QueuePolicy(), {});
  EXPECT_EQ(q.LevelFor(0), 2u);
  EXPECT_EQ(q.LevelFor(1), 1u);
  EXPECT_EQ(q.LevelFor(3), 3u);
  EXPECT_EQ(q.LevelFor(4), 2u);
  PriorityQueue single(0, 0, QueuePolicy(), {});
  EXPECT_EQ(single.LevelFor(7), 0u);
}

TEST(PriorityQueue, DeadlinesFromPolicy) {
  QueuePolicy p;
  p.default_timeout_us = 100;
  p.allow_timeout_override = true;
  PriorityQueue q(0, 0, p, {});
  EXPECT_EQ(q.DeadlineFor(0, 1000, 0), 1000u + 100000u);
  EXPECT_EQ(q.DeadlineFor(0, 1000, 50), 1000u + 50000u);    // shortened
  EXPECT_EQ(q.DeadlineFor(0, 1000, 500), 1000u + 100000u);  // never lengthened
}

TEST(PriorityQueue, TimeoutsRejectOrDelay) {
  QueuePolicy reject;
  QueuePolicy delay;
  delay.timeout_action = QueuePolicy::TimeoutAction::kDelay;
  PriorityQueue q(2, 1, reject, {{2, delay}});
  ASSERT_TRUE(q.Enqueue(R(1, 1, 10)).ok());
  ASSERT_TRUE(q.Enqueue(R(2, 1, 100)).ok());
  ASSERT_TRUE(q.Enqueue(R(3, 2, 10)).ok());
  ASSERT_TRUE(q.Enqueue(R(4, 2)).ok());
  std::vector<QueuedRequest> rejected;
  EXPECT_EQ(q.ApplyTimeouts(50, &rejected), 100u);  // earliest still pending
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].id, 1u);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(Ids(q), (std::vector<uint64_t>{2, 4, 3}));  // 3 delayed behind 4
  std::vector<QueuedRequest> out;
  q.PopFront(2, &out);
  EXPECT_EQ(out[1].id, 4u);
  QueuedRequest removed;
  EXPECT_TRUE(q.Remove(3, &removed));
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace pyserver
