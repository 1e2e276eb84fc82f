#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/base/float16.h"

namespace quill::engine::kernels {

// How a model computes.
//   kExact: f32 activations and f32 accumulation, weights widened exactly (F16/BF16
//           exactly, block types as ggml's reference dequantizers do). Every output row
//           depends only on its own input row with a fixed summation order, so results are
//           bit-for-bit the same whatever else is in the batch (batch invariance) and from
//           run to run.
//   kFast:  F32 weights in f32 (oneDNN); F16/BF16 weights in bf16 on CPUs with
//           AVX512-BF16 (f32 otherwise); block types through int8 VNNI kernels that read
//           the quantized blocks (x quantized to int8 per 32 values at run time), or
//           through a widened oneDNN copy on CPUs without AVX512-VNNI.
enum class Precision { kExact, kFast };

// Weight element encodings the kernels accept (same encodings as GGUF; block layouts in
// engine/quant/quant_type.h).
enum class WeightType { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K };

// A weight matrix as stored in GGUF: `rows` output features, each a contiguous run of
// `cols` input features (GGUF dims = {cols, rows}). Rows of a block type are whole blocks:
// cols % 32 == 0 for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and cols % 256 == 0 for Q4_K, Q5_K, Q6_K.
struct WeightView {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Run-time scratch that Linears share: x converted to bf16 or quantized to int8 for one
// Run(), and oneDNN's scratchpad. Every Run() writes what it then reads of it, so Linears
// that run one at a time (a model's layers) can share one set of buffers as large as the
// largest of them needs, instead of a max_tokens-sized set each (TinyLlama BF16 at 512
// tokens: 0.26 GiB over its 89 Linears, against 6 MiB shared). Create() sizes it, so Run()
// never allocates. Not thread-safe: Linears sharing one must not run concurrently.
class LinearScratch {
 public:
  enum Use { kXBf16, kXq, kXScales, kXSums, kOnednn, kNumUses };

  // Grows the buffer of `use` to at least `bytes`, zeroed (contents are not kept). Pointers
  // from Get() are invalid after a Reserve() that grows, so Linears call Get() in Run().
  // RESOURCE_EXHAUSTED when the memory is not there.
  absl::Status Reserve(Use use, size_t bytes);
  void* Get(Use use) const { return buffers_[use].get(); }
  int64_t bytes() const;  // all uses

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::array<std::unique_ptr<void, Free>, kNumUses> buffers_;
  std::array<size_t, kNumUses> sizes_{};
};

// y[m x N] = x[m x K] * W^T for a weight packed once at load.
// Several weights with the same `cols` may be fused into one Linear whose output is their
// outputs side by side (e.g. Q|K|V, or gate|up), so one matmul serves them; their types
// may differ (Q4_K_M files store some attn_v as Q6_K next to Q4_K q and k).
class Linear {
 public:
  // INVALID_ARGUMENT for mismatched cols, a bad shape or type; DATA_LOSS for a block whose
  // fp16 scale (or min) is NaN or infinite; INTERNAL for oneDNN failures. `max_tokens`
  // bounds m in Run(); scratch is allocated here, not per call. Create() copies what it
  // needs: the parts' memory is not read after it returns (so a caller may drop the pages
  // of a file mapping they came from). Run-time scratch comes from `scratch`, shared with
  // the other Linears given the same one (null: this Linear gets its own).
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      absl::Span<const WeightView> parts, Precision precision, int max_tokens,
      std::shared_ptr<LinearScratch> scratch = nullptr);
  virtual ~Linear() = default;

  // x: m rows of in_features() f32; y: m rows of out_features() f32; 1 <= m <= max_tokens.
  // Not thread-safe (uses its scratch); call it from one thread at a time, and not while
  // another Linear sharing its LinearScratch runs. Uses the
  // process's OpenMP thread pool internally. Never allocates.
  virtual void Run(const float* x, int m, float* y) = 0;

  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  virtual int64_t packed_bytes() const = 0;   // memory held by packed weights
  virtual std::string kernel_name() const = 0;  // e.g. "onednn-bf16+gemv-bf16-avx512"
  // Run() is fastest per row when m is a multiple of this: such an m runs as whole kernel
  // blocks (oneDNN's static-M buckets), with no remainder rows taking another pass over the
  // weights. 1 when every m is alike.
  virtual int row_multiple() const { return 1; }
  // The fewest rows that run in such blocks. Fewer run in a small-m kernel whose cost grows
  // row by row, where a multiple of row_multiple() is no cheaper per row.
  virtual int blocked_from_rows() const { return 1; }
};

// Widens one row of `cols` elements of `w` (row `row`) to f32, exactly (block types as
// quant::Dequantize). Used for the embedding lookup and by tests.
void DequantizeRow(const WeightView& w, int64_t row, float* out);

// Conversions used across the kernels (engine/base/float16.h).
using ::quill::engine::Bf16ToFloat;
using ::quill::engine::FloatToBf16;
using ::quill::engine::FloatToFp16;
using ::quill::engine::Fp16ToFloat;

}  // namespace quill::engine::kernels
