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
// With 3 rows or more (2 for Q5_0 and Q5_1, 1 for Q5_K) the weight stream is prefetched
// by StreamPrefetch: every line of it, headers included (the Q4_K header is 8 of a
// super-block's 72 lines per column block, Q4_0's 1 of 9), 8 KiB ahead, into L2. With
// fewer rows the hardware prefetchers alone keep up with the arithmetic and the software
// prefetches only compete with them, as in Q8Gemv's one-row sweep.
// Measured with quill-linear-qblock-bench (2 threads, the three TinyLlama shapes):
// - Intel Xeon (stop 15, T0, group lines only): hardware prefetcher alone ~19 GB/s per
//   core, ~28 with this (1024: ~23; 8192 and 16384 no better; T1 worse).
// - AMD EPYC Zen 5 at 30-37 GB/s of read bandwidth: covering the header lines made the
//   matmuls 5-16% faster; quill-bench tg64 Q4_K_M median 64.5 -> 74.6 t/s; NTA ahead of T0
//   end to end.
// - Zen 5 at 53-64 GB/s (2026-12-05), every variant alternated round by round with no
//   software prefetch in one process; time with over time without:
//   - 4 KiB NTA: 1.02-1.20 at 1-2 rows (Q4_K, Q6_K), so off there, and 0.90-0.98 at 4-16;
//     0.72-0.98 for the 5-bit types at 2 rows; 0.86-1.11 for Q5_K at 1 row.
//   - 8-32 KiB T1 (stop 34): Q5_K at 1 row 0.63-0.87 (NTA 0.89-0.97), at 2 rows 0.64-0.82
//     (NTA 0.79-0.93); at 4 rows 0.50-0.71 for the 5-bit types and 0.76-0.97 for the
//     others (NTA 0.58-0.75 and 0.85-0.96); at 8-16 rows 0.84-0.91 (NTA 0.93-0.98).
//     Q5_0 and Q5_1 at 1 row 1.03-1.14, the 4- and 6-bit types at 1 row 1.04-1.33. 8 and
//     16 KiB were within a few percent of each other, 32 no better.
//   Q5_K is the one type whose 1-row sweep outruns the hardware prefetchers' reach: its
//   super-block scales come on top of the 5-bit unpack.
constexpr int StreamPrefetchFromRows(QuantType type) {
  if (type == QuantType::kQ5_K) return 1;
  return QBlockFormatOf(type).bits == 5 ? 2 : 3;
}

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

// MR rows of x against one column block, all super-blocks; writes `cols` outputs per row.
template <QuantType T, int MR>
QUILL_VNNI void DecodeTile(const uint8_t* cb, int64_t sbs, const QBlockXView& x, float* y,
                           int64_t y_stride, int cols, bool prefetch) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int kVecs = f.has_min ? 2 : 1;
  constexpr int kRegs = f.nibble_regs();
  alignas(64) float scales[f.groups() * kVecs * 32];
  __m512 acc[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  StreamPrefetch stream = prefetch ? StreamPrefetch(cb) : StreamPrefetch();
  for (int64_t sb = 0; sb < sbs; ++sb) {
    DecodeScales<T>(cb, sb, sb + 1, scales);
    const uint8_t* groups = cb + sb * f.sb_bytes() + f.header;
    const float* sc = scales;
    for (int g = 0; g < f.groups(); ++g, sc += kVecs * 32) {
      const uint8_t* gp = groups + g * f.group_bytes();
      stream.Through(gp + f.group_bytes());
      const int64_t gi = sb * f.groups() + g;  // group index along k
      const int8_t* xq = x.q + gi * f.group_k;
      __m512i lo[MR][2], hi[MR][2];
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        if constexpr (f.offset != 0) {
          lo[i][0] = lo[i][1] = _mm512_set1_epi32(x.seed[i * x.groups + gi]);
        } else {
          lo[i][0] = lo[i][1] = _mm512_setzero_si512();
        }
        hi[i][0] = hi[i][1] = _mm512_setzero_si512();
      }
      __m512i plane[2];
      if constexpr (f.bits > 4) {
        plane[0] = _mm512_loadu_si512(gp + (2 * kRegs + 0) * 64);
        plane[1] = _mm512_loadu_si512(gp + (2 * kRegs + 1) * 64);
      } else {
        plane[0] = plane[1] = _mm512_setzero_si512();
      }
      DecodeStep<T, MR, 0>(gp, plane, xq, x.k, lo, hi);
      DecodeStep<T, MR, 1>(gp, plane, xq, x.k, lo, hi);
      if constexpr (kRegs == 4) {
        DecodeStep<T, MR, 2>(gp, plane, xq, x.k, lo, hi);
        DecodeStep<T, MR, 3>(gp, plane, xq, x.k, lo, hi);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m512 dx = _mm512_set1_ps(x.d[i * x.groups + gi]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i s = f.bits == 4 ? _mm512_add_epi32(lo[i][h], _mm512_srai_epi32(hi[i][h], 4))
                                        : _mm512_add_epi32(lo[i][h], hi[i][h]);
          const __m512 ws = _mm512_load_ps(sc + 16 * h);
          acc[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ws, dx), acc[i][h]);
          if constexpr (f.has_min) {
            acc[i][h] = _mm512_fmadd_ps(_mm512_load_ps(sc + 32 + 16 * h),
                                        _mm512_set1_ps(x.sum[i * x.groups + gi]), acc[i][h]);
          }
        }
      }
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
  const bool prefetch = rows >= StreamPrefetchFromRows(T);
  for (int i = 0; i < rows; i += kDecodeMR) {
    const QBlockXView xi = x.AtRow(i);
    float* yi = y + i * y_stride;
    // Only the first tile reads the block from memory; the later ones find it in L2 (their
    // prefetches left out: 0.87-1.03x the time at 5-16 rows, median 0.99).
    const bool stream = prefetch && i == 0;
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
