#pragma once

// Internal to engine/kernels (not a public contract): AVX-512 helpers shared by the
// element-wise and attention kernels. Everything here is compiled for AVX-512 by target
// attribute, so it may only run when UseAvx512() says so.

#include <immintrin.h>

#include <atomic>
#include <cstdint>

// GCC 12 reports the AVX-512 intrinsics' internal _mm512_undefined_ps() as uninitialized
// once they inline into our code (a known false positive); silence it for kernel files.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "engine/base/cpu_features.h"

// The ISA set gated by HasAvx512Bf16(); callers and callees share one target string so the
// helpers inline.
#define QUILL_AVX512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni")))

namespace quill::engine::kernels::internal {

// Tests set this to run the portable paths on an AVX-512 machine (QUILL_DISABLE_AVX512=1
// does the same for a whole process).
inline std::atomic<bool> force_portable_for_testing{false};

inline bool UseAvx512() {
  return HasAvx512Bf16() && !force_portable_for_testing.load(std::memory_order_relaxed);
}

// Lanes [0, n) set: none for n <= 0, all 16 for n >= 16. Callers pass "keys left" counts
// that go negative past the end of a tile, and a shift by a negative amount is undefined.
inline __mmask16 TailMask(int n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// exp(x) for 16 floats, about 1 ulp over the float range: x = n*ln2 + r with |r| <= ln2/2,
// exp(r) by its degree-7 Taylor polynomial (truncation < 1e-8 relative), times 2^n via
// scalef, which also handles overflow (inf) and underflow (0). NaN stays NaN. Every
// multiply-add is an explicit FMA so the result never depends on compiler contraction.
QUILL_AVX512_TARGET inline __m512 Exp512(__m512 x) {
  // max/min return their second operand when either is NaN: NaN passes through.
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so n*ln2_hi is exact (Cody-Waite).
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Sum of 16 lanes with a fixed tree: ((lo256 + hi256) folded to 128, 64, 32).
QUILL_AVX512_TARGET inline float ReduceAdd512(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  const __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
  return _mm_cvtss_f32(d);
}

// Eight horizontal reductions at once, out[j] = the lanes of v[j] combined by `op` (an
// elementwise add or max) over ReduceAdd512's tree: lane i with i + 8, then with i + 4,
// i + 2, i + 1, in that order. The vectors are transposed as they fold (23 instructions
// for eight results, instead of eight dependent chains of seven), so for add each out[j]
// has ReduceAdd512(v[j])'s bits.
template <typename Op>
QUILL_AVX512_TARGET inline void Reduce512x8(const __m512 (&v)[8], Op op, float (&out)[8]) {
  // half[i]: v[2i]'s lanes l + (l + 8), l < 8, then v[2i + 1]'s.
  __m512 half[4];
  for (int i = 0; i < 4; ++i) {
    half[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                 _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  // 128-bit quarter q of quarter_lo: v[q]'s 8 lanes folded to 4 (l + (l + 4)); of
  // quarter_hi: v[4 + q]'s.
  const __m512 quarter_lo = op(_mm512_shuffle_f32x4(half[0], half[1], 0x88),
                               _mm512_shuffle_f32x4(half[0], half[1], 0xDD));
  const __m512 quarter_hi = op(_mm512_shuffle_f32x4(half[2], half[3], 0x88),
                               _mm512_shuffle_f32x4(half[2], half[3], 0xDD));
  // Pairs: quarter q = [v[q] lanes 0 + 2, 1 + 3, v[4 + q] lanes 0 + 2, 1 + 3].
  const __m512 pairs = op(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(quarter_lo),
                                                              _mm512_castps_pd(quarter_hi))),
                          _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(quarter_lo),
                                                              _mm512_castps_pd(quarter_hi))));
  // Lane 4q: v[q]'s result; lane 4q + 2: v[4 + q]'s.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, op(pairs, _mm512_movehdup_ps(pairs)));
  for (int q = 0; q < 4; ++q) {
    out[q] = lanes[4 * q];
    out[4 + q] = lanes[4 * q + 2];
  }
}

struct AddPs {
  QUILL_AVX512_TARGET __m512 operator()(__m512 a, __m512 b) const { return _mm512_add_ps(a, b); }
};
struct MaxPs {
  QUILL_AVX512_TARGET __m512 operator()(__m512 a, __m512 b) const { return _mm512_max_ps(a, b); }
};

QUILL_AVX512_TARGET inline void ReduceAdd512x8(const __m512 (&v)[8], float (&out)[8]) {
  Reduce512x8(v, AddPs(), out);
}

QUILL_AVX512_TARGET inline void ReduceMax512x8(const __m512 (&v)[8], float (&out)[8]) {
  Reduce512x8(v, MaxPs(), out);
}

// tanh(x) for 16 floats, within a few ulp: an odd Taylor polynomial through x^9 below
// |x| = 0.25 (where 1 - 2 / (e^2|x| + 1) would cancel; the next term is < 1e-8 relative),
// else 1 - 2 / (exp(2|x|) + 1), with the sign restored. Saturates to +-1; NaN stays NaN.
QUILL_AVX512_TARGET inline __m512 Tanh512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 e = Exp512(_mm512_add_ps(ax, ax));
  const __m512 large =
      _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  const __m512 x2 = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(62.0f / 2835.0f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), ax, ax);
  const __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.25f), _CMP_LT_OQ);
  const __m512 magnitude = _mm512_mask_blend_ps(is_small, large, small);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(magnitude), sign));
}

}  // namespace quill::engine::kernels::internal
