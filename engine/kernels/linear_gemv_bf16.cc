// Small-m bf16 kernel (decode): streams oneDNN's BA16a64b2a packed weights once and serves
// every x row from each weight load with _mm512_dpbf16_ps. Column block = 64 outputs, so
// each k pair is 4 zmm of weights and the 16-lane results land directly on outputs (no
// horizontal sums).

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/kernels/linear_internal.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels::linear_internal {
namespace {

#define QUILL_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int kBlockCols = kGemvBf16BlockCols;
constexpr int kMaxRows = 6;  // x rows per register tile (6 x 4 accumulators of 32 zmm)
// k pairs per pass when rows need several tiles: 32 KiB of weights, which the later tiles
// reread from L1 (48 KiB on Zen 5) while the first tiles prefetch the next chunk into L2.
constexpr int64_t kChunkPairs = 128;
// (Software prefetch, 512 B to 8 KiB ahead, and 8 accumulator chains for m = 1 measured no
// faster: the hardware prefetchers and 4 chains already keep the loads in flight.)

// acc[MR][64] (+)= x[MR rows] . W[p0, p1) for one column block.
template <int MR>
QUILL_BF16 void BlockRows(const uint16_t* wb, int64_t p0, int64_t p1, const uint16_t* x, int64_t xs,
                          float* acc, bool init, L2Prefetch prefetch) {
  __m512 c[MR][4];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      c[i][j] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * kBlockCols + 16 * j);
  const uint16_t* wp = wb + p0 * 2 * kBlockCols;
  for (int64_t p = p0; p < p1; ++p, wp += 2 * kBlockCols) {
    prefetch.Step();
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(wp + 32);
    const __m512bh w2 = (__m512bh)_mm512_loadu_si512(wp + 64);
    const __m512bh w3 = (__m512bh)_mm512_loadu_si512(wp + 96);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, x + i * xs + 2 * p, sizeof(pair));
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
      c[i][0] = _mm512_dpbf16_ps(c[i][0], w0, xb);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], w1, xb);
      c[i][2] = _mm512_dpbf16_ps(c[i][2], w2, xb);
      c[i][3] = _mm512_dpbf16_ps(c[i][3], w3, xb);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc + i * kBlockCols + 16 * j, c[i][j]);
}

using BlockRowsFn = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, float*,
                             bool, L2Prefetch);
constexpr BlockRowsFn kBlockRows[kMaxRows + 1] = {
    nullptr, BlockRows<1>, BlockRows<2>, BlockRows<3>, BlockRows<4>, BlockRows<5>, BlockRows<6>};

// One column block for up to kMaxGroupRows rows of x (each group streams the weights once:
// the GEMV serves up to 63 rows); w_end bounds the prefetch.
constexpr int kMaxGroupRows = 64;
void ColumnBlock(const uint16_t* wb, int64_t pairs, const uint16_t* x, int64_t xs, int m,
                 float* acc, const uint16_t* w_end) {
  if (m <= kMaxRows) {
    kBlockRows[m](wb, 0, pairs, x, xs, acc, true, L2Prefetch());
    return;
  }
  // Several register tiles of balanced size (16 rows: 5 + 5 + 6, not 6 + 6 + 4): walk k in
  // chunks so that the chunk stays in cache across tiles, the tiles of each chunk prefetching
  // the next one (past the block's last chunk, the next block's first pairs). Without the
  // prefetch a core alternates between streaming weights (first tile) and arithmetic.
  const int tiles = (m + kMaxRows - 1) / kMaxRows;
  for (int64_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
    const int64_t p1 = std::min(pairs, p0 + kChunkPairs);
    const uint16_t* next = wb + p1 * 2 * kBlockCols;
    const int64_t next_bytes =
        std::min<int64_t>(kChunkPairs * 2 * kBlockCols, w_end - next) * sizeof(uint16_t);
    for (int t = 0, i = 0; t < tiles; ++t) {
      const int mr = (m - i) / (tiles - t);
      kBlockRows[mr](
          wb, p0, p1, x + i * xs, xs, acc + i * kBlockCols, p0 == 0,
          L2Prefetch(reinterpret_cast<const uint8_t*>(next), next_bytes, t, tiles, p1 - p0));
      i += mr;
    }
  }
}

}  // namespace

void GemvBf16Blocked(const uint16_t* w, int64_t k_padded, int64_t n, const uint16_t* x,
                     int64_t x_stride, int m, float* y, int64_t y_stride) {
  const int64_t blocks = (n + kBlockCols - 1) / kBlockCols;
  const int64_t pairs = k_padded / 2;
  const uint16_t* const w_end = w + blocks * k_padded * kBlockCols;
  // Tiny products are not worth waking the other threads.
  const bool parallel = blocks > 1 && static_cast<int64_t>(m) * n * k_padded >= (1 << 16);
  ParallelFor(blocks, parallel, [&](int64_t b) {
    alignas(64) float acc[kMaxGroupRows * kBlockCols];
    const uint16_t* wb = w + b * k_padded * kBlockCols;
    const int64_t n0 = b * kBlockCols;
    const int64_t cols = std::min<int64_t>(kBlockCols, n - n0);
    for (int i0 = 0; i0 < m; i0 += kMaxGroupRows) {
      const int rows = std::min(kMaxGroupRows, m - i0);
      ColumnBlock(wb, pairs, x + i0 * x_stride, x_stride, rows, acc, w_end);
      for (int i = 0; i < rows; ++i)
        std::memcpy(y + (i0 + i) * y_stride + n0, acc + i * kBlockCols, cols * sizeof(float));
    }
  });
}

namespace {

QUILL_BF16 void ConvertRowToBf16(const float* src, int64_t k, uint16_t* dst, int64_t out_stride) {
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), (__m256i)v);
  }
  if (c < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - c)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + c));
    _mm256_mask_storeu_epi16(dst + c, mask, (__m256i)v);
  }
  std::memset(dst + k, 0, (out_stride - k) * sizeof(uint16_t));
}

}  // namespace

void ConvertRowsToBf16(const float* x, int m, int64_t k, uint16_t* out, int64_t out_stride) {
  ParallelFor(m, m * k >= (1 << 18),
              [&](int64_t i) { ConvertRowToBf16(x + i * k, k, out + i * out_stride, out_stride); });
}

}  // namespace quill::engine::kernels::linear_internal
