#include "engine/runtime/fair_queue.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Drain(FairQueue<std::string>& q) {
  std::vector<std::string> out;
  while (!q.empty()) out.push_back(q.PopFront());
  return out;
}

TEST(FairQueueTest, OneTenantIsFifo) {
  FairQueue<std::string> q;
  for (int i = 0; i < 5; ++i) q.Push("a", 1, absl::StrCat("a", i));
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(q.queued("a"), 5);
  EXPECT_THAT(Drain(q), ElementsAre("a0", "a1", "a2", "a3", "a4"));
  EXPECT_EQ(q.num_tenants(), 0u);
}

// The burst case: a latecomer goes right after the burst's first item, not after all.
TEST(FairQueueTest, LatecomerOvertakesABurst) {
  FairQueue<std::string> q;
  for (int i = 0; i < 1000; ++i) q.Push("a", 1, absl::StrCat("a", i));
  q.Push("b", 1, "b0");
  std::vector<std::string*> head;
  q.Head(3, &head);
  ASSERT_EQ(head.size(), 3u);
  EXPECT_EQ(*head[0], "a0");
  EXPECT_EQ(*head[1], "b0");
  EXPECT_EQ(*head[2], "a1");
  EXPECT_EQ(q.queued("a"), 1000);
  EXPECT_EQ(q.queued("b"), 1);
}

TEST(FairQueueTest, LatecomerAfterSomePopsStillWaitsAtMostOneItem) {
  FairQueue<std::string> q;
  for (int i = 0; i < 100; ++i) q.Push("a", 1, absl::StrCat("a", i));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(q.PopFront(), absl::StrCat("a", i));
  q.Push("b", 1, "b0");
  EXPECT_EQ(q.PopFront(), "a10");
  EXPECT_EQ(q.PopFront(), "b0");
  EXPECT_EQ(q.PopFront(), "a11");
}

TEST(FairQueueTest, ThreeTenantsRoundRobin) {
  FairQueue<std::string> q;
  for (int i = 0; i < 3; ++i) q.Push("a", 1, absl::StrCat("a", i));
  for (int i = 0; i < 3; ++i) q.Push("b", 1, absl::StrCat("b", i));
  for (int i = 0; i < 3; ++i) q.Push("c", 1, absl::StrCat("c", i));
  EXPECT_THAT(Drain(q), ElementsAre("a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2"));
}

TEST(FairQueueTest, WeightsShareInProportion) {
  FairQueue<std::string> q;
  for (int i = 0; i < 6; ++i) q.Push("heavy", 2, absl::StrCat("h", i));
  for (int i = 0; i < 3; ++i) q.Push("light", 1, absl::StrCat("l", i));
  // Tags: h = 0.5, 1, 1.5, 2, 2.5, 3; l = 1, 2, 3 (ties go to the earlier arrival).
  EXPECT_THAT(Drain(q), ElementsAre("h0", "h1", "l0", "h2", "h3", "l1", "h4", "h5", "l2"));
}

// A tenant whose queue empties is forgotten: it comes back with neither credit nor debt.
TEST(FairQueueTest, IdleTenantGetsNoCredit) {
  FairQueue<std::string> q;
  q.Push("b", 1, "b0");
  EXPECT_EQ(q.PopFront(), "b0");
  for (int i = 0; i < 4; ++i) q.Push("a", 1, absl::StrCat("a", i));
  for (int i = 0; i < 2; ++i) q.PopFront();
  q.Push("b", 1, "b1");
  q.Push("b", 1, "b2");
  EXPECT_THAT(Drain(q), ElementsAre("a2", "b1", "a3", "b2"));
}

TEST(FairQueueTest, EraseIfRemovesAnywhereAndKeepsTheOrder) {
  FairQueue<std::string> q;
  for (int i = 0; i < 3; ++i) q.Push("a", 1, absl::StrCat("a", i));
  for (int i = 0; i < 3; ++i) q.Push("b", 1, absl::StrCat("b", i));
  std::vector<std::string> seen;
  EXPECT_EQ(q.EraseIf([&](std::string& s) {
    seen.push_back(s);
    return s == "a1" || s == "b0" || s == "b1" || s == "b2";
  }),
            4);
  EXPECT_THAT(seen, ElementsAre("a0", "b0", "a1", "b1", "a2", "b2"));
  EXPECT_EQ(q.queued("b"), 0);
  EXPECT_EQ(q.num_tenants(), 1u);
  EXPECT_THAT(Drain(q), ElementsAre("a0", "a2"));
}

TEST(FairQueueTest, ForEachVisitsInOrder) {
  FairQueue<std::string> q;
  q.Push("a", 1, "a0");
  q.Push("a", 1, "a1");
  q.Push("", 1, "d0");
  std::vector<std::string> seen;
  q.ForEach([&](std::string& s) { seen.push_back(s); });
  EXPECT_THAT(seen, ElementsAre("a0", "d0", "a1"));
}

TEST(FairQueueTest, WeightIsClamped) {
  FairQueue<std::string> q;
  q.Push("a", 0, "a0");
  q.Push("a", -5, "a1");
  q.Push("b", 1000000, "b0");
  EXPECT_THAT(Drain(q), ElementsAre("b0", "a0", "a1"));
}

}  // namespace
}  // namespace quill::engine
