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

// In 2 MiB pages, as the packed weights are (the kernels' AlignedBuffer). With 4 KiB pages,
// 256 MiB slices read between decode steps (TLB and page tables evicted by the weights)
// measured 15-37 GB/s where five reads in a row gave 43-64; with 2 MiB pages 58-64 GB/s.
// Filled by the threads that will read it, with values the sum cannot fold away.
kernels::linear_internal::AlignedBuffer<uint64_t> FilledBuffer(int64_t words) {
  kernels::linear_internal::AlignedBuffer<uint64_t> data(words, /*huge_pages=*/true);
  uint64_t* p = data.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < words; ++i) p[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  return data;
}

// Seconds to read words [begin, end).
double TimedRead(const uint64_t* data, int64_t begin, int64_t end) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t sum = 0;
  // XOR vectorizes into plain wide loads with no dependency on the values: a pure read.
#pragma omp parallel for schedule(static) reduction(^ : sum)
  for (int64_t i = begin; i < end; ++i) sum ^= data[i];
  g_sum_sink = sum;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double MeasureReadBandwidth(int64_t bytes, int reps) {
  if (bytes < (int64_t{1} << 20) || reps < 1) return 0;
  const int64_t n = bytes / static_cast<int64_t>(sizeof(uint64_t));
  const auto data = FilledBuffer(n);
  if (data.data() == nullptr) return 0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double seconds = TimedRead(data.data(), 0, n);
    if (seconds > 0) best = std::max(best, n * sizeof(uint64_t) / seconds);
  }
  return best;
}

ReadBandwidthProbe::ReadBandwidthProbe(int64_t bytes, int64_t slice)
    : words_(std::max<int64_t>(bytes / static_cast<int64_t>(sizeof(uint64_t)), 1)),
      slice_words_(std::clamp<int64_t>(slice / static_cast<int64_t>(sizeof(uint64_t)), 1, words_)) {
  data_ = FilledBuffer(words_);
}

double ReadBandwidthProbe::Read() {
  if (data_.data() == nullptr) return 0;
  if (next_ + slice_words_ > words_) next_ = 0;
  const double seconds = TimedRead(data_.data(), next_, next_ + slice_words_);
  next_ += slice_words_;
  return seconds;
}

}  // namespace quill::engine::tools
