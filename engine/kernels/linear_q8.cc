// Q8_0 x int8 GEMV with AVX512-VNNI. Per 32-k group g and output n:
//   y[n] += d_w[n, g] * d_x[g] * (sum_k (q_w + 128) * q_x  -  128 * sum_k q_x)
// dpbusd needs one unsigned operand: the weights are stored +128 (u8) and the -128*sum(q_x)
// term seeds the int32 accumulators, so the correction costs nothing in the loop.

#include "engine/kernels/linear_q8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/base/check.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/parallel_for.h"

// GCC 12's AVX-512 reduce/convert intrinsics start from _mm*_undefined_*() and trip
// -Wmaybe-uninitialized (GCC bug 105593); the values are fully defined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace quill::engine::kernels::linear_internal {
namespace {

#define QUILL_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

constexpr int kMaxRows = 4;           // x rows per register tile (6 measured no faster)
// x rows per tile when the rows take turns group by group: the float sums live in L1, so
// 8 rows' dot products (16 zmm) fit in registers.
constexpr int kGroupTurnRows = 8;
constexpr int64_t kChunkGroups = 32;  // 32-k groups per pass when rows need several passes
constexpr int kMaxGroupRows = 32;
// A column block that two row tiles may sweep whole, the second from L2: half of a 1 MiB L2
// (the smallest of the AVX512-VNNI server cores), k up to 15,392.
constexpr int64_t kWholeBlockMaxBytes = 512 << 10;
// Below this many rows (and past whole blocks), row tiles take turns group by group
// (GroupRows), the weights prefetched this far ahead.
constexpr int kGroupTurnsBelowRows = 17;
constexpr int64_t kGroupAheadBytes = 8192;

// s[i][h] = the int32 dot products of rows i of x with group g's columns (half h), the
// -128 * sum(q_x) correction included.
template <int MR>
QUILL_VNNI inline void GroupDots(const uint8_t* wp, int64_t g, const int8_t* xq, int64_t k,
                                 const int32_t* xneg, int64_t groups, __m512i (&s)[MR][2]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = _mm512_set1_epi32(xneg[i * groups + g]);
  const uint8_t* qp = wp + 64;
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) {
    const __m512i w0 = _mm512_loadu_si512(qp + q * 128);
    const __m512i w1 = _mm512_loadu_si512(qp + q * 128 + 64);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      int32_t quad;
      std::memcpy(&quad, xq + i * k + g * 32 + q * 4, sizeof(quad));
      const __m512i xb = _mm512_set1_epi32(quad);
      s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, xb);
      s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, xb);
    }
  }
}

// The weight scales of a group's two column halves.
struct GroupScales {
  __m512 d0, d1;
};
QUILL_VNNI inline GroupScales LoadScales(const uint8_t* wp) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp))),
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32)))};
}

// f[h] += s[h] * d_w[h] * d_x: one row's dot products of a group, scaled (the one order
// every sweep uses, so a row's bits do not depend on the step's size).
QUILL_VNNI inline void ScaleRow(const GroupScales& d, float dx_scalar, const __m512i (&s)[2],
                                __m512& f0, __m512& f1) {
  const __m512 dx = _mm512_set1_ps(dx_scalar);
  f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), _mm512_mul_ps(d.d0, dx), f0);
  f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1]), _mm512_mul_ps(d.d1, dx), f1);
}

// f[i][h] += s[i][h] * d_w[h] * d_x[i]: group g's scales applied to its dot products.
template <int MR>
QUILL_VNNI inline void ScaleInto(const uint8_t* wp, int64_t g, const float* xd, int64_t groups,
                                 const __m512i (&s)[MR][2], __m512 (&f)[MR][2]) {
  const GroupScales d = LoadScales(wp);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) ScaleRow(d, xd[i * groups + g], s[i], f[i][0], f[i][1]);
}

// acc[MR][32] (+)= rows of x against groups [g0, g1) of one column block, one prefetch
// step per group: `prefetch` (the tiled rows) fetches the next chunk into L2.
template <int MR>
QUILL_VNNI void BlockRows(const uint8_t* wb, int64_t g0, int64_t g1, const int8_t* xq, int64_t k,
                          const float* xd, const int32_t* xneg, int64_t groups, float* acc,
                          bool init, L2Prefetch prefetch) {
  __m512 f[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j)
      f[i][j] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * kQ8BlockCols + 16 * j);
  const uint8_t* wp = wb + g0 * kQ8GroupBytes;
  for (int64_t g = g0; g < g1; ++g, wp += kQ8GroupBytes) {
    prefetch.Step();
    __m512i s[MR][2];
    GroupDots<MR>(wp, g, xq, k, xneg, groups, s);
    ScaleInto<MR>(wp, g, xd, groups, s, f);
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(acc + i * kQ8BlockCols, f[i][0]);
    _mm512_storeu_ps(acc + i * kQ8BlockCols + 16, f[i][1]);
  }
}

// acc[MR][32] += rows of x against group g alone, the float sums kept in acc (L1) and
// scaled into one row at a time: the row tiles take turns group by group, so the weights
// stream at an even pace.
template <int MR>
QUILL_VNNI void GroupRows(const uint8_t* wp, int64_t g, const int8_t* xq, int64_t k,
                          const float* xd, const int32_t* xneg, int64_t groups, float* acc) {
  __m512i s[MR][2];
  GroupDots<MR>(wp, g, xq, k, xneg, groups, s);
  const GroupScales d = LoadScales(wp);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* a = acc + i * kQ8BlockCols;
    __m512 f0 = _mm512_load_ps(a), f1 = _mm512_load_ps(a + 16);
    ScaleRow(d, xd[i * groups + g], s[i], f0, f1);
    _mm512_store_ps(a, f0);
    _mm512_store_ps(a + 16, f1);
  }
}

using GroupRowsFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, const float*,
                             const int32_t*, int64_t, float*);
constexpr GroupRowsFn kGroupRows[kGroupTurnRows + 1] = {nullptr,      GroupRows<1>, GroupRows<2>,
                                                        GroupRows<3>, GroupRows<4>, GroupRows<5>,
                                                        GroupRows<6>, GroupRows<7>, GroupRows<8>};

using BlockRowsFn = void (*)(const uint8_t*, int64_t, int64_t, const int8_t*, int64_t, const float*,
                             const int32_t*, int64_t, float*, bool, L2Prefetch);
constexpr BlockRowsFn kBlockRows[kMaxRows + 1] = {nullptr, BlockRows<1>, BlockRows<2>, BlockRows<3>,
                                                  BlockRows<4>};

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

namespace {

QUILL_VNNI void QuantizeRowQ8(const float* x, int64_t groups, int8_t* xq, float* xd,
                              int32_t* xneg) {
  for (int64_t g = 0; g < groups; ++g) {
    const float* src = x + g * 32;
    const __m512 a = _mm512_loadu_ps(src);
    const __m512 b = _mm512_loadu_ps(src + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float d = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    // cvtps2dq rounds to nearest even; |x| * 127 / amax <= 127 (+1 ulp, clamped below).
    __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id)));
    __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(id)));
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    qa = _mm512_min_epi32(_mm512_max_epi32(qa, lo), hi);
    qb = _mm512_min_epi32(_mm512_max_epi32(qb, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + g * 32), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + g * 32 + 16), _mm512_cvtepi32_epi8(qb));
    xd[g] = d;
    xneg[g] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
  }
}

}  // namespace

void QuantizeRowsQ8(const float* x, int m, int64_t k, int8_t* xq, float* xd, int32_t* xneg) {
  const int64_t groups = k / 32;
  ParallelFor(m, m * k >= (1 << 18), [&](int64_t i) {
    QuantizeRowQ8(x + i * k, groups, xq + i * k, xd + i * groups, xneg + i * groups);
  });
}

absl::Status Q8Gemv::ReserveScratch(int64_t k, int max_rows, LinearScratch& scratch) {
  const size_t rows = static_cast<size_t>(max_rows);
  const size_t groups = static_cast<size_t>(k / 32);
  QUILL_RETURN_IF_ERROR(scratch.Reserve(LinearScratch::kXq, rows * k * sizeof(int8_t)));
  QUILL_RETURN_IF_ERROR(scratch.Reserve(LinearScratch::kXScales, rows * groups * sizeof(float)));
  return scratch.Reserve(LinearScratch::kXSums, rows * groups * sizeof(int32_t));
}

Q8Gemv::Q8Gemv(absl::Span<const WeightView> parts, int max_rows, LinearScratch* scratch)
    : k_(parts[0].cols),
      n_(TotalRows(parts)),
      groups_(parts[0].cols / 32),
      col_blocks_((TotalRows(parts) + kQ8BlockCols - 1) / kQ8BlockCols),
      max_rows_(max_rows),
      w_(static_cast<size_t>(col_blocks_ * groups_ * kQ8GroupBytes), /*huge_pages=*/true),
      scratch_(scratch) {
  // Row pointers of the fused parts, in output order.
  std::vector<const uint8_t*> rows(n_);
  int64_t r = 0;
  for (const WeightView& p : parts)
    for (int64_t i = 0; i < p.rows; ++i)
      rows[r++] = static_cast<const uint8_t*>(p.data) + i * RowBytes(p.type, p.cols);
  const int64_t groups = groups_;
  std::memset(w_.data(), 128, w_.bytes());  // q = 0 everywhere, incl. padded columns
  ParallelFor(col_blocks_, n_ * k_ >= (1 << 16), [&](int64_t cb) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* dst = w_.data() + (cb * groups + g) * kQ8GroupBytes;
      for (int c = 0; c < kQ8BlockCols; ++c) {
        const int64_t n = cb * kQ8BlockCols + c;
        uint16_t scale = 0;
        if (n < n_) {
          const uint8_t* block = rows[n] + g * kQ8BlockBytes;
          scale = LoadU16(block);
          for (int j = 0; j < 32; ++j) {
            dst[64 + (j / 4) * (kQ8BlockCols * 4) + c * 4 + j % 4] =
                static_cast<uint8_t>(static_cast<int8_t>(block[2 + j]) + 128);
          }
        }
        std::memcpy(dst + 2 * c, &scale, 2);
      }
    }
  });
}

void Q8Gemv::Run(const float* x, int m, float* y, int64_t y_stride) {
  QUILL_DCHECK(m >= 1 && m <= max_rows_);
  int8_t* const xq_all = static_cast<int8_t*>(scratch_->Get(LinearScratch::kXq));
  float* const xd_all = static_cast<float*>(scratch_->Get(LinearScratch::kXScales));
  int32_t* const xneg_all = static_cast<int32_t*>(scratch_->Get(LinearScratch::kXSums));
  QuantizeRowsQ8(x, m, k_, xq_all, xd_all, xneg_all);
  const int64_t groups = groups_;
  const uint8_t* const w_end = w_.data() + col_blocks_ * groups * kQ8GroupBytes;
  const bool parallel = col_blocks_ > 1 && static_cast<int64_t>(m) * n_ * k_ >= (1 << 16);
  ParallelFor(col_blocks_, parallel, [&](int64_t cb) {
    alignas(64) float acc[kMaxGroupRows * kQ8BlockCols];
    const uint8_t* wb = w_.data() + cb * groups * kQ8GroupBytes;
    const int64_t n0 = cb * kQ8BlockCols;
    const int64_t cols = std::min<int64_t>(kQ8BlockCols, n_ - n0);
    for (int i0 = 0; i0 < m; i0 += kMaxGroupRows) {
      const int rows = std::min(kMaxGroupRows, m - i0);
      const int8_t* xq = xq_all + i0 * k_;
      const float* xd = xd_all + i0 * groups;
      const int32_t* xneg = xneg_all + i0 * groups;
      // Three sweeps by row count (quill-linear-bench and quill-bench --batch-decode, 2
      // threads, AMD EPYC Zen 5, builds alternated; the commit messages hold each round):
      // - up to 7 rows: whole column blocks, one 4-row tile or two, the second re-reading the
      //   block from L2 (k <= 15,392). Against 32-group chunks: 0.78-0.97x at 5-7 rows. The
      //   hardware prefetchers alone stream the weights: at one row 5-11% faster than with a
      //   software stream 4 KiB ahead; at 2-4 rows too since the host reads 40-64 GB/s
      //   (stop 34, rounds alternated in one process: 0.79-0.93x the time of a 4 KiB NTA
      //   stream, 0.68-1.02x that of one 8 KiB ahead into L2).
      //   On another host (stop 35), where the block types' decode kernel gained 1.2-1.8x
      //   from a software stream at 1-2 rows, Q8_0 did not: quill-bench --batch-decode with
      //   an 8 KiB stream into L2 ran bd1 at 0.88-0.95x the tokens/s, bd2-bd6 within noise.
      // - 8-16 rows: 8-row tiles take turns group by group, so each group's weights stream at
      //   the even pace of the prefetch ahead instead of one tile waiting on memory while the
      //   others wait on nothing. Against chunks 0.67-0.78x at 8 rows; against 4-row turns
      //   and chunks 0.91-1.04x at 12 rows and 0.78-0.92x at 16 (bd16 steps 0.84-0.92x).
      //   Prefetching into L2 instead of L1 (stop 34): 0.71-0.90x at 8 rows, 0.86-1.00x at
      //   12 and 0.94-0.99x at 16 (4-16 KiB ahead alike).
      // - 17 rows and up: 32-group chunks, each tile's share prefetching the next chunk; group
      //   turns measured 0.95-1.09x at 20-24 rows, 1.01x at 32 and 1.11-1.14x at 64.
      const bool whole_blocks =
          rows <= kMaxRows ||
          (rows < 2 * kMaxRows && groups * kQ8GroupBytes <= kWholeBlockMaxBytes);
      if (whole_blocks) {
        for (int i = 0; i < rows; i += kMaxRows) {
          kBlockRows[std::min(kMaxRows, rows - i)](wb, 0, groups, xq + i * k_, k_, xd + i * groups,
                                                   xneg + i * groups, groups,
                                                   acc + i * kQ8BlockCols, true, L2Prefetch());
        }
      } else if (rows < kGroupTurnsBelowRows) {
        // Every tile's share of a group before the next group, the weights prefetched
        // kGroupAheadBytes ahead into L2 (not past the end of the buffer).
        std::memset(acc, 0, sizeof(float) * rows * kQ8BlockCols);
        const uint8_t* wp = wb;
        for (int64_t g = 0; g < groups; ++g, wp += kQ8GroupBytes) {
          const int64_t ahead = std::min<int64_t>(kGroupAheadBytes, w_end - wp);
          const int64_t ahead_end = std::min<int64_t>(ahead + kQ8GroupBytes, w_end - wp);
          for (int64_t l = ahead; l < ahead_end; l += 64) {
            __builtin_prefetch(wp + l, /*rw=*/0, /*locality=*/2);  // prefetcht1
          }
          for (int i = 0; i < rows; i += kGroupTurnRows) {
            kGroupRows[std::min(kGroupTurnRows, rows - i)](wp, g, xq + i * k_, k_, xd + i * groups,
                                                           xneg + i * groups, groups,
                                                           acc + i * kQ8BlockCols);
          }
        }
      } else {
        // The row tiles of each chunk prefetch the next chunk's bytes (past a column
        // block's last chunk, the next block's first groups).
        const int tiles = (rows + kMaxRows - 1) / kMaxRows;
        for (int64_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
          const int64_t g1 = std::min(groups, g0 + kChunkGroups);
          const uint8_t* next = wb + g1 * kQ8GroupBytes;
          const int64_t next_bytes = std::min<int64_t>(kChunkGroups * kQ8GroupBytes, w_end - next);
          for (int i = 0, t = 0; i < rows; i += kMaxRows, ++t) {
            const int mr = std::min(kMaxRows, rows - i);
            kBlockRows[mr](wb, g0, g1, xq + i * k_, k_, xd + i * groups, xneg + i * groups, groups,
                           acc + i * kQ8BlockCols, g0 == 0,
                           L2Prefetch(next, next_bytes, t, tiles, g1 - g0));
          }
        }
      }
      for (int i = 0; i < rows; ++i)
        std::memcpy(y + (i0 + i) * y_stride + n0, acc + i * kQ8BlockCols, cols * sizeof(float));
    }
  });
}

}  // namespace quill::engine::kernels::linear_internal
