#include "engine/runtime/ewma_rate.h"

#include <cmath>

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

TEST(EwmaRateTest, UnknownUntilObservedThenTheFirstSample) {
  EwmaRate rate(absl::Seconds(5));
  EXPECT_EQ(rate.per_second(), 0.0);
  rate.Add(3, absl::ZeroDuration());  // no time: ignored
  EXPECT_EQ(rate.per_second(), 0.0);
  rate.Add(3, absl::Milliseconds(100));
  EXPECT_DOUBLE_EQ(rate.per_second(), 30.0);
  EXPECT_EQ(rate.observed(), absl::Milliseconds(100));
}

TEST(EwmaRateTest, FollowsAChangeWithinAFewTimeConstants) {
  EwmaRate rate(absl::Seconds(1));
  for (int i = 0; i < 100; ++i) rate.Add(1, absl::Milliseconds(100));  // 10/s
  EXPECT_NEAR(rate.per_second(), 10.0, 1e-9);
  rate.Add(4, absl::Milliseconds(100));  // one odd window moves it only ~10%
  EXPECT_NEAR(rate.per_second(), 10.0 + (1 - std::exp(-0.1)) * 30.0, 1e-9);
  for (int i = 0; i < 50; ++i) rate.Add(4, absl::Milliseconds(100));  // 5 s at 40/s
  EXPECT_NEAR(rate.per_second(), 40.0, 0.3);
}

TEST(EwmaRateTest, ManyShortWindowsWeighAsMuchAsOneLong) {
  EwmaRate a(absl::Seconds(1));
  EwmaRate b(absl::Seconds(1));
  a.Add(10, absl::Seconds(1));
  b.Add(10, absl::Seconds(1));
  a.Add(20, absl::Seconds(1));
  for (int i = 0; i < 10; ++i) b.Add(2, absl::Milliseconds(100));
  EXPECT_NEAR(a.per_second(), b.per_second(), 1e-9);
}

}  // namespace
}  // namespace quill::engine
