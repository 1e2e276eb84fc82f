#include "engine/kernels/ops.h"

#include <cmath>
#include <cstdint>

#include "engine/base/check.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

using internal::Exp512;
using internal::ReduceAdd512;
using internal::TailMask;
using internal::UseAvx512;

// Below this many floats a call is too small to pay for waking the OpenMP pool.
constexpr int64_t kParallelFloats = int64_t{1} << 15;
// The largest rope_dim supported (the cos/sin table of a row lives on the stack).
constexpr int kMaxRopeDim = 1024;

// ---- RmsNorm ----------------------------------------------------------------------------

QUILL_AVX512_TARGET float SumSquaresAvx512(const float* x, int dim) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int i = 0;
  for (; i + 64 <= dim; i += 64) {
    for (int a = 0; a < 4; ++a) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * a);
      acc[a] = _mm512_fmadd_ps(v, v, acc[a]);
    }
  }
  for (; i < dim; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(dim - i), x + i);
    acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
  }
  return ReduceAdd512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

QUILL_AVX512_TARGET void ScaleRowAvx512(const float* x, const float* w, float s, int dim,
                                        float* out) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int i = 0; i < dim; i += 16) {
    const __mmask16 m = TailMask(dim - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
}

float SumSquaresPortable(const float* x, int dim) {
  // 16 partial sums, reduced in a fixed order, like the AVX-512 path.
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= dim; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l] * x[i + l];
  }
  for (int l = 0; i < dim; ++i, ++l) acc[l] += x[i] * x[i];
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

void RmsNormRow(const float* x, const float* weight, int dim, float eps, float* out,
                bool avx512) {
  const float sum = avx512 ? SumSquaresAvx512(x, dim) : SumSquaresPortable(x, dim);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
  if (avx512) {
    ScaleRowAvx512(x, weight, scale, dim, out);
  } else {
    for (int i = 0; i < dim; ++i) out[i] = (x[i] * scale) * weight[i];
  }
}

// ---- SwiGlu -----------------------------------------------------------------------------

QUILL_AVX512_TARGET void SwiGluRowAvx512(const float* gate, const float* up, int ffn,
                                         float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int j = 0; j < ffn; j += 16) {
    const __mmask16 m = TailMask(ffn - j);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + j);
    const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + j, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + j)));
  }
}

void SwiGluRowPortable(const float* gate, const float* up, int ffn, float* out) {
  for (int j = 0; j < ffn; ++j) {
    const float g = gate[j];
    out[j] = g / (1.0f + std::exp(-g)) * up[j];
  }
}

// ---- Rope -------------------------------------------------------------------------------

// inv_freq[i] = 1 / base^(2i / rope_dim), each step in float32: the recipe the golden
// references used (PyTorch float32 `1 / base ** (arange(0, dim, 2) / dim)`).
void InvFreq(int rope_dim, float freq_base, float* inv_freq) {
  for (int i = 0; i < rope_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    inv_freq[i] = 1.0f / std::pow(freq_base, exponent);
  }
}

void RopeRow(float* x, int32_t pos, int n_heads, int head_dim, int rope_dim,
             const float* inv_freq) {
  const int half = rope_dim / 2;
  float cos_t[kMaxRopeDim / 2];
  float sin_t[kMaxRopeDim / 2];
  for (int i = 0; i < half; ++i) {
    // The angle is rounded to float32 before cos/sin, as in the reference recipe.
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cos_t[i] = std::cos(angle);
    sin_t[i] = std::sin(angle);
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float x0 = v[2 * i];
      const float x1 = v[2 * i + 1];
      v[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
      v[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

}  // namespace

void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) {
  const bool avx512 = UseAvx512();
#pragma omp parallel for schedule(static) if (int64_t{rows} * dim >= kParallelFloats && rows > 1)
  for (int r = 0; r < rows; ++r) {
    const int64_t offset = static_cast<int64_t>(r) * dim;
    RmsNormRow(x + offset, weight, dim, eps, out + offset, avx512);
  }
}

void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          int rope_dim, float freq_base) {
  QUILL_CHECK(rope_dim >= 0 && rope_dim <= head_dim && rope_dim <= kMaxRopeDim &&
              rope_dim % 2 == 0);
  float inv_freq[kMaxRopeDim / 2];
  InvFreq(rope_dim, freq_base, inv_freq);
  const int64_t row_floats = static_cast<int64_t>(n_heads) * head_dim;
  // cos/sin dominate the cost: parallel once a call has a few thousand of them.
#pragma omp parallel for schedule(static) if (int64_t{rows} * rope_dim >= 4096 && rows > 1)
  for (int r = 0; r < rows; ++r) {
    RopeRow(x + r * row_floats, positions[r], n_heads, head_dim, rope_dim, inv_freq);
  }
}

void SwiGlu(const float* gate_up, int rows, int ffn, float* out) {
  const bool avx512 = UseAvx512();
#pragma omp parallel for schedule(static) if (int64_t{rows} * ffn >= kParallelFloats && rows > 1)
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up + static_cast<int64_t>(r) * 2 * ffn;
    float* o = out + static_cast<int64_t>(r) * ffn;
    if (avx512) {
      SwiGluRowAvx512(gate, gate + ffn, ffn, o);
    } else {
      SwiGluRowPortable(gate, gate + ffn, ffn, o);
    }
  }
}

void AddInPlace(float* out, const float* x, int64_t n) {
  // Element-wise, so splitting across threads cannot change any result.
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelFloats)
  for (int64_t i = 0; i < n; ++i) out[i] += x[i];
}

}  // namespace quill::engine::kernels
