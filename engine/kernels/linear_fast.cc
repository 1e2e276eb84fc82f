// Precision::kFast for F32 / F16 / BF16 (and Q8_0 via bf16): one packed weight copy in
// oneDNN's blocked layout, read by static-M oneDNN matmuls for large m and by the
// hand-written GEMVs (linear_gemv_*.cc) for small m.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/cpu_features.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/linear_onednn.h"

namespace quill::engine::kernels::linear_internal {
namespace {

using dnnl::memory;

// The GEMVs serve m below this (a power of two: the smallest oneDNN bucket); measured with
// quill-linear-bench on TinyLlama shapes, 2 threads.
constexpr int kBf16GemvBelowRows = 32;
constexpr int kF32GemvBelowRows = 32;
// Without a GEMV, rows below this are padded up to one power-of-two bucket (one weight
// pass) instead of being split into several smaller calls.
constexpr int kPadBelowRows = 32;
constexpr int kMaxBucketRows = 256;

int NextPow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

class FastLinear final : public Linear {
 public:
  enum class Mode { kBf16, kF32 };

  static absl::StatusOr<std::unique_ptr<Linear>> Create(absl::Span<const WeightView> parts,
                                                        int max_tokens, Mode mode) {
    auto lin = std::unique_ptr<FastLinear>(new FastLinear());
    lin->mode_ = mode;
    lin->k_ = parts[0].cols;
    lin->n_ = TotalRows(parts);
    lin->max_tokens_ = max_tokens;
    const CpuFeatures& cpu = GetCpuFeatures();
    const bool gemv = mode == Mode::kBf16 ? HasAvx512Bf16() : cpu.avx512f;
    lin->gemv_below_rows_ = gemv ? (mode == Mode::kBf16 ? kBf16GemvBelowRows : kF32GemvBelowRows) : 0;
    QUILL_RETURN_IF_ERROR(lin->Pack(parts));
    return lin;
  }

  void Run(const float* x, int m, float* y) override {
    const void* src = x;
    int64_t src_stride = k_;
    size_t elem = sizeof(float);
    if (mode_ == Mode::kBf16) {
      ConvertRowsToBf16(x, m, k_, x_bf16_.data(), k_padded_);
      src = x_bf16_.data();
      src_stride = k_padded_;
      elem = sizeof(uint16_t);
    }
    const auto row_ptr = [&](int r) {
      return static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * src_stride * elem;
    };
    // Large chunks: the biggest bucket that fits, applied directly on x and y.
    const std::vector<int>& buckets = matmul_->buckets();
    const int direct_min = gemv_below_rows_ > 0 ? gemv_below_rows_ : kPadBelowRows;
    int r = 0;
    while (m - r >= direct_min) {
      size_t b = buckets.size() - 1;
      while (buckets[b] > m - r) --b;
      matmul_->RunBucket(b, row_ptr(r), y + static_cast<int64_t>(r) * n_);
      r += buckets[b];
    }
    if (r == m) return;
    const int rest = m - r;
    float* y_rest = y + static_cast<int64_t>(r) * n_;
    if (gemv_below_rows_ > 0) {
      if (mode_ == Mode::kBf16) {
        GemvBf16Blocked(gemv_weights_bf16_, k_padded_, n_,
                        reinterpret_cast<const uint16_t*>(row_ptr(r)), src_stride, rest, y_rest, n_);
      } else {
        GemvF32Blocked(gemv_weights_f32_, k_, k_padded_, n_, x + static_cast<int64_t>(r) * k_, k_,
                       rest, y_rest, n_);
      }
      return;
    }
    // Pad the rest up to one bucket: copy it into scratch, run, copy the real rows back.
    size_t b = 0;
    while (buckets[b] < rest) ++b;
    std::memcpy(x_pad_.data(), row_ptr(r), static_cast<size_t>(rest) * src_stride * elem);
    matmul_->RunBucket(b, x_pad_.data(), y_pad_.data());
    std::memcpy(y_rest, y_pad_.data(), static_cast<size_t>(rest) * n_ * sizeof(float));
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  int64_t packed_bytes() const override {
    return matmul_->packed_bytes() + (gemv_copy_ ? static_cast<int64_t>(gemv_copy_.get_desc().get_size()) : 0);
  }
  std::string kernel_name() const override {
    std::string name = absl::StrCat("onednn-", mode_ == Mode::kBf16 ? "bf16" : "f32", "(",
                                    matmul_->impl_name(), ")");
    if (gemv_below_rows_ > 0) {
      absl::StrAppend(&name, "+gemv-", mode_ == Mode::kBf16 ? "bf16" : "f32", "-avx512");
      if (gemv_copy_) absl::StrAppend(&name, "(own copy)");
    } else {
      absl::StrAppend(&name, "+padded-small-m");
    }
    return name;
  }

 private:
  FastLinear() = default;

  absl::Status Pack(absl::Span<const WeightView> parts) {
    const bool bf16 = mode_ == Mode::kBf16;
    const memory::data_type type = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    // The plain row-major copy exists only until the reorder into the blocked layout.
    AlignedBuffer<uint16_t> plain16;
    AlignedBuffer<float> plain32;
    if (bf16) {
      plain16 = AlignedBuffer<uint16_t>(static_cast<size_t>(n_ * k_));
      ConvertPartsToBf16(parts, plain16.data(), k_);
    } else {
      plain32 = AlignedBuffer<float>(static_cast<size_t>(n_ * k_));
      WidenPartsToF32(parts, plain32.data(), k_);
    }
    const void* plain = bf16 ? static_cast<const void*>(plain16.data()) : plain32.data();

    // Buckets: powers of two from the smallest row count oneDNN serves up to max_tokens.
    const int smallest = gemv_below_rows_ > 0 ? gemv_below_rows_ : 1;
    const int largest = std::max(smallest, std::min(kMaxBucketRows, NextPow2(max_tokens_)));
    std::vector<int> buckets;
    for (int b = smallest; b <= largest; b *= 2) buckets.push_back(b);
    // The GEMV streams BA16a64b2a (bf16: 32-k blocks of 64 columns x 16 k pairs) or
    // BA16a64b (f32); the bf16 x scratch rows are zero padded to the same k.
    const memory::desc gemv_desc({k_, n_}, type,
                                 bf16 ? memory::format_tag::BA16a64b2a : memory::format_tag::BA16a64b);
    k_padded_ = gemv_desc.data.padded_dims[0];
    const int64_t src_stride = bf16 ? k_padded_ : k_;
    QUILL_ASSIGN_OR_RETURN(matmul_, OnednnMatmul::Create(type, k_, n_, src_stride, plain, buckets));

    if (gemv_below_rows_ > 0) {
      // The GEMV reads oneDNN's copy when oneDNN chose the same layout; otherwise it keeps
      // its own copy.
      const void* gemv_weights = matmul_->packed_weights();
      if (gemv_desc != matmul_->weights_desc()) {
        try {
          gemv_copy_ = memory(gemv_desc, DnnlEngine());
          memory plain_mem(memory::desc({k_, n_}, type, memory::format_tag::ba), DnnlEngine(),
                           const_cast<void*>(plain));
          dnnl::reorder(plain_mem, gemv_copy_).execute(DnnlStream(), plain_mem, gemv_copy_);
          DnnlStream().wait();
        } catch (const dnnl::error& e) {
          return absl::InternalError(absl::StrCat("oneDNN reorder for the GEMV failed: ", e.what()));
        }
        gemv_weights = gemv_copy_.get_data_handle();
      }
      gemv_weights_bf16_ = static_cast<const uint16_t*>(gemv_weights);
      gemv_weights_f32_ = static_cast<const float*>(gemv_weights);
    }

    if (bf16) x_bf16_ = AlignedBuffer<uint16_t>(static_cast<size_t>(max_tokens_) * k_padded_);
    if (gemv_below_rows_ == 0) {
      const int pad_rows = NextPow2(std::min(max_tokens_, kPadBelowRows - 1));
      x_pad_ = AlignedBuffer<uint8_t>(static_cast<size_t>(pad_rows) * src_stride * (bf16 ? 2 : 4));
      y_pad_ = AlignedBuffer<float>(static_cast<size_t>(pad_rows) * n_);
    }
    return absl::OkStatus();
  }

  Mode mode_ = Mode::kBf16;
  int64_t k_ = 0, n_ = 0;
  int64_t k_padded_ = 0;  // k rounded up as in the GEMV's weight layout (and the bf16 x rows)
  int max_tokens_ = 0;
  int gemv_below_rows_ = 0;  // the GEMV serves m below this; 0: no GEMV on this CPU
  std::unique_ptr<OnednnMatmul> matmul_;
  memory gemv_copy_;  // only when oneDNN's layout is not the GEMV's
  const uint16_t* gemv_weights_bf16_ = nullptr;
  const float* gemv_weights_f32_ = nullptr;
  AlignedBuffer<uint16_t> x_bf16_;
  AlignedBuffer<uint8_t> x_pad_;
  AlignedBuffer<float> y_pad_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> CreateFastLinear(absl::Span<const WeightView> parts,
                                                         int max_tokens) {
  const WeightType type = parts[0].type;
  const bool bf16 = type != WeightType::kF32 && HasAvx512Bf16();
  return FastLinear::Create(parts, max_tokens,
                            bf16 ? FastLinear::Mode::kBf16 : FastLinear::Mode::kF32);
}

}  // namespace quill::engine::kernels::linear_internal
