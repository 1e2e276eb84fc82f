#pragma once

#include <cstdint>

namespace quill::engine::tools {

// The machine's streaming-read bandwidth in bytes/s with the current OpenMP thread count:
// the best of `reps` parallel sums over a `bytes` buffer (make it several times the
// last-level cache so that it measures memory, not cache). Decode reads every weight once
// per token, so this is the ceiling a decode rate is compared with. Returns 0 if `bytes`
// is too small to measure (< 1 MiB) or `reps` < 1.
double MeasureReadBandwidth(int64_t bytes, int reps);

}  // namespace quill::engine::tools
