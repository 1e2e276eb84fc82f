#pragma once

#include <cstdint>

#include "engine/kernels/linear_internal.h"

namespace quill::engine::tools {

// The machine's streaming-read bandwidth in bytes/s with the current OpenMP thread count:
// the best of `reps` parallel sums over a `bytes` buffer (make it several times the
// last-level cache so that it measures memory, not cache). Decode reads every weight once
// per token, so this is the ceiling a decode rate is compared with. Returns 0 if `bytes`
// is too small to measure (< 1 MiB) or `reps` < 1.
double MeasureReadBandwidth(int64_t bytes, int reps);

// The same streaming read, in slices taken between other work: each Read() sums the next
// `slice` bytes of the buffer (wrapping around) with the current OpenMP thread count, so a
// benchmark can measure the bandwidth in the same moments as what it compares with it
// (this host's bandwidth drifts by up to 2x within minutes).
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(int64_t bytes, int64_t slice);
  // Reads one slice; returns the seconds it took (0 if the buffer could not be allocated).
  double Read();
  int64_t slice() const { return slice_words_ * static_cast<int64_t>(sizeof(uint64_t)); }

 private:
  kernels::linear_internal::AlignedBuffer<uint64_t> data_;
  int64_t words_ = 0;
  int64_t slice_words_ = 0;
  int64_t next_ = 0;
};

}  // namespace quill::engine::tools
