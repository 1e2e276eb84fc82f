#pragma once

// Latency summaries for `quill bench`: nearest-rank percentiles over sorted samples (no
// interpolation, so every reported percentile is a latency that was actually observed).

#include <cstddef>
#include <vector>

namespace quill::bench {

// The nearest-rank p-th percentile of `sorted` (ascending): the value at 1-based rank
// ceil(p/100 * N), clamped to [1, N]. p is in [0, 100]; p = 0 gives the minimum.
// Returns NaN for an empty vector.
double NearestRankPercentile(const std::vector<double>& sorted, double p);

struct Summary {
  size_t count = 0;
  // All NaN when count == 0.
  double mean;
  double min;
  double p50;
  double p90;
  double p99;
  double max;
};

// Sorts a copy of `values` and summarizes it.
Summary Summarize(std::vector<double> values);

}  // namespace quill::bench
