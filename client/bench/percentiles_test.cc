#include "client/bench/percentiles.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace quill::bench {
namespace {

TEST(NearestRankPercentileTest, TextbookExample) {
  // The classic nearest-rank example: ranks ceil(p/100 * 5).
  const std::vector<double> sorted = {15, 20, 35, 40, 50};
  EXPECT_EQ(NearestRankPercentile(sorted, 5), 15);    // rank 1
  EXPECT_EQ(NearestRankPercentile(sorted, 30), 20);   // rank 2 (1.5 -> 2)
  EXPECT_EQ(NearestRankPercentile(sorted, 40), 20);   // rank 2 exactly
  EXPECT_EQ(NearestRankPercentile(sorted, 50), 35);   // rank 3 (2.5 -> 3)
  EXPECT_EQ(NearestRankPercentile(sorted, 100), 50);  // rank 5
}

TEST(NearestRankPercentileTest, ExactRanksDoNotRoundUp) {
  // 1..100: the p-th percentile is exactly p for integer p (no floating-point overshoot).
  std::vector<double> sorted;
  for (int i = 1; i <= 100; ++i) sorted.push_back(i);
  for (int p = 1; p <= 100; ++p) EXPECT_EQ(NearestRankPercentile(sorted, p), p) << p;
  // 1..10: p90 is the 9th value, p99 the 10th.
  std::vector<double> ten(sorted.begin(), sorted.begin() + 10);
  EXPECT_EQ(NearestRankPercentile(ten, 90), 9);
  EXPECT_EQ(NearestRankPercentile(ten, 99), 10);
  EXPECT_EQ(NearestRankPercentile(ten, 50), 5);
}

TEST(NearestRankPercentileTest, EdgeCases) {
  EXPECT_TRUE(std::isnan(NearestRankPercentile({}, 50)));
  EXPECT_EQ(NearestRankPercentile({7}, 0), 7);
  EXPECT_EQ(NearestRankPercentile({7}, 99), 7);
  EXPECT_EQ(NearestRankPercentile({1, 2}, 0), 1);  // p = 0 is the minimum
  EXPECT_EQ(NearestRankPercentile({1, 2}, 50), 1);
  EXPECT_EQ(NearestRankPercentile({1, 2}, 51), 2);
}

TEST(SummarizeTest, SortsAndSummarizes) {
  Summary s = Summarize({9, 1, 8, 2, 7, 3, 6, 4, 5, 10});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 10);
  EXPECT_EQ(s.p50, 5);
  EXPECT_EQ(s.p90, 9);
  EXPECT_EQ(s.p99, 10);
}

TEST(SummarizeTest, EmptyIsNaN) {
  Summary s = Summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_TRUE(std::isnan(s.mean));
  EXPECT_TRUE(std::isnan(s.p50));
  EXPECT_TRUE(std::isnan(s.max));
}

}  // namespace
}  // namespace quill::bench
