#pragma once

// Internals shared by the linear*.cc files (not part of the public contract). Tests and the
// benchmark include it to reach the individual kernels.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kernels/linear.h"
#include "engine/quant/quant_type.h"

namespace quill::engine::kernels::linear_internal {

inline constexpr int64_t kQ8BlockSize = 32;   // values per Q8_0 block
inline constexpr int64_t kQ8BlockBytes = 34;  // fp16 scale + 32 int8

// Bytes of one stored row of `w`.
int64_t RowBytes(WeightType type, int64_t cols);
const char* WeightTypeName(WeightType type);
// Values per block: 1 for F32/F16/BF16, 32 or 256 for the block types.
int64_t BlockElements(WeightType type);
// The block format of a block type (false for F32/F16/BF16).
bool ToQuantType(WeightType type, quant::QuantType* out);

inline int64_t RoundUp(int64_t v, int64_t multiple) {
  return (v + multiple - 1) / multiple * multiple;
}

// Fetches one row tile's share of the weights the next chunk of k will read into L2, a
// few cache lines per step of the tile's own loop: the matmuls' later row tiles reread a
// chunk from cache, so without it a core alternates between streaming weights (first
// tile) and arithmetic (the others) instead of overlapping them.
class L2Prefetch {
 public:
  L2Prefetch() = default;
  // Part `tile` of `tiles` of [begin, begin + bytes), over `steps` calls of Step().
  L2Prefetch(const uint8_t* begin, int64_t bytes, int tile, int tiles, int64_t steps)
      : next_(begin + bytes * tile / tiles), end_(begin + bytes * (tile + 1) / tiles) {
    lines_per_step_ = ((end_ - next_) / 64 + steps - 1) / std::max<int64_t>(1, steps);
  }
  void Step() {
    for (int64_t l = 0; l < lines_per_step_ && next_ < end_; ++l, next_ += 64) {
      __builtin_prefetch(next_, /*rw=*/0, /*locality=*/2);  // prefetcht1
    }
  }

 private:
  const uint8_t* next_ = nullptr;
  const uint8_t* end_ = nullptr;
  int64_t lines_per_step_ = 0;
};

// Prefetches a weight stream that a decode kernel reads once per step, every line of it,
// kAheadBytes in front of the reader, into L2 (prefetcht1). Measurements in
// linear_qblock_decode.cc.
class StreamPrefetch {
 public:
  static constexpr int kAheadBytes = 8192;
  StreamPrefetch() = default;  // prefetches nothing
  explicit StreamPrefetch(const uint8_t* begin) : next_(begin + kAheadBytes) {}
  // The reader is about to consume the stream up to `end`.
  void Through(const uint8_t* end) {
    if (next_ == nullptr) return;
    for (const uint8_t* ahead = end + kAheadBytes; next_ < ahead; next_ += 64) {
      __builtin_prefetch(next_, /*rw=*/0, /*locality=*/2);  // prefetcht1
    }
  }

 private:
  const uint8_t* next_ = nullptr;
};

// Asks for transparent huge pages on [p, p + bytes) (2 MiB aligned p): streaming packed
// weights through 4 KiB pages measured ~25% slower (TLB misses, prefetchers stop at pages).
void AdviseHugePages(void* p, size_t bytes);

// A 64-byte aligned, zero-initialized heap buffer of T (never reallocated). With
// huge_pages, buffers of 2 MiB or more are 2 MiB aligned and advised for huge pages.
template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count, bool huge_pages = false) : size_(count) {
    if (count == 0) return;
    const size_t bytes = RoundUp(static_cast<int64_t>(count * sizeof(T)), 64);
    constexpr size_t kHuge = size_t{2} << 20;
    const bool huge = huge_pages && bytes >= kHuge;
    data_.reset(static_cast<T*>(
        std::aligned_alloc(huge ? kHuge : 64, huge ? RoundUp(bytes, kHuge) : bytes)));
    if (huge) AdviseHugePages(data_.get(), bytes);
    std::memset(static_cast<void*>(data_.get()), 0, bytes);  // first touch after the advice
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

// Total rows of the fused parts (validated by the caller).
int64_t TotalRows(absl::Span<const WeightView> parts);

// Widens all fused parts to f32, row after row, into out[rows x out_stride]; the
// columns in [cols, out_stride) are left untouched (callers pass zeroed buffers).
void WidenPartsToF32(absl::Span<const WeightView> parts, float* out, int64_t out_stride);
// Converts all fused parts to bf16 (round to nearest even), row-major [rows x out_stride].
void ConvertPartsToBf16(absl::Span<const WeightView> parts, uint16_t* out, int64_t out_stride);

// ---- Exact kernel (linear_exact.cc) ----
// The fixed summation order of every output (i, n): 16 lane partial sums, lane l holding
// fma-accumulated products x[k]*w[k] for k = l, l+16, l+32, ... in increasing k (the
// padding up to a multiple of 16 adds fma(0, 0, s)); then s[l] += s[l+8] for l < 8,
// s[l] += s[l+4] for l < 4, s[l] += s[l+2] for l < 2, and y = s[0] + s[1].
inline constexpr int64_t kExactLanes = 16;

enum class ExactIsa { kAvx512, kAvx2 };
// y[m x n] (row stride y_stride) = x[m x k] (row stride x_stride) * w^T, where w is
// [n x k_padded] f32 with zero columns past k and k_padded = RoundUp(k, 16). Single
// threaded; the caller splits n across threads.
void ExactGemmTile(ExactIsa isa, const float* x, int64_t x_stride, int m, const float* w, int64_t k,
                   int64_t n, float* y, int64_t y_stride);

absl::StatusOr<std::unique_ptr<Linear>> CreateExactLinear(absl::Span<const WeightView> parts,
                                                          int max_tokens);

// ---- Fast paths (linear_fast.cc, linear_onednn.cc, linear_gemv_bf16.cc, linear_q8.cc) ----
absl::StatusOr<std::unique_ptr<Linear>> CreateFastLinear(absl::Span<const WeightView> parts,
                                                         int max_tokens,
                                                         std::shared_ptr<LinearScratch> scratch);

// The column block of oneDNN's BA16a64b2a layout, which both bf16 GEMVs read.
inline constexpr int kGemvBf16BlockCols = 64;
// bf16 GEMV over oneDNN's BA16a64b2a weights layout: w holds n_padded/64 column blocks,
// each [k_padded/2 pairs][64 columns][2] bf16 (k_padded % 32 == 0, zero padded). x is m
// rows of k_padded bf16 with row stride x_stride (zero past k). Parallel over column blocks.
void GemvBf16Blocked(const uint16_t* w, int64_t k_padded, int64_t n, const uint16_t* x,
                     int64_t x_stride, int m, float* y, int64_t y_stride);
// The same product on AMX-BF16 tiles (linear_gemv_bf16_amx.cc), where
// GemvBf16AmxAvailable(); configures the tiles of the threads it runs on. A row's outputs
// do not depend on m.
bool GemvBf16AmxAvailable();
void GemvBf16Amx(const uint16_t* w, int64_t k_padded, int64_t n, const uint16_t* x,
                 int64_t x_stride, int m, float* y, int64_t y_stride);
// x[m x k] f32 -> bf16 rows of stride out_stride, zero-filled up to out_stride.
void ConvertRowsToBf16(const float* x, int m, int64_t k, uint16_t* out, int64_t out_stride);

// f32 GEMV over oneDNN's BA16a64b layout (f32 blocks [k_padded][64 columns]); reads only
// the k real columns of each x row.
void GemvF32Blocked(const float* w, int64_t k, int64_t k_padded, int64_t n, const float* x,
                    int64_t x_stride, int m, float* y, int64_t y_stride);

}  // namespace quill::engine::kernels::linear_internal
