// Precision::kExact: f32 weights (widened once), f32 activations, and one fixed summation
// order per output (see linear_internal.h), so results are batch invariant and
// deterministic. The AVX2 path emulates the 16 lanes with two 8-lane halves and reduces in
// the same tree, so both ISAs give the same bits.

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/cpu_features.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels::linear_internal {
namespace {

#define QUILL_AVX512 __attribute__((target("avx512f,avx512vl")))

// s8 = lanes l + (l + 8), then the fixed tree down to one value.
inline float ReduceHalves(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

QUILL_AVX512 inline float Reduce16(__m512 v) {
  // Through memory: GCC 12's 512->256 extract intrinsics trip -Wuninitialized.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return ReduceHalves(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8));
}

// MR rows of x against NR weight rows, each output its own 16-lane accumulator.
template <int MR, int NR>
QUILL_AVX512 void Block512(const float* x, int64_t xs, const float* w, int64_t ws, int64_t k,
                           float* y, int64_t ys) {
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t full = k / 16;
  for (int64_t s = 0; s < full; ++s) {
    __m512 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_loadu_ps(x + i * xs + s * 16);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_loadu_ps(w + j * ws + s * 16);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (k % 16 != 0) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k % 16)) - 1);
    __m512 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_maskz_loadu_ps(mask, x + i * xs + full * 16);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_loadu_ps(w + j * ws + full * 16);  // zero padded
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[i * ys + j] = Reduce16(acc[i][j]);
}

template <int MR, int NR>
void Block256(const float* x, int64_t xs, const float* w, int64_t ws, int64_t k, float* y,
              int64_t ys) {
  __m256 lo[MR][NR], hi[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  const int64_t full = k / 16;
  alignas(32) float tail[MR][16];
  const int64_t steps = full + (k % 16 != 0 ? 1 : 0);
  for (int64_t s = 0; s < steps; ++s) {
    __m256 xl[MR], xh[MR];
    if (s < full) {
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        xl[i] = _mm256_loadu_ps(x + i * xs + s * 16);
        xh[i] = _mm256_loadu_ps(x + i * xs + s * 16 + 8);
      }
    } else {
      // Partial last step: zero-padded copy of the x tail (the weights are padded).
      for (int i = 0; i < MR; ++i) {
        std::memset(tail[i], 0, sizeof(tail[i]));
        std::memcpy(tail[i], x + i * xs + s * 16, (k % 16) * sizeof(float));
        xl[i] = _mm256_load_ps(tail[i]);
        xh[i] = _mm256_load_ps(tail[i] + 8);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m256 wl = _mm256_loadu_ps(w + j * ws + s * 16);
      const __m256 wh = _mm256_loadu_ps(w + j * ws + s * 16 + 8);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        lo[i][j] = _mm256_fmadd_ps(xl[i], wl, lo[i][j]);
        hi[i][j] = _mm256_fmadd_ps(xh[i], wh, hi[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[i * ys + j] = ReduceHalves(lo[i][j], hi[i][j]);
}

constexpr int64_t kMinParallelWork = 1 << 16;  // multiply-adds

using BlockFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t);

template <int MR>
BlockFn Pick512(int nr) {
  switch (nr) {
    case 1:
      return Block512<MR, 1>;
    case 2:
      return Block512<MR, 2>;
    case 3:
      return Block512<MR, 3>;
    default:
      return Block512<MR, 4>;
  }
}

BlockFn Pick512(int mr, int nr) {
  switch (mr) {
    case 1:
      return Pick512<1>(nr);
    case 2:
      return Pick512<2>(nr);
    case 3:
      return Pick512<3>(nr);
    default:
      return Pick512<4>(nr);
  }
}

BlockFn Pick256(int mr, int nr) {
  if (mr == 1) return nr == 1 ? Block256<1, 1> : Block256<1, 2>;
  return nr == 1 ? Block256<2, 1> : Block256<2, 2>;
}

class ExactLinear final : public Linear {
 public:
  ExactLinear(int64_t k, int64_t n, int max_tokens, ExactIsa isa)
      : k_(k),
        k_padded_(RoundUp(k, kExactLanes)),
        n_(n),
        max_tokens_(max_tokens),
        isa_(isa),
        w_(static_cast<size_t>(n * RoundUp(k, kExactLanes)), /*huge_pages=*/true) {}

  float* weights() { return w_.data(); }
  int64_t k_padded() const { return k_padded_; }

  void Run(const float* x, int m, float* y) override {
    QUILL_DCHECK(m >= 1 && m <= max_tokens_);
    // Column tiles: any tiling gives the same bits. A tile's weights stay in L2 (<= 512 KiB)
    // while the x rows pass, and there are enough tiles to balance the threads.
    const int threads = omp_get_max_threads();
    const int64_t l2_cols = std::max<int64_t>(4, (512 << 10) / (k_padded_ * 4) / 4 * 4);
    const int64_t tile = std::clamp<int64_t>(RoundUp((n_ + 4 * threads - 1) / (4 * threads), 4), 4,
                                             std::min<int64_t>(64, l2_cols));
    const int64_t tiles = (n_ + tile - 1) / tile;
    // Tiny products are not worth waking the other threads.
    const bool parallel = static_cast<int64_t>(m) * n_ * k_ >= kMinParallelWork;
    ParallelFor(tiles, parallel, [&](int64_t t) {
      const int64_t n0 = t * tile;
      ExactGemmTile(isa_, x, k_, m, w_.data() + n0 * k_padded_, k_, std::min(tile, n_ - n0), y + n0,
                    n_);
    });
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  int64_t packed_bytes() const override { return static_cast<int64_t>(w_.bytes()); }
  std::string kernel_name() const override {
    return isa_ == ExactIsa::kAvx512 ? "exact-f32-avx512" : "exact-f32-avx2";
  }

 private:
  int64_t k_, k_padded_, n_;
  [[maybe_unused]] int max_tokens_;  // read by QUILL_DCHECK only
  ExactIsa isa_;
  AlignedBuffer<float> w_;  // [n x k_padded], zero past k
};

}  // namespace

void ExactGemmTile(ExactIsa isa, const float* x, int64_t x_stride, int m, const float* w, int64_t k,
                   int64_t n, float* y, int64_t y_stride) {
  const int64_t ws = RoundUp(k, kExactLanes);
  const int max_mr = isa == ExactIsa::kAvx512 ? 4 : 2;
  const int max_nr = isa == ExactIsa::kAvx512 ? 4 : 2;
  // x rows outer: a few x rows stay in L1 while the tile's weight rows (in L2) pass.
  for (int i = 0; i < m; i += max_mr) {
    const int mr = std::min(max_mr, m - i);
    for (int64_t j = 0; j < n; j += max_nr) {
      const int nr = static_cast<int>(std::min<int64_t>(max_nr, n - j));
      const BlockFn fn = isa == ExactIsa::kAvx512 ? Pick512(mr, nr) : Pick256(mr, nr);
      fn(x + i * x_stride, x_stride, w + j * ws, ws, k, y + i * y_stride + j, y_stride);
    }
  }
}

absl::StatusOr<std::unique_ptr<Linear>> CreateExactLinear(absl::Span<const WeightView> parts,
                                                          int max_tokens) {
  const int64_t k = parts[0].cols;
  const ExactIsa isa = GetCpuFeatures().avx512f ? ExactIsa::kAvx512 : ExactIsa::kAvx2;
  auto linear = std::make_unique<ExactLinear>(k, TotalRows(parts), max_tokens, isa);
  WidenPartsToF32(parts, linear->weights(), linear->k_padded());
  return linear;
}

}  // namespace quill::engine::kernels::linear_internal
