#include "engine/runtime/draft_backoff.h"

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

TEST(DraftBackoffTest, FullDraftsWhileAccepted) {
  DraftBackoff backoff;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(backoff.Budget(4), 4);
    backoff.Record(4, 3);
  }
  EXPECT_GT(backoff.acceptance(), 0.7);
}

TEST(DraftBackoffTest, RejectionsHalveThenPauseThenRetry) {
  DraftBackoff backoff;
  int steps_to_pause = 0;
  while (!backoff.paused()) {
    ASSERT_GT(backoff.Budget(4), 0);
    backoff.Record(4, 0);
    ++steps_to_pause;
  }
  EXPECT_LE(steps_to_pause, 5);
  for (int i = 0; i < DraftBackoff::kPauseSteps; ++i) EXPECT_EQ(backoff.Budget(4), 0);
  EXPECT_EQ(backoff.Budget(4), 4);  // tries again in full
  backoff.Record(4, 0);
  EXPECT_EQ(backoff.Budget(4), 2);  // one miss: half
  backoff.Record(2, 2);
  EXPECT_EQ(backoff.Budget(4), 4);
}

}  // namespace
}  // namespace quill::engine
