#pragma once

// Q8_0 path of Precision::kFast (internal to Linear): the Q8_0 weights repacked for
// AVX512-VNNI, x quantized per 32-block to int8 at run time, int8 dot products with
// _mm512_dpbusd_epi32. Streams 1.0625 bytes per weight (half of bf16) and, per core, runs
// ~1.5x the GFLOP/s of oneDNN's bf16 matmul at large m, so it serves every m.

#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "engine/kernels/linear.h"
#include "engine/kernels/linear_internal.h"

namespace quill::engine::kernels::linear_internal {

// Packed layout: column blocks of 32 outputs; per block, per 32-k group: 32 fp16 scales
// (64 B), then 8 k-quads x 32 columns x 4 bytes (w + 128 as u8, 1024 B). Columns past n
// have zero scale.
inline constexpr int kQ8BlockCols = 32;
inline constexpr int64_t kQ8GroupBytes = 64 + 8 * kQ8BlockCols * 4;

class Q8Gemv {
 public:
  // Call only when HasAvx512Bf16() (which includes VNNI). parts: Q8_0, equal cols.
  // x's int8 copy, scales and sums live in `scratch` (kXq, kXScales, kXSums), which must
  // outlive this and have had ReserveScratch(k, max_rows) called on it.
  Q8Gemv(absl::Span<const WeightView> parts, int max_rows, LinearScratch* scratch);
  static absl::Status ReserveScratch(int64_t k, int max_rows, LinearScratch& scratch);

  // y[m x n] (row stride y_stride) for m <= max_rows. Parallel over column blocks.
  void Run(const float* x, int m, float* y, int64_t y_stride);
  int64_t packed_bytes() const { return static_cast<int64_t>(w_.bytes()); }

 private:
  int64_t k_, n_, groups_, col_blocks_;
  [[maybe_unused]] int max_rows_;  // read by QUILL_DCHECK only
  AlignedBuffer<uint8_t> w_;
  // Run's x side: [max_rows x k] quantized x (kXq), [max_rows x groups] x scales
  // (kXScales) and -128 * sum(xq) (kXSums, undoes the +128).
  LinearScratch* scratch_;
};

// x rows -> int8 per 32-block (round to nearest even, |q| <= 127), scale d = max|x| / 127.
void QuantizeRowsQ8(const float* x, int m, int64_t k, int8_t* xq, float* xd, int32_t* xneg);

}  // namespace quill::engine::kernels::linear_internal
