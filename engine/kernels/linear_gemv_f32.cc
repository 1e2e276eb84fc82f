// Small-m f32 kernel: streams oneDNN's BA16a64b packed f32 weights once and serves every x
// row from each weight load (oneDNN's own f32 GEMV reaches only ~12-24 GB/s here).

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/kernels/linear_internal.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels::linear_internal {
namespace {

#define QUILL_AVX512F __attribute__((target("avx512f")))

constexpr int kBlockCols = 64;
constexpr int kMaxRows = 4;
constexpr int64_t kChunkK = 256;  // k values per pass when rows need several passes (64 KiB)
constexpr int kMaxGroupRows = 32;

template <int MR>
QUILL_AVX512F void BlockRows(const float* wb, int64_t k0, int64_t k1, const float* x, int64_t xs,
                             float* acc, bool init) {
  __m512 c[MR][4];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      c[i][j] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * kBlockCols + 16 * j);
  const float* wp = wb + k0 * kBlockCols;
  for (int64_t k = k0; k < k1; ++k, wp += kBlockCols) {
    const __m512 w0 = _mm512_loadu_ps(wp);
    const __m512 w1 = _mm512_loadu_ps(wp + 16);
    const __m512 w2 = _mm512_loadu_ps(wp + 32);
    const __m512 w3 = _mm512_loadu_ps(wp + 48);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * xs + k]);
      c[i][0] = _mm512_fmadd_ps(w0, xb, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(w1, xb, c[i][1]);
      c[i][2] = _mm512_fmadd_ps(w2, xb, c[i][2]);
      c[i][3] = _mm512_fmadd_ps(w3, xb, c[i][3]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc + i * kBlockCols + 16 * j, c[i][j]);
}

using BlockRowsFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, bool);
constexpr BlockRowsFn kBlockRows[kMaxRows + 1] = {nullptr, BlockRows<1>, BlockRows<2>, BlockRows<3>,
                                                  BlockRows<4>};

}  // namespace

void GemvF32Blocked(const float* w, int64_t k, int64_t k_padded, int64_t n, const float* x,
                    int64_t x_stride, int m, float* y, int64_t y_stride) {
  // Only the k real columns are read from x (the padded weight rows are zero anyway).
  const int64_t blocks = (n + kBlockCols - 1) / kBlockCols;
  // Tiny products are not worth waking the other threads.
  const bool parallel = blocks > 1 && static_cast<int64_t>(m) * n * k >= (1 << 16);
  ParallelFor(blocks, parallel, [&](int64_t b) {
    alignas(64) float acc[kMaxGroupRows * kBlockCols];
    const float* wb = w + b * k_padded * kBlockCols;
    const int64_t n0 = b * kBlockCols;
    const int64_t cols = std::min<int64_t>(kBlockCols, n - n0);
    for (int i0 = 0; i0 < m; i0 += kMaxGroupRows) {
      const int rows = std::min(kMaxGroupRows, m - i0);
      const float* xg = x + i0 * x_stride;
      if (rows <= kMaxRows) {
        kBlockRows[rows](wb, 0, k, xg, x_stride, acc, true);
      } else {
        for (int64_t k0 = 0; k0 < k; k0 += kChunkK) {
          const int64_t k1 = std::min(k, k0 + kChunkK);
          for (int i = 0; i < rows; i += kMaxRows) {
            const int mr = std::min(kMaxRows, rows - i);
            kBlockRows[mr](wb, k0, k1, xg + i * x_stride, x_stride, acc + i * kBlockCols, k0 == 0);
          }
        }
      }
      for (int i = 0; i < rows; ++i)
        std::memcpy(y + (i0 + i) * y_stride + n0, acc + i * kBlockCols, cols * sizeof(float));
    }
  });
}

}  // namespace quill::engine::kernels::linear_internal
