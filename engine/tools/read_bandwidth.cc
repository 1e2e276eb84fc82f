#include "engine/tools/read_bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace quill::engine::tools {
namespace {
// Written with every sum so that the reads cannot be optimized away.
volatile uint64_t g_sum_sink = 0;

int64_t WordsIn(int64_t bytes) {
  return std::max<int64_t>(bytes / static_cast<int64_t>(sizeof(uint64_t)), 1);
}
}  // namespace

// In 2 MiB pages, as the packed weights are (the kernels' AlignedBuffer). With 4 KiB pages,
// 256 MiB slices read between decode steps (TLB and page tables evicted by the weights)
// measured 15-37 GB/s where five reads in a row gave 43-64; with 2 MiB pages 58-64 GB/s.
// Filled by the threads that will read it, with values the sum cannot fold away.
ReadBandwidthProbe::ReadBandwidthProbe(int64_t bytes, int64_t slice)
    : data_(static_cast<size_t>(WordsIn(bytes)), /*huge_pages=*/true),
      words_(WordsIn(bytes)),
      slice_words_(std::min(WordsIn(slice), words_)) {
  uint64_t* p = data_.data();
  if (p == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < words_; ++i) p[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
}

double ReadBandwidthProbe::Read() {
  const uint64_t* data = data_.data();
  if (data == nullptr) return 0;
  if (next_ + slice_words_ > words_) next_ = 0;
  const int64_t begin = next_, end = next_ + slice_words_;
  next_ = end;
  const auto start = std::chrono::steady_clock::now();
  uint64_t sum = 0;
  // XOR vectorizes into plain wide loads with no dependency on the values: a pure read.
#pragma omp parallel for schedule(static) reduction(^ : sum)
  for (int64_t i = begin; i < end; ++i) sum ^= data[i];
  g_sum_sink = sum;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double MeasureReadBandwidth(int64_t bytes, int reps) {
  if (bytes < (int64_t{1} << 20) || reps < 1) return 0;
  ReadBandwidthProbe probe(bytes, bytes);  // one slice: the whole buffer per read
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double seconds = probe.Read();
    if (seconds > 0) best = std::max(best, probe.slice() / seconds);
  }
  return best;
}

}  // namespace quill::engine::tools
