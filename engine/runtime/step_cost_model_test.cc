#include "engine/runtime/step_cost_model.h"

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

TEST(StepCostModelTest, NotReadyUntilAStepWithTimeIsSeen) {
  StepCostModel model;
  EXPECT_FALSE(model.ready());
  EXPECT_EQ(model.TokensWithin(absl::Milliseconds(1)), StepCostModel::kUnbounded);
  model.Add(10, absl::ZeroDuration());  // a clock that does not move says nothing
  EXPECT_FALSE(model.ready());
  EXPECT_EQ(model.TokensWithin(absl::Milliseconds(1)), StepCostModel::kUnbounded);
}

TEST(StepCostModelTest, SeparatesTheWeightReadFromThePerTokenCost) {
  // Steps of 20 ms plus 0.5 ms per token, of varied sizes.
  StepCostModel model;
  for (int i = 0; i < 50; ++i) {
    const int n = 1 + (i * 37) % 300;
    model.Add(n, absl::Milliseconds(20) + n * absl::Microseconds(500));
  }
  ASSERT_TRUE(model.ready());
  EXPECT_NEAR(Ms(model.Predict(0)), 20.0, 1e-6);
  EXPECT_NEAR(Ms(model.Predict(100)), 70.0, 1e-6);
  // (100 - 20) / 0.5 = 160 tokens fit in 100 ms; nothing fits in less than the fixed part.
  EXPECT_EQ(model.TokensWithin(absl::Milliseconds(100)), 160);
  EXPECT_EQ(model.TokensWithin(absl::Milliseconds(10)), 0);
}

TEST(StepCostModelTest, FollowsAChangeInCost) {
  StepCostModel model;
  for (int i = 0; i < 50; ++i) {
    const int n = 1 + (i * 37) % 300;
    model.Add(n, absl::Milliseconds(20) + n * absl::Microseconds(500));
  }
  // The machine gets twice as slow (another process, a longer context).
  for (int i = 0; i < 200; ++i) {
    const int n = 1 + (i * 37) % 300;
    model.Add(n, absl::Milliseconds(40) + n * absl::Microseconds(1000));
  }
  EXPECT_NEAR(Ms(model.Predict(100)), 140.0, 2.0);
}

TEST(StepCostModelTest, StepsOfOneSizeChargeEverythingToTheTokens) {
  // Only 64-token decode steps of 32 ms so far: the split is unknown, so the model charges
  // 0.5 ms per token with no fixed part, which overestimates larger steps (the safe side
  // when adding prompt tokens to such a step).
  StepCostModel model;
  for (int i = 0; i < 10; ++i) model.Add(64, absl::Milliseconds(32));
  EXPECT_NEAR(Ms(model.Predict(64)), 32.0, 1e-6);
  EXPECT_NEAR(Ms(model.Predict(16)), 8.0, 1e-6);
  EXPECT_EQ(model.TokensWithin(absl::Milliseconds(100)), 200);
}

TEST(StepCostModelTest, CostGrowingFasterThanTheTokensKeepsTheLineAboveTheSteps) {
  // t = n^2 / 1000 ms: the fitted intercept would be negative; it is clamped to zero.
  StepCostModel model;
  for (int i = 0; i < 100; ++i) {
    const int n = 10 + (i * 13) % 200;
    model.Add(n, absl::Microseconds(n * n));
  }
  for (int n : {50, 100, 150}) {
    EXPECT_GE(Ms(model.Predict(n)), 0.0);
  }
  EXPECT_GT(model.TokensWithin(absl::Milliseconds(40)), 0);
  EXPECT_LT(model.TokensWithin(absl::Milliseconds(40)), 300);
}

}  // namespace
}  // namespace quill::engine
