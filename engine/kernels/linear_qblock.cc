// QBlockGemm::Run: x quantized to int8 per 32 values, then per column block the stored 4/5/6-bit
// weights are unpacked in registers and multiplied with _mm512_dpbusd_epi32 (weights are the
// unsigned operand: their stored values are already non-negative). The arithmetic is the
// one written in linear_qblock.h, in that order, so reference::QBlockLinear matches it bit
// for bit.

#include "engine/kernels/linear_qblock.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/base/check.h"
#include "engine/kernels/linear_qblock_simd.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels::linear_internal {
namespace {

using quant::QuantType;

constexpr int kMR = 4;             // x rows per register tile
constexpr int64_t kChunkK = 1024;  // k per pass of scale decoding (scales stay in L1)
// Decoded scale floats for one chunk: (k / group) groups x (1 or 2 vectors) x 32 columns.
constexpr int kMaxChunkScales = 2048;

// Nibble register R of a group (k-quads 2R and 2R + 1) for both column halves, against MR
// rows of x: s[i][h] += q . xq per column.
template <QuantType T, int MR, int R>
QUILL_VNNI inline void Step(const uint8_t* gp, const __m512i* plane, const int8_t* xq, int64_t k,
                            __m512i (&s)[MR][2]) {
  constexpr int kBits = QBlockFormatOf(T).bits;
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i nib = _mm512_loadu_si512(gp + (2 * R + h) * 64);
    const __m512i lo = UnpackQuad<kBits, 2 * R>(nib, plane[h]);
    const __m512i hi = UnpackQuad<kBits, 2 * R + 1>(nib, plane[h]);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      int32_t q0, q1;
      std::memcpy(&q0, xq + i * k + 8 * R, 4);
      std::memcpy(&q1, xq + i * k + 8 * R + 4, 4);
      s[i][h] = _mm512_dpbusd_epi32(s[i][h], lo, _mm512_set1_epi32(q0));
      s[i][h] = _mm512_dpbusd_epi32(s[i][h], hi, _mm512_set1_epi32(q1));
    }
  }
}

// acc_v[i][h] += MR rows of x against group gi (along k) of one column block, at gp with its
// scales at sc.
template <QuantType T, int MR>
__attribute__((always_inline)) QUILL_VNNI inline void TileGroup(const uint8_t* gp, int64_t gi,
                                                                const float* sc,
                                                                const QBlockXView& x,
                                                                __m512 (&acc_v)[MR][2]) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int kRegs = f.nibble_regs();
  const int8_t* xq = x.q + gi * f.group_k;
  __m512i s[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = GroupSeed<T>(x, i, gi);
  __m512i plane[2];
  LoadPlanes<T>(gp, plane);
  Step<T, MR, 0>(gp, plane, xq, x.k, s);
  Step<T, MR, 1>(gp, plane, xq, x.k, s);
  if constexpr (kRegs == 4) {
    Step<T, MR, 2>(gp, plane, xq, x.k, s);
    Step<T, MR, 3>(gp, plane, xq, x.k, s);
  }
  ScaleGroup<T, MR>(s, gi, sc, x, acc_v);
}

// acc[MR][32] (+)= MR rows of x against super-blocks [sb0, sb1) of one column block, one
// prefetch step per group.
template <QuantType T, int MR>
QUILL_VNNI void Tile(const uint8_t* cb, int64_t sb0, int64_t sb1, const float* scales,
                     const QBlockXView& x, float* acc, bool init, L2Prefetch prefetch) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int kVecs = f.has_min ? 2 : 1;
  __m512 acc_v[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
      acc_v[i][h] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * 32 + 16 * h);
  for (int64_t sb = sb0; sb < sb1; ++sb) {
    const float* sc = scales + (sb - sb0) * f.groups() * kVecs * 32;
    const int n = f.short_tail() ? GroupsIn(f, x.k, sb) : f.groups();
    if (n == f.groups()) {  // a constant count: a full super-block
      const uint8_t* groups = cb + sb * f.sb_bytes() + f.header;
      for (int g = 0; g < f.groups(); ++g) {
        prefetch.Step();
        TileGroup<T, MR>(groups + g * f.group_bytes(), sb * f.groups() + g, sc + g * kVecs * 32, x,
                         acc_v);
      }
    } else {  // a 32-value type's short last super-block
      const uint8_t* groups = cb + sb * f.sb_bytes() + f.header_bytes(n);
      for (int g = 0; g < n; ++g) {
        prefetch.Step();
        TileGroup<T, MR>(groups + g * f.group_bytes(), sb * f.groups() + g, sc + g * kVecs * 32, x,
                         acc_v);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) _mm512_storeu_ps(acc + i * 32 + 16 * h, acc_v[i][h]);
}

// Rows [0, rows) of x against one column block; writes `cols` outputs per row. Rows go in
// chunks of kQBlockChunkRows (accumulators on the stack) while the block's weights, a few
// tens of KiB, stay in L1/L2: they are read from memory once per Run, not once per chunk.
// In the first chunk of rows, the tiles prefetch the next k chunk's bytes (past the last,
// the next column block's first super-blocks; L2Prefetch says why).
template <QuantType T>
QUILL_VNNI void ColumnBlock(const uint8_t* cb, int64_t sbs, const QBlockXView& x, int rows,
                            float* y, int64_t y_stride, int cols, int64_t next_bytes) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int64_t kChunkSbs = kChunkK / f.sb_k;
  static_assert(kChunkSbs * f.groups() * (f.has_min ? 2 : 1) * 32 <= kMaxChunkScales);
  alignas(64) float scales[kMaxChunkScales];
  alignas(64) float acc[kQBlockChunkRows * kQBlockCols];
  const int64_t block_bytes = ColumnBlockBytes(f, x.k);
  const int64_t all_groups = x.k / f.group_k;
  for (int r0 = 0; r0 < rows; r0 += kQBlockChunkRows) {
    const int chunk = std::min(kQBlockChunkRows, rows - r0);
    for (int64_t sb0 = 0; sb0 < sbs; sb0 += kChunkSbs) {
      const int64_t sb1 = std::min(sbs, sb0 + kChunkSbs);
      DecodeScales<T>(cb, sb0, sb1, x.k, scales);
      const int64_t next_at =
          std::min(sb1 * f.sb_bytes(), block_bytes);  // a short tail ends sooner
      const uint8_t* next = cb + next_at;
      const int64_t after = block_bytes - next_at + next_bytes;  // readable past sb1
      const int64_t fetch = r0 > 0 ? 0 : std::min(kChunkSbs * f.sb_bytes(), after);
      const int64_t steps = std::min(sb1 * f.groups(), all_groups) - sb0 * f.groups();
      const int tiles = (chunk + kMR - 1) / kMR;
      for (int i = 0, t = 0; i < chunk; i += kMR, ++t) {
        const QBlockXView xi = x.AtRow(r0 + i);
        float* a = acc + i * kQBlockCols;
        const L2Prefetch prefetch(next, fetch, t, tiles, steps);
        switch (std::min(kMR, chunk - i)) {
          case 1:
            Tile<T, 1>(cb, sb0, sb1, scales, xi, a, sb0 == 0, prefetch);
            break;
          case 2:
            Tile<T, 2>(cb, sb0, sb1, scales, xi, a, sb0 == 0, prefetch);
            break;
          case 3:
            Tile<T, 3>(cb, sb0, sb1, scales, xi, a, sb0 == 0, prefetch);
            break;
          default:
            Tile<T, 4>(cb, sb0, sb1, scales, xi, a, sb0 == 0, prefetch);
            break;
        }
      }
    }
    for (int i = 0; i < chunk; ++i)
      std::memcpy(y + (r0 + i) * y_stride, acc + i * kQBlockCols, cols * sizeof(float));
  }
}

QBlockColumnFn ColumnBlockFor(QuantType type) {
  return ForQBlockType(type,
                       [](auto t) -> QBlockColumnFn { return ColumnBlock<decltype(t)::value>; });
}

// One x row -> int8 per 32 values (d = max|x| / 127, round to nearest even, |q| <= 127) and
// the sums of q per 16 values.
QUILL_VNNI void QuantizeRow(const float* x, int64_t k, int8_t* xq, float* d32, int32_t* s16) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 lo = _mm512_loadu_ps(x + 32 * b);
    const __m512 hi = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m512i lim = _mm512_set1_epi32(127), neg = _mm512_set1_epi32(-127);
    const __m512i qlo =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(lo, id)), neg), lim);
    const __m512i qhi =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(hi, id)), neg), lim);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + 32 * b), _mm512_cvtepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + 32 * b + 16), _mm512_cvtepi32_epi8(qhi));
    d32[b] = amax / 127.0f;
    s16[2 * b] = _mm512_reduce_add_epi32(qlo);
    s16[2 * b + 1] = _mm512_reduce_add_epi32(qhi);
  }
}

}  // namespace

void QBlockGemm::PrepareX(const float* x, int rows) {
  const int64_t blocks32 = k_ / 32, blocks16 = k_ / 16;
  x_ = static_cast<uint8_t*>(scratch_->Get(LinearScratch::kXq));
  int8_t* const xq = reinterpret_cast<int8_t*>(x_);
  float* const xd32 = reinterpret_cast<float*>(x_ + xd32_offset_);
  int32_t* const xs16 = reinterpret_cast<int32_t*>(x_ + xs16_offset_);
  ParallelFor(rows, rows * k_ >= (1 << 16), [&](int64_t i) {
    float* const d32 = xd32 + i * blocks32;
    int32_t* const s16 = xs16 + i * blocks16;
    QuantizeRow(x + i * k_, k_, xq + i * k_, d32, s16);
    // Per type: the x scale, sum and offset seed of each weight group of row i.
    for (size_t slot = 0; slot < x_types_.size(); ++slot) {
      const QBlockFormat f = QBlockFormatOf(x_types_[slot]);
      const int64_t groups = k_ / f.group_k;
      float* const xg_d = reinterpret_cast<float*>(x_ + xg_[slot].d) + i * groups;
      float* const xg_sum = reinterpret_cast<float*>(x_ + xg_[slot].sum) + i * groups;
      int32_t* const xg_seed = reinterpret_cast<int32_t*>(x_ + xg_[slot].seed) + i * groups;
      for (int64_t g = 0; g < groups; ++g) {
        const bool g16 = f.group_k == 16;
        const float d = g16 ? d32[g / 2] : d32[g];
        const int32_t sum = g16 ? s16[g] : s16[2 * g] + s16[2 * g + 1];
        xg_d[g] = d;
        if (f.has_min) xg_sum[g] = d * static_cast<float>(sum);
        if (f.offset != 0) xg_seed[g] = -f.offset * sum;
      }
    }
  });
}

QBlockXView QBlockGemm::XViewOf(const Segment& s) const {
  const QBlockFormat f = QBlockFormatOf(s.type);
  const XGroups& xg = xg_[s.x_slot];
  return QBlockXView{reinterpret_cast<const int8_t*>(x_),
                     reinterpret_cast<const float*>(x_ + xg.d),
                     f.has_min ? reinterpret_cast<const float*>(x_ + xg.sum) : nullptr,
                     f.offset != 0 ? reinterpret_cast<const int32_t*>(x_ + xg.seed) : nullptr,
                     k_,
                     k_ / f.group_k};
}

void QBlockGemm::Run(const float* x, int m, float* y, int64_t y_stride) {
  if (m <= kQBlockDecodeMaxRows) {
    RunDecode(x, m, y, y_stride);
  } else {
    RunTiled(x, m, y, y_stride);
  }
}

// The decode and the tiled kernels differ only in the per-column-block function.
void QBlockGemm::RunColumnBlocks(bool decode, int rows, float* y, int64_t y_stride) {
  const int64_t work = static_cast<int64_t>(blocks_.size());
  const bool parallel = work > 1 && static_cast<int64_t>(rows) * n_ * k_ >= (1 << 16);
  ParallelFor(work, parallel, [&](int64_t w) {
    const Segment& s = segments_[blocks_[w].first];
    const int64_t cb = blocks_[w].second;
    const QBlockFormat f = QBlockFormatOf(s.type);
    const int64_t block_bytes = ColumnBlockBytes(f, k_);
    const int64_t col0 = s.first_col + cb * kQBlockCols;
    const int cols = static_cast<int>(std::min<int64_t>(kQBlockCols, s.first_col + s.cols - col0));
    const QBlockColumnFn column = decode ? QBlockDecodeColumnFor(s.type) : ColumnBlockFor(s.type);
    const int64_t next_bytes = cb + 1 < s.col_blocks ? block_bytes : 0;
    column(packed_.data() + s.packed_offset + cb * block_bytes, SuperBlocks(f, k_), XViewOf(s),
           rows, y + col0, y_stride, cols, next_bytes);
  });
}

void QBlockGemm::RunDecode(const float* x, int m, float* y, int64_t y_stride) {
  QUILL_DCHECK(m >= 1 && m <= std::min(max_rows_, kQBlockDecodeMaxRows));
  PrepareX(x, m);
  RunColumnBlocks(/*decode=*/true, m, y, y_stride);
}

void QBlockGemm::RunTiled(const float* x, int m, float* y, int64_t y_stride) {
  QUILL_DCHECK(m >= 1 && m <= max_rows_);
  // Every row quantized first, then one parallel loop over column blocks (each runs all
  // rows): two parallel regions per Run, whatever m.
  PrepareX(x, m);
  RunColumnBlocks(/*decode=*/false, m, y, y_stride);
}

}  // namespace quill::engine::kernels::linear_internal
