#include "engine/runtime/step_cost_model.h"

#include <utility>

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
  EXPECT_EQ(model.TokensWithin(absl::Milliseconds(50)), 100);
}

TEST(StepCostModelTest, StepsAreNotSizedBeyondTwiceTheLargestSeen) {
  // The first steps of a cold burst on TinyLlama Q8_0 (one 32-token prompt each, beside
  // 0-7 decoders and their drafts), as the engine's trace logged them. The cold first step
  // makes the fitted line nearly flat: 0.05 ms per token plus 142 ms, which said a step of
  // 512 tokens would take 169 ms. The engine ran that step beside 8 decoders, and it took
  // 1,555 ms.
  const std::pair<int, double> steps[] = {{32, 243.2}, {33, 109.9}, {34, 115.5}, {35, 117.6},
                                          {40, 134.2}, {37, 126.4}, {42, 145.1}, {47, 163.7}};
  StepCostModel model;
  for (const auto& [tokens, ms] : steps) model.Add(tokens, absl::Microseconds(ms * 1000));
  EXPECT_LT(Ms(model.Predict(512)), 200.0);  // the line is as wrong as it was
  // The budget the engine gave that step: 1.5x a predicted decode step of 8 tokens.
  const absl::Duration budget = 1.5 * model.Predict(8);
  EXPECT_EQ(model.TokensWithin(budget), 2 * 47);
  // Within twice the largest step the line still decides.
  EXPECT_LT(model.TokensWithin(absl::Milliseconds(145)), 2 * 47);
}

TEST(StepCostModelTest, TheLargestStepFadesWithTheFit) {
  // After a burst of 512-token steps, a long run of 64-token decode steps: the fit has
  // forgotten the burst, and so has the bound.
  StepCostModel model;
  for (int i = 0; i < 5; ++i) model.Add(512, absl::Milliseconds(512));
  EXPECT_EQ(model.TokensWithin(absl::Seconds(10)), 1024);
  for (int i = 0; i < 200; ++i) model.Add(64, absl::Milliseconds(64));
  EXPECT_EQ(model.TokensWithin(absl::Seconds(10)), 128);
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
