// QBlockGemm::RunDecode: the kernel for the few rows of a decode step. The tiled kernel
// (linear_qblock.cc) keeps one int32 accumulator per row and column half, so at m = 1 every
// group is a chain of dependent _mm512_dpbusd_epi32 (8 for a Q4_K group) and the core waits
// on their latency instead of streaming weights. Here each column block is swept once over
// the whole k with every row's float sums in registers, and each group's int32 dot product
// is split over independent accumulators (even and odd k-quads), added at the end: integer
// addition is exact, so the arithmetic of linear_qblock.h, and every bit of y, is unchanged.
// For the 4-bit types the odd quads are used in place (q * 16, masked with 0xF0, no shift)
// and their sum is shifted right by 4 once per group.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/kernels/linear_qblock.h"
#include "engine/kernels/linear_qblock_simd.h"

namespace quill::engine::kernels::linear_internal {
namespace {

using quant::QuantType;

constexpr int kDecodeMR = 4;  // rows per register tile
// The weight stream is prefetched by StreamPrefetch: every line of it, headers included
// (the header is 8 of a super-block's 72 lines per column block for Q4_K and Q4_0), 8 KiB
// ahead, into L2, at every row count. Q4_0 and Q4_1, the cheapest to unpack, went without
// it at 1 row while each of their 32-value blocks had its scales in front of it; with the
// scales of 8 blocks gathered (linear_qblock.h) the prefetch pays for them too: Q4_1 at 1
// row 0.295-0.298 ms with it against 0.317-0.345 without (quill-linear-qblock-bench, Zen 5,
// 2 threads, 2048 x 11264, 3 alternated runs; the old layout without it swung 0.286-0.368).
// Earlier, measured with quill-linear-qblock-bench (2 threads, the three TinyLlama shapes), each
// variant alternated round by round with no software prefetch in one process; time with
// over time without:
// - Intel Xeon (stop 15, T0, group lines only): ~19 GB/s per core without, ~28 with.
// - Zen 5, stops 33-34 (read probe 53-64 GB/s): 8-32 KiB into L2 at 1 row: Q5_K 0.63-0.87,
//   but Q5_0/Q5_1 1.03-1.14 and the 4- and 6-bit types 1.04-1.33; at 2 rows Q5_K 0.64-0.82;
//   at 4 rows 0.50-0.97; at 8-16 rows 0.84-0.91. 4 KiB NTA was worse than T1 throughout;
//   8 and 16 KiB were within a few percent, 32 no better.
// - Zen 5, stop 35, another host (read probe 50-57 GB/s, but these kernels drew 30-40 GB/s
//   from memory without software prefetch): 8 KiB at 1 row: Q4_K 0.62-0.87 and Q6_K
//   0.77-0.94 (12 runs), Q5_0 0.81-0.85, Q5_1 0.74-0.79, Q4_1 0.88-1.05 (2 runs), Q4_0
//   0.95-1.08 (6 runs); at 2 rows Q4_K 0.68-0.75, Q6_K 0.77-0.84, Q4_1 0.84-0.91, Q4_0
//   0.90-0.94. quill-bench tg128, 3 pairs alternated with the old rule (from 3 rows):
//   Q4_K_M 54-56 -> 73-76 t/s, Q6_K 42-43 -> 51-54, the Q4_0 control alike.
// The hosts disagree at 1 row, and the second one's gain is the larger.

// Nibble register R of a group (k-quads 2R and 2R + 1) for both column halves: even quads
// into lo, odd quads into hi (4-bit types: 16x the value).
template <QuantType T, int MR, int R>
QUILL_VNNI inline void DecodeStep(const uint8_t* gp, const __m512i* plane, const int8_t* xq,
                                  int64_t k, __m512i (&lo)[MR][2], __m512i (&hi)[MR][2]) {
  constexpr int kBits = QBlockFormatOf(T).bits;
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i nib = _mm512_loadu_si512(gp + (2 * R + h) * 64);
    __m512i wlo, whi;
    if constexpr (kBits == 4) {
      wlo = _mm512_and_si512(nib, _mm512_set1_epi8(0x0F));
      whi = _mm512_and_si512(nib, _mm512_set1_epi8(static_cast<char>(0xF0)));
    } else {
      wlo = UnpackQuad<kBits, 2 * R>(nib, plane[h]);
      whi = UnpackQuad<kBits, 2 * R + 1>(nib, plane[h]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      int32_t q0, q1;
      std::memcpy(&q0, xq + i * k + 8 * R, 4);
      std::memcpy(&q1, xq + i * k + 8 * R + 4, 4);
      lo[i][h] = _mm512_dpbusd_epi32(lo[i][h], wlo, _mm512_set1_epi32(q0));
      hi[i][h] = _mm512_dpbusd_epi32(hi[i][h], whi, _mm512_set1_epi32(q1));
    }
  }
}

// Group gi (along k) of one column block, at gp with its scales at sc: acc[i][h] += its
// products with MR rows of x.
template <QuantType T, int MR>
__attribute__((always_inline)) QUILL_VNNI inline void DecodeGroup(const uint8_t* gp, int64_t gi,
                                                                  const float* sc,
                                                                  const QBlockXView& x,
                                                                  __m512 (&acc)[MR][2]) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int kRegs = f.nibble_regs();
  const int8_t* xq = x.q + gi * f.group_k;
  __m512i lo[MR][2], hi[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    lo[i][0] = lo[i][1] = GroupSeed<T>(x, i, gi);
    hi[i][0] = hi[i][1] = _mm512_setzero_si512();
  }
  __m512i plane[2];
  LoadPlanes<T>(gp, plane);
  DecodeStep<T, MR, 0>(gp, plane, xq, x.k, lo, hi);
  DecodeStep<T, MR, 1>(gp, plane, xq, x.k, lo, hi);
  if constexpr (kRegs == 4) {
    DecodeStep<T, MR, 2>(gp, plane, xq, x.k, lo, hi);
    DecodeStep<T, MR, 3>(gp, plane, xq, x.k, lo, hi);
  }
  // The split sums back together (exact): the odd quads' 4-bit values were 16x.
  __m512i s[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      s[i][h] = f.bits == 4 ? _mm512_add_epi32(lo[i][h], _mm512_srai_epi32(hi[i][h], 4))
                            : _mm512_add_epi32(lo[i][h], hi[i][h]);
    }
  }
  ScaleGroup<T, MR>(s, gi, sc, x, acc);
}

// MR rows of x against one column block, all super-blocks; writes `cols` outputs per row.
template <QuantType T, int MR>
QUILL_VNNI void DecodeTile(const uint8_t* cb, int64_t sbs, const QBlockXView& x, float* y,
                           int64_t y_stride, int cols, bool prefetch) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int kVecs = f.has_min ? 2 : 1;
  alignas(64) float scales[f.groups() * kVecs * 32];
  __m512 acc[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  StreamPrefetch stream = prefetch ? StreamPrefetch(cb) : StreamPrefetch();
  // Every super-block but a 32-value type's short last one: a constant group count.
  const int64_t full = x.k / f.sb_k;
  for (int64_t sb = 0; sb < full; ++sb) {
    DecodeScales<T>(cb, sb, sb + 1, x.k, scales);
    const uint8_t* groups = cb + sb * f.sb_bytes() + f.header;
    for (int g = 0; g < f.groups(); ++g) {
      const uint8_t* gp = groups + g * f.group_bytes();
      stream.Through(gp + f.group_bytes());
      DecodeGroup<T, MR>(gp, sb * f.groups() + g, scales + g * kVecs * 32, x, acc);
    }
  }
  if (f.short_tail() && full < sbs) {
    DecodeScales<T>(cb, full, full + 1, x.k, scales);
    const int n = GroupsIn(f, x.k, full);
    const uint8_t* groups = cb + full * f.sb_bytes() + f.header_bytes(n);
    for (int g = 0; g < n; ++g) {
      const uint8_t* gp = groups + g * f.group_bytes();
      stream.Through(gp + f.group_bytes());
      DecodeGroup<T, MR>(gp, full * f.groups() + g, scales + g * kVecs * 32, x, acc);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>((1u << std::min(cols, 16)) - 1);
  const __mmask16 m1 = static_cast<__mmask16>((1u << std::max(cols - 16, 0)) - 1);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(y + i * y_stride, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * y_stride + 16, m1, acc[i][1]);
  }
}

template <QuantType T>
QUILL_VNNI void DecodeColumn(const uint8_t* cb, int64_t sbs, const QBlockXView& x, int rows,
                             float* y, int64_t y_stride, int cols, int64_t /*next_bytes*/) {
  for (int i = 0; i < rows; i += kDecodeMR) {
    const QBlockXView xi = x.AtRow(i);
    float* yi = y + i * y_stride;
    // Only the first tile reads the block from memory; the later ones find it in L2 (their
    // prefetches left out: 0.87-1.03x the time at 5-16 rows, median 0.99).
    const bool stream = i == 0;
    switch (std::min(kDecodeMR, rows - i)) {
      case 1:
        DecodeTile<T, 1>(cb, sbs, xi, yi, y_stride, cols, stream);
        break;
      case 2:
        DecodeTile<T, 2>(cb, sbs, xi, yi, y_stride, cols, stream);
        break;
      case 3:
        DecodeTile<T, 3>(cb, sbs, xi, yi, y_stride, cols, stream);
        break;
      default:
        DecodeTile<T, 4>(cb, sbs, xi, yi, y_stride, cols, stream);
        break;
    }
  }
}

}  // namespace

QBlockColumnFn QBlockDecodeColumnFor(QuantType type) {
  return ForQBlockType(type,
                       [](auto t) -> QBlockColumnFn { return DecodeColumn<decltype(t)::value>; });
}

}  // namespace quill::engine::kernels::linear_internal
