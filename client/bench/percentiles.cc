#include "client/bench/percentiles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace quill::bench {

double NearestRankPercentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(sorted.size());
  // p * n first: exact for integer p and n, so ceil() never sees 28.999999 for 29.
  double rank = std::ceil(p * n / 100.0);
  rank = std::clamp(rank, 1.0, n);
  return sorted[static_cast<size_t>(rank) - 1];
}

Summary Summarize(std::vector<double> values) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  Summary summary{values.size(), kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  summary.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  summary.min = values.front();
  summary.max = values.back();
  summary.p50 = NearestRankPercentile(values, 50);
  summary.p90 = NearestRankPercentile(values, 90);
  summary.p99 = NearestRankPercentile(values, 99);
  return summary;
}

}  // namespace quill::bench
