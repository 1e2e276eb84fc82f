// Precision::kFast. Large m: static-M oneDNN matmuls (bf16, or f32 for F32 weights and on
// CPUs without AVX512-BF16) over one packed weight copy in oneDNN's blocked layout. Small m
// (decode): a hand-written kernel that streams the weights once for all rows:
//   F16/BF16: bf16 GEMV reading that same oneDNN copy (BA16a64b2a), on AMX tiles where the
//             CPU has AMX-BF16 (every row of a step below 64 rows gets the bits it gets alone);
//   F32:      f32 GEMV reading oneDNN's BA16a64b copy;
//   Q8_0:     int8 VNNI kernel over its own repacked Q8_0 copy (half the bytes of bf16), for
//             every m: it also beats oneDNN's bf16 matmul at large m, so no bf16 copy.
//   Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (mixed freely): int8 VNNI kernel over the blocks
//             repacked at their own bit width (linear_qblock.h), for every m, on CPUs with
//             AVX512-VNNI. Elsewhere (and for fusions mixing these with other types) the weights
//             are widened for oneDNN like F16.

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/cpu_features.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/linear_onednn.h"
#include "engine/kernels/linear_q8.h"
#include "engine/kernels/linear_qblock.h"

namespace quill::engine::kernels::linear_internal {
namespace {

using dnnl::memory;

// Without a small-m kernel, rows below this are padded up to one power-of-two bucket (one
// weight pass) instead of being split into several smaller calls.
constexpr int kPadBelowRows = 32;
// Largest static M; bigger batches run as several chunks (GFLOP/s is flat from 128 up).
constexpr int kMaxBucketRows = 256;
// Static-M buckets are this many rows apart above it (powers of two below).
constexpr int kBucketStepRows = 32;

int NextPow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

enum class SmallM { kPadded, kGemvBf16, kGemvF32, kQ8, kQBlock };

// The small-m kernels serve a step's rows when it has fewer than this many, oneDNN the
// whole multiples of kBucketStepRows of a larger step (the smaller buckets then serve only
// the remainder of a step past the largest bucket).
int SmallBelowRows(SmallM small) {
  // Without AMX, oneDNN's bf16 brgemm at m = 32 runs 640-690 GFLOP/s against the bf16 GEMV's
  // 770-810, and from m = 64 on both run at the AVX512-BF16 peak (quill-linear-bench,
  // TinyLlama shapes, 2 threads, Zen 5): the GEMV serves every m below 64. With AMX the
  // GEMV's own tiles (GemvBf16Amx) take 0.71-0.89x oneDNN's time at m = 32 on qkv and down
  // and 0.79-0.96x at m = 64 (Xeon, 2 threads, 2 rounds): they too serve m below 64. With
  // oneDNN on AMX and no tiles of our own, the f32 GEMV's 32.
  if (small != SmallM::kGemvBf16) return 32;
  return !OnednnUsesAmx() || GemvBf16AmxAvailable() ? 64 : 32;
}

class FastLinear final : public Linear {
 public:
  static absl::StatusOr<std::unique_ptr<Linear>> Create(absl::Span<const WeightView> parts,
                                                        int max_tokens,
                                                        std::shared_ptr<LinearScratch> scratch) {
    auto lin = std::unique_ptr<FastLinear>(new FastLinear());
    lin->scratch_ = std::move(scratch);
    bool any_f32 = false, all_q8 = true, all_qblock = true;
    for (const WeightView& p : parts) {
      any_f32 = any_f32 || p.type == WeightType::kF32;
      all_q8 = all_q8 && p.type == WeightType::kQ8_0;
      all_qblock = all_qblock && IsQBlockType(p.type);
    }
    // bf16 loses precision on F32 weights: any F32 part keeps the whole matmul in f32.
    lin->bf16_ = !any_f32 && HasAvx512Bf16();
    lin->k_ = parts[0].cols;
    lin->n_ = TotalRows(parts);
    lin->max_tokens_ = max_tokens;
    if (all_qblock && QBlockKernelAvailable()) {
      lin->small_ = SmallM::kQBlock;
    } else if (all_q8 && HasAvx512Bf16()) {
      lin->small_ = SmallM::kQ8;
    } else if (lin->bf16_) {
      lin->small_ = SmallM::kGemvBf16;
    } else if (GetCpuFeatures().avx512f) {
      lin->small_ = SmallM::kGemvF32;
    } else {
      lin->small_ = SmallM::kPadded;
    }
    lin->small_below_ =
        lin->small_ == SmallM::kPadded ? kPadBelowRows : SmallBelowRows(lin->small_);
    lin->amx_bf16_ = lin->small_ == SmallM::kGemvBf16 && GemvBf16AmxAvailable();
    QUILL_RETURN_IF_ERROR(lin->Pack(parts));
    return lin;
  }

  int row_multiple() const override { return matmul_ ? kBucketStepRows : 1; }
  // A padded bucket costs its whole size, so rounding up to it is free at every m; the int8
  // kernels have no blocks at all.
  int blocked_from_rows() const override {
    return matmul_ && small_ != SmallM::kPadded ? small_below_ : 1;
  }

  void Run(const float* x, int m, float* y) override {
    QUILL_DCHECK(m >= 1 && m <= max_tokens_);
    // Rows [0, direct) go to oneDNN buckets applied in place (whole multiples of the bucket
    // step, from small_below_ rows on); the rest to the small-m kernel or one padded bucket.
    int direct = matmul_ ? m - m % kBucketStepRows : 0;
    if (direct < small_below_) direct = 0;
    const void* src = x;
    int64_t src_stride = k_;
    size_t elem = sizeof(float);
    if (bf16_) {
      const int convert = small_ == SmallM::kGemvBf16 ? m : direct;
      uint16_t* x_bf16 = static_cast<uint16_t*>(scratch_->Get(LinearScratch::kXBf16));
      if (convert > 0) ConvertRowsToBf16(x, convert, k_, x_bf16, k_padded_);
      src = x_bf16;
      src_stride = k_padded_;
      elem = sizeof(uint16_t);
    }
    const auto row_ptr = [&](int r) {
      return static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * src_stride * elem;
    };
    const std::vector<int>& buckets = matmul_ ? matmul_->buckets() : no_buckets_;
    int r = 0;
    while (r < direct) {
      size_t b = buckets.size() - 1;
      while (buckets[b] > direct - r) --b;
      matmul_->RunBucket(b, row_ptr(r), y + static_cast<int64_t>(r) * n_);
      r += buckets[b];
    }
    if (r == m) return;
    const int rest = m - r;
    float* y_rest = y + static_cast<int64_t>(r) * n_;
    switch (small_) {
      case SmallM::kGemvBf16:
        (amx_bf16_ ? GemvBf16Amx : GemvBf16Blocked)(gemv_bf16_, k_padded_, n_,
                                                    reinterpret_cast<const uint16_t*>(row_ptr(r)),
                                                    src_stride, rest, y_rest, n_);
        return;
      case SmallM::kGemvF32:
        GemvF32Blocked(gemv_f32_, k_, k_padded_, n_, x + static_cast<int64_t>(r) * k_, k_, rest,
                       y_rest, n_);
        return;
      case SmallM::kQ8:
        q8_->Run(x + static_cast<int64_t>(r) * k_, rest, y_rest, n_);
        return;
      case SmallM::kQBlock:
        qblock_->Run(x + static_cast<int64_t>(r) * k_, rest, y_rest, n_);
        return;
      case SmallM::kPadded: {
        // Copy the rest into scratch, run the smallest bucket that holds it, copy back.
        size_t b = 0;
        while (buckets[b] < rest) ++b;
        std::memcpy(x_pad_.data(), row_ptr(r), static_cast<size_t>(rest) * src_stride * elem);
        matmul_->RunBucket(b, x_pad_.data(), y_pad_.data());
        std::memcpy(y_rest, y_pad_.data(), static_cast<size_t>(rest) * n_ * sizeof(float));
        return;
      }
    }
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  int64_t packed_bytes() const override {
    int64_t bytes = matmul_ ? matmul_->packed_bytes() : 0;
    if (gemv_copy_) bytes += static_cast<int64_t>(gemv_copy_.get_desc().get_size());
    if (q8_) bytes += q8_->packed_bytes();
    if (qblock_) bytes += qblock_->packed_bytes();
    return bytes;
  }
  std::string kernel_name() const override {
    std::string name;
    if (matmul_)
      absl::StrAppend(&name, "onednn-", bf16_ ? "bf16" : "f32", "(", matmul_->impl_name(), ")+");
    switch (small_) {
      case SmallM::kGemvBf16:
        absl::StrAppend(&name, amx_bf16_ ? "gemv-bf16-amx" : "gemv-bf16-avx512",
                        matmul_ && gemv_copy_ ? "(2nd copy)" : "");
        break;
      case SmallM::kGemvF32:
        absl::StrAppend(&name, "gemv-f32-avx512", matmul_ && gemv_copy_ ? "(2nd copy)" : "");
        break;
      case SmallM::kQ8:
        absl::StrAppend(&name, "int8-vnni-q8_0");
        break;
      case SmallM::kQBlock:
        absl::StrAppend(&name, qblock_->name());
        break;
      case SmallM::kPadded:
        absl::StrAppend(&name, "padded-small-m");
        break;
    }
    return name;
  }

 private:
  FastLinear() = default;

  absl::Status Pack(absl::Span<const WeightView> parts) {
    // Q8_0 runs every m through the int8 kernel: 1.5x oneDNN's bf16 GFLOP/s even at m=512
    // (quill-linear-bench, CPU time per core), with no second weight copy.
    // The block types likewise (same kernel structure, fewer bytes).
    const bool int8 = small_ == SmallM::kQ8 || small_ == SmallM::kQBlock;
    const bool need_onednn = !int8 && (small_ == SmallM::kPadded || max_tokens_ >= small_below_);
    const bool gemv = small_ == SmallM::kGemvBf16 || small_ == SmallM::kGemvF32;
    const memory::data_type type = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    // The GEMVs stream BA16a64b2a (bf16: 32-k blocks of 64 columns x 16 k pairs) or
    // BA16a64b (f32). In bf16, oneDNN too sees k rounded up to 32 (zero weights, and zero x
    // columns in the scratch): with an odd k it would fall back from brgemm to a slow gemm.
    const memory::format_tag gemv_tag =
        bf16_ ? memory::format_tag::BA16a64b2a : memory::format_tag::BA16a64b;
    const int64_t k_mm = bf16_ ? RoundUp(k_, 32) : k_;
    const memory::desc gemv_desc({k_mm, n_}, type, gemv_tag);
    k_padded_ = gemv_desc.data.padded_dims[0];
    const int64_t src_stride = bf16_ ? k_padded_ : k_;

    if (small_ == SmallM::kQ8) {
      QUILL_RETURN_IF_ERROR(Q8Gemv::ReserveScratch(k_, max_tokens_, *scratch_));
      q8_.emplace(parts, max_tokens_, scratch_.get());
    }
    if (small_ == SmallM::kQBlock) {
      qblock_.emplace(parts, max_tokens_, scratch_.get());
      QUILL_RETURN_IF_ERROR(qblock_->ReserveScratch(*scratch_));
    }
    if (!need_onednn && !gemv) return absl::OkStatus();

    // The plain row-major copy lives only until the reorders into the blocked layouts.
    AlignedBuffer<uint16_t> plain16(bf16_ ? static_cast<size_t>(n_ * k_mm) : 0);
    AlignedBuffer<float> plain32(bf16_ ? 0 : static_cast<size_t>(n_ * k_mm));
    if (bf16_) {
      ConvertPartsToBf16(parts, plain16.data(), k_mm);
    } else {
      WidenPartsToF32(parts, plain32.data(), k_);
    }
    const void* plain = bf16_ ? static_cast<const void*>(plain16.data()) : plain32.data();

    if (need_onednn) {
      // From the smallest row count oneDNN serves up to max_tokens: powers of two up to
      // kBucketStepRows, then every multiple of it, so that a step of 96 or 160 rows runs as
      // one primitive rather than as 64 + 32 or 128 + 32. (The 32-row bucket also serves
      // what is left of a step past kMaxBucketRows when the GEMV takes m < 64.)
      const int smallest = small_ == SmallM::kPadded ? 1 : kBucketStepRows;
      const int largest = std::max(smallest, std::min(kMaxBucketRows, NextPow2(max_tokens_)));
      std::vector<int> buckets;
      for (int b = smallest; b <= largest; b += std::min(b, kBucketStepRows)) buckets.push_back(b);
      QUILL_ASSIGN_OR_RETURN(matmul_, OnednnMatmul::Create(type, k_mm, n_, src_stride, plain,
                                                           buckets, scratch_.get()));
      if (matmul_->buckets().front() != smallest) {
        return absl::InternalError("oneDNN refused the smallest static-M bucket");
      }
    }
    if (gemv) {
      // The GEMV reads oneDNN's copy when oneDNN chose the same layout; otherwise (or with
      // no oneDNN at all) it keeps its own.
      const void* weights = matmul_ ? matmul_->packed_weights() : nullptr;
      if (!matmul_ || gemv_desc != matmul_->weights_desc()) {
        try {
          gemv_copy_buffer_ = AlignedBuffer<uint8_t>(gemv_desc.get_size(), /*huge_pages=*/true);
          gemv_copy_ = memory(gemv_desc, DnnlEngine(), gemv_copy_buffer_.data());
          memory plain_mem(memory::desc({k_mm, n_}, type, memory::format_tag::ba), DnnlEngine(),
                           const_cast<void*>(plain));
          dnnl::reorder(plain_mem, gemv_copy_).execute(DnnlStream(), plain_mem, gemv_copy_);
          DnnlStream().wait();
        } catch (const dnnl::error& e) {
          return absl::InternalError(
              absl::StrCat("oneDNN reorder for the GEMV failed: ", e.what()));
        }
        weights = gemv_copy_.get_data_handle();
      }
      gemv_bf16_ = static_cast<const uint16_t*>(weights);
      gemv_f32_ = static_cast<const float*>(weights);
    }
    if (bf16_) {
      QUILL_RETURN_IF_ERROR(scratch_->Reserve(
          LinearScratch::kXBf16, static_cast<size_t>(max_tokens_) * k_padded_ * sizeof(uint16_t)));
    }
    if (small_ == SmallM::kPadded) {
      const int pad_rows = NextPow2(std::min(max_tokens_, kPadBelowRows - 1));
      x_pad_ = AlignedBuffer<uint8_t>(static_cast<size_t>(pad_rows) * src_stride * (bf16_ ? 2 : 4));
      y_pad_ = AlignedBuffer<float>(static_cast<size_t>(pad_rows) * n_);
    }
    return absl::OkStatus();
  }

  bool bf16_ = false;  // oneDNN (and the GEMV) in bf16; else f32
  bool amx_bf16_ = false;  // the bf16 GEMV on AMX tiles (GemvBf16Amx)
  SmallM small_ = SmallM::kPadded;
  int small_below_ = kPadBelowRows;  // oneDNN serves steps of at least this many rows
  int64_t k_ = 0, n_ = 0;
  int64_t k_padded_ = 0;  // k rounded up as in the GEMV's weight layout (and the bf16 x rows)
  int max_tokens_ = 0;
  std::unique_ptr<OnednnMatmul> matmul_;  // null when max_tokens stays in the small-m range
  std::vector<int> no_buckets_;
  // Only when oneDNN's layout is not the GEMV's, or there is no oneDNN.
  AlignedBuffer<uint8_t> gemv_copy_buffer_;
  memory gemv_copy_;
  const uint16_t* gemv_bf16_ = nullptr;
  const float* gemv_f32_ = nullptr;
  std::optional<Q8Gemv> q8_;
  std::optional<QBlockGemm> qblock_;
  std::shared_ptr<LinearScratch> scratch_;  // x in bf16 (kXBf16), Q8 and oneDNN scratch
  AlignedBuffer<uint8_t> x_pad_;
  AlignedBuffer<float> y_pad_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> CreateFastLinear(absl::Span<const WeightView> parts,
                                                         int max_tokens,
                                                         std::shared_ptr<LinearScratch> scratch) {
  return FastLinear::Create(parts, max_tokens, std::move(scratch));
}

}  // namespace quill::engine::kernels::linear_internal
