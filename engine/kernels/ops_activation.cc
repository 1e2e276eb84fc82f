// Activations: SwiGLU, GEGLU and GELU (tanh form), and soft-capping. Element-wise, so a
// row's result never depends on the batch; AVX-512 or portable.
#include <cmath>
#include <cstdint>

#include "engine/kernels/ops.h"
#include "engine/kernels/ops_internal.h"
#include "engine/kernels/parallel_for.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

using internal::Exp512;
using internal::kParallelFloats;
using internal::TailMask;
using internal::Tanh512;
using internal::UseAvx512;

// 2 * sqrt(2 / pi) and 2 * sqrt(2 / pi) * 0.044715: gelu(x) = x / (1 + exp(-x (k1 + k3 x^2))).
constexpr float kGeluK1 = 1.5957691216057308f;
constexpr float kGeluK3 = 0.07135481627159283f;

// ---- AVX-512 ----

QUILL_AVX512_TARGET inline __m512 Silu512(__m512 g) {
  const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

QUILL_AVX512_TARGET inline __m512 Gelu512(__m512 x) {
  const __m512 u = _mm512_mul_ps(
      x, _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(kGeluK3), _mm512_set1_ps(kGeluK1)));
  const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), u));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

template <bool kGelu>
QUILL_AVX512_TARGET void GatedRowAvx512(const float* gate, const float* up, int ffn, float* out) {
  for (int j = 0; j < ffn; j += 16) {
    const __mmask16 m = TailMask(ffn - j);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + j);
    const __m512 a = kGelu ? Gelu512(g) : Silu512(g);
    _mm512_mask_storeu_ps(out + j, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + j)));
  }
}

QUILL_AVX512_TARGET void GeluAvx512(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(static_cast<int>(n - i < 16 ? n - i : 16));
    _mm512_mask_storeu_ps(out + i, m, Gelu512(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

QUILL_AVX512_TARGET void SoftCapAvx512(float* x, int64_t n, float cap) {
  const __m512 vcap = _mm512_set1_ps(cap);
  const __m512 inv = _mm512_set1_ps(1.0f / cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(static_cast<int>(n - i < 16 ? n - i : 16));
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(vcap, Tanh512(_mm512_mul_ps(v, inv))));
  }
}

// ---- Portable ----

inline float SiluScalar(float g) { return g / (1.0f + std::exp(-g)); }

inline float GeluScalar(float x) {
  const float u = x * std::fma(x * x, kGeluK3, kGeluK1);
  return x / (1.0f + std::exp(-u));
}

template <bool kGelu>
void GatedRowPortable(const float* gate, const float* up, int ffn, float* out) {
  for (int j = 0; j < ffn; ++j)
    out[j] = (kGelu ? GeluScalar(gate[j]) : SiluScalar(gate[j])) * up[j];
}

template <bool kGelu>
void GatedRows(const float* gate_up, int rows, int ffn, float* out) {
  const bool avx512 = UseAvx512();
  ParallelFor(rows, int64_t{rows} * ffn >= kParallelFloats && rows > 1, [&](int64_t r) {
    const float* gate = gate_up + r * 2 * ffn;
    float* o = out + r * ffn;
    if (avx512) {
      GatedRowAvx512<kGelu>(gate, gate + ffn, ffn, o);
    } else {
      GatedRowPortable<kGelu>(gate, gate + ffn, ffn, o);
    }
  });
}

}  // namespace

void SwiGlu(const float* gate_up, int rows, int ffn, float* out) {
  GatedRows<false>(gate_up, rows, ffn, out);
}

void GeGlu(const float* gate_up, int rows, int ffn, float* out) {
  GatedRows<true>(gate_up, rows, ffn, out);
}

void Gelu(const float* x, int64_t n, float* out) {
  const bool avx512 = UseAvx512();
  ForChunks(n, n >= kParallelFloats, [&](int64_t begin, int64_t count) {
    if (avx512) {
      GeluAvx512(x + begin, count, out + begin);
    } else {
      for (int64_t i = begin; i < begin + count; ++i) out[i] = GeluScalar(x[i]);
    }
  });
}

void SoftCap(float* x, int64_t n, float cap) {
  const bool avx512 = UseAvx512();
  ForChunks(n, n >= kParallelFloats, [&](int64_t begin, int64_t count) {
    if (avx512) {
      SoftCapAvx512(x + begin, count, cap);
    } else {
      for (int64_t i = begin; i < begin + count; ++i) x[i] = cap * std::tanh(x[i] / cap);
    }
  });
}

}  // namespace quill::engine::kernels
