#pragma once

// AVX512-VNNI pieces shared by QBlockGemm's two kernels (linear_qblock.cc for many rows,
// linear_qblock_decode.cc for the few rows of a decode step): the x-side view, nibble
// unpacking and scale decoding of the packed layout in linear_qblock.h. Include only from
// files compiled for x86-64.

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "engine/kernels/linear_qblock.h"

// GCC 12's AVX-512 reduce/convert intrinsics start from _mm*_undefined_*() and trip
// -Wmaybe-uninitialized (GCC bug 105593); the values are fully defined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define QUILL_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace quill::engine::kernels::linear_internal {

// x-side arrays of one row chunk for one weight type (row strides in the comments).
struct QBlockXView {
  const int8_t* q;      // [rows x k]
  const float* d;       // [rows x groups]
  const float* sum;     // [rows x groups] or null
  const int32_t* seed;  // [rows x groups] or null
  int64_t k, groups;

  // The view of rows [row, rows) of the same x.
  QBlockXView AtRow(int64_t row) const {
    QBlockXView v = *this;
    v.q += row * k;
    v.d += row * groups;
    if (v.sum != nullptr) v.sum += row * groups;
    if (v.seed != nullptr) v.seed += row * groups;
    return v;
  }
};

// Moves bits [pos, pos + width) of every byte to bit 4 (16-bit shifts: the bits that cross
// a byte boundary are masked off by the caller).
template <int kPos>
QUILL_VNNI inline __m512i HighBitsToBit4(__m512i v) {
  if constexpr (kPos < 4) return _mm512_slli_epi16(v, 4 - kPos);
  if constexpr (kPos > 4) return _mm512_srli_epi16(v, kPos - 4);
  return v;
}

// The 16 columns x 4 k bytes of k-quad `kQuad` of a group, given its nibble register (low
// nibbles: even quads, high: odd) and its high-bit plane.
template <int kBits, int kQuad>
QUILL_VNNI inline __m512i UnpackQuad(__m512i nibbles, __m512i plane) {
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  __m512i q = kQuad % 2 == 0 ? _mm512_and_si512(nibbles, m0f)
                             : _mm512_and_si512(_mm512_srli_epi16(nibbles, 4), m0f);
  if constexpr (kBits == 5) {
    // q | (bit kQuad of the plane, moved to bit 4)
    q = _mm512_ternarylogic_epi32(q, HighBitsToBit4<kQuad>(plane), _mm512_set1_epi8(0x10), 0xF8);
  } else if constexpr (kBits == 6) {
    q = _mm512_ternarylogic_epi32(q, HighBitsToBit4<2 * kQuad>(plane), _mm512_set1_epi8(0x30),
                                  0xF8);
  }
  return q;
}

// out[0, 32) = the 32 fp16 values at in, widened.
QUILL_VNNI inline void WidenFp16x32(const uint8_t* in, float* out) {
  _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))));
  _mm512_storeu_ps(out + 16,
                   _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32))));
}

// Scale (and min) vectors of super-blocks [sb0, sb1) of one column block (rows of k
// values), per super-block and group: ws[32] then (min types) wm[32].
template <quant::QuantType T>
QUILL_VNNI inline void DecodeScales(const uint8_t* cb, int64_t sb0, int64_t sb1, int64_t k,
                                    float* out) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  constexpr int kVecs = f.has_min ? 2 : 1;
  for (int64_t sb = sb0; sb < sb1; ++sb) {
    const uint8_t* h = cb + sb * f.sb_bytes();
    float* o = out + (sb - sb0) * f.groups() * kVecs * 32;
    if constexpr (f.short_tail()) {
      // Each group's fp16 d[32] (and m[32]) as they are: the 32-value types' scales. A full
      // super-block's count is a constant (the loop unrolls).
      const int vecs = GroupsIn(f, k, sb) * kVecs;
      if (vecs == f.groups() * kVecs) {
        for (int v = 0; v < f.groups() * kVecs; ++v) WidenFp16x32(h + 64 * v, o + 32 * v);
      } else {
        for (int v = 0; v < vecs; ++v) WidenFp16x32(h + 64 * v, o + 32 * v);
      }
      continue;
    }
    __m512 d[2], m[2];
    for (int half = 0; half < 2; ++half) {
      d[half] =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 32 * half)));
      if constexpr (f.has_min) {
        m[half] = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 64 + 32 * half)));
        // The k-quants subtract dmin * m_j: keep -dmin (a sign flip, exact).
        m[half] = _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(m[half]), _mm512_set1_epi32(INT32_MIN)));
      }
    }
    if constexpr (T == quant::QuantType::kQ4_K || T == quant::QuantType::kQ5_K) {
      // 12 planes of 32 columns' packed 6-bit (scale, min) bytes.
      __m256i p[12];
      for (int i = 0; i < 12; ++i)
        p[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 128 + 32 * i));
      const __m256i m3f = _mm256_set1_epi8(0x3F), m0f = _mm256_set1_epi8(0x0F),
                    m30 = _mm256_set1_epi8(0x30);
      for (int j = 0; j < 8; ++j) {
        __m256i sc, mn;
        if (j < 4) {
          sc = _mm256_and_si256(p[j], m3f);
          mn = _mm256_and_si256(p[j + 4], m3f);
        } else {
          // Low 4 bits from byte j + 4, top 2 bits from the top of bytes j - 4 / j.
          sc = _mm256_or_si256(_mm256_and_si256(p[j + 4], m0f),
                               _mm256_and_si256(_mm256_srli_epi16(p[j - 4], 2), m30));
          mn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p[j + 4], 4), m0f),
                               _mm256_and_si256(_mm256_srli_epi16(p[j], 2), m30));
        }
        for (int half = 0; half < 2; ++half) {
          const __m128i s8 =
              half == 0 ? _mm256_castsi256_si128(sc) : _mm256_extracti128_si256(sc, 1);
          const __m128i m8 =
              half == 0 ? _mm256_castsi256_si128(mn) : _mm256_extracti128_si256(mn, 1);
          const __m512 s = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(s8));
          const __m512 mm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(m8));
          _mm512_storeu_ps(o + (j * 2 + 0) * 32 + 16 * half, _mm512_mul_ps(d[half], s));
          _mm512_storeu_ps(o + (j * 2 + 1) * 32 + 16 * half, _mm512_mul_ps(m[half], mm));
        }
      }
    } else if constexpr (T == quant::QuantType::kQ6_K) {
      for (int g = 0; g < 16; ++g)
        for (int half = 0; half < 2; ++half) {
          const __m128i s8 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 64 + 32 * g + 16 * half));
          _mm512_storeu_ps(o + g * 32 + 16 * half,
                           _mm512_mul_ps(d[half], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8))));
        }
    }
  }
}

// What a row's int32 dot product with group gi starts from: -offset * sum(xq) for the
// offset types (Q4_0, Q5_0, Q6_K), else 0.
template <quant::QuantType T>
QUILL_VNNI inline __m512i GroupSeed(const QBlockXView& x, int i, int64_t gi) {
  if constexpr (QBlockFormatOf(T).offset != 0) return _mm512_set1_epi32(x.seed[i * x.groups + gi]);
  return _mm512_setzero_si512();
}

// A 5/6-bit group's two high-bit planes (one per column half) at gp; zeros for 4 bits.
template <quant::QuantType T>
QUILL_VNNI inline void LoadPlanes(const uint8_t* gp, __m512i (&plane)[2]) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
  if constexpr (f.bits > 4) {
    plane[0] = _mm512_loadu_si512(gp + (2 * f.nibble_regs() + 0) * 64);
    plane[1] = _mm512_loadu_si512(gp + (2 * f.nibble_regs() + 1) * 64);
  } else {
    plane[0] = plane[1] = _mm512_setzero_si512();
  }
}

// acc[i][h] += group gi's int32 dot products s[i][h] of MR rows of x, scaled (and its min
// term added) as the arithmetic in linear_qblock.h says; sc: the group's scale vectors.
template <quant::QuantType T, int MR>
__attribute__((always_inline)) QUILL_VNNI inline void ScaleGroup(const __m512i (&s)[MR][2],
                                                                 int64_t gi, const float* sc,
                                                                 const QBlockXView& x,
                                                                 __m512 (&acc)[MR][2]) {
  constexpr QBlockFormat f = QBlockFormatOf(T);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m512 dx = _mm512_set1_ps(x.d[i * x.groups + gi]);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512 ws = _mm512_loadu_ps(sc + 16 * h);
      acc[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][h]), _mm512_mul_ps(ws, dx), acc[i][h]);
      if constexpr (f.has_min) {
        acc[i][h] = _mm512_fmadd_ps(_mm512_loadu_ps(sc + 32 + 16 * h),
                                    _mm512_set1_ps(x.sum[i * x.groups + gi]), acc[i][h]);
      }
    }
  }
}

// One column block (`cols` <= 32 real outputs) of super-blocks [0, sbs) against `rows` rows
// of x, y[i * y_stride + c]; the decode kernel of linear_qblock_decode.cc. `next_bytes`:
// how many bytes right after the block may be prefetched (the next column block of the
// same segment; 0 for the last one).
using QBlockColumnFn = void (*)(const uint8_t* cb, int64_t sbs, const QBlockXView& x, int rows,
                                float* y, int64_t y_stride, int cols, int64_t next_bytes);
QBlockColumnFn QBlockDecodeColumnFor(quant::QuantType type);

// The instance of a per-type kernel template for `type`, or null for a type QBlockGemm does
// not serve: pick(std::integral_constant<QuantType, T>) returns the instance for T.
template <typename Pick>
QBlockColumnFn ForQBlockType(quant::QuantType type, Pick pick) {
  using quant::QuantType;
  switch (type) {
    case QuantType::kQ4_0:
      return pick(std::integral_constant<QuantType, QuantType::kQ4_0>{});
    case QuantType::kQ4_1:
      return pick(std::integral_constant<QuantType, QuantType::kQ4_1>{});
    case QuantType::kQ5_0:
      return pick(std::integral_constant<QuantType, QuantType::kQ5_0>{});
    case QuantType::kQ5_1:
      return pick(std::integral_constant<QuantType, QuantType::kQ5_1>{});
    case QuantType::kQ4_K:
      return pick(std::integral_constant<QuantType, QuantType::kQ4_K>{});
    case QuantType::kQ5_K:
      return pick(std::integral_constant<QuantType, QuantType::kQ5_K>{});
    case QuantType::kQ6_K:
      return pick(std::integral_constant<QuantType, QuantType::kQ6_K>{});
    default:
      return nullptr;
  }
}

}  // namespace quill::engine::kernels::linear_internal
