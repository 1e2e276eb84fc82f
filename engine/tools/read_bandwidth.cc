#include "engine/tools/read_bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

namespace quill::engine::tools {
namespace {
// Written with every sum so that the reads cannot be optimized away.
volatile uint64_t g_sum_sink = 0;
}  // namespace

double MeasureReadBandwidth(int64_t bytes, int reps) {
  if (bytes < (int64_t{1} << 20) || reps < 1) return 0;
  const int64_t n = bytes / static_cast<int64_t>(sizeof(uint64_t));
  std::unique_ptr<uint64_t[]> data(new uint64_t[n]);
  // First touch by the threads that will read it, and values the sum cannot fold away.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    uint64_t sum = 0;
    // XOR vectorizes into plain wide loads with no dependency on the values: a pure read.
#pragma omp parallel for schedule(static) reduction(^ : sum)
    for (int64_t i = 0; i < n; ++i) sum ^= data[i];
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    g_sum_sink = sum;
    if (seconds > 0) best = std::max(best, n * sizeof(uint64_t) / seconds);
  }
  return best;
}

}  // namespace quill::engine::tools
