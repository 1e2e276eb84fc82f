// RmsNorm and LayerNorm: one row at a time, reductions in a fixed order (so a row's result
// never depends on the batch), AVX-512 or portable.
#include <cmath>
#include <cstdint>

#include "engine/kernels/ops.h"
#include "engine/kernels/ops_internal.h"
#include "engine/kernels/parallel_for.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

using internal::kParallelFloats;
using internal::ReduceAdd512;
using internal::TailMask;
using internal::UseAvx512;

// sum((x[i] - center)^2) with four accumulators over 64-float strides, then the tail.
QUILL_AVX512_TARGET float SumSquaresAvx512(const float* x, float center, int dim) {
  const __m512 c = _mm512_set1_ps(center);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int i = 0;
  for (; i + 64 <= dim; i += 64) {
    for (int a = 0; a < 4; ++a) {
      const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16 * a), c);
      acc[a] = _mm512_fmadd_ps(v, v, acc[a]);
    }
  }
  for (; i < dim; i += 16) {
    const __mmask16 m = TailMask(dim - i);
    const __m512 v = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), c);
    acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
  }
  return ReduceAdd512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// sum(x[i]), the same order.
QUILL_AVX512_TARGET float SumAvx512(const float* x, int dim) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int i = 0;
  for (; i + 64 <= dim; i += 64) {
    for (int a = 0; a < 4; ++a) acc[a] = _mm512_add_ps(acc[a], _mm512_loadu_ps(x + i + 16 * a));
  }
  for (; i < dim; i += 16) {
    acc[0] = _mm512_add_ps(acc[0], _mm512_maskz_loadu_ps(TailMask(dim - i), x + i));
  }
  return ReduceAdd512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// out = (x - center) * s * w (+ b).
QUILL_AVX512_TARGET void ScaleRowAvx512(const float* x, float center, const float* w,
                                        const float* b, float s, int dim, float* out) {
  const __m512 vs = _mm512_set1_ps(s);
  const __m512 c = _mm512_set1_ps(center);
  for (int i = 0; i < dim; i += 16) {
    const __mmask16 m = TailMask(dim - i);
    const __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), c), vs);
    __m512 y = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
    if (b != nullptr) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, b + i));
    _mm512_mask_storeu_ps(out + i, m, y);
  }
}

// 16 partial sums reduced in a fixed order, like the AVX-512 path.
float SumSquaresPortable(const float* x, float center, int dim) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= dim; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += (x[i + l] - center) * (x[i + l] - center);
  }
  for (int l = 0; i < dim; ++i, ++l) acc[l] += (x[i] - center) * (x[i] - center);
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

float SumPortable(const float* x, int dim) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= dim; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l];
  }
  for (int l = 0; i < dim; ++i, ++l) acc[l] += x[i];
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

// One row of either norm: RMSNorm is LayerNorm without centring and without bias.
void NormRow(const float* x, const float* weight, const float* bias, bool center, int dim,
             float eps, float* out, bool avx512) {
  const float n = static_cast<float>(dim);
  float mean = 0.0f;
  if (center) mean = (avx512 ? SumAvx512(x, dim) : SumPortable(x, dim)) / n;
  const float sum = avx512 ? SumSquaresAvx512(x, mean, dim) : SumSquaresPortable(x, mean, dim);
  const float scale = 1.0f / std::sqrt(sum / n + eps);
  if (avx512) {
    ScaleRowAvx512(x, mean, weight, bias, scale, dim, out);
  } else {
    for (int i = 0; i < dim; ++i) {
      const float y = ((x[i] - mean) * scale) * weight[i];
      out[i] = bias != nullptr ? y + bias[i] : y;
    }
  }
}

void NormRows(const float* x, const float* weight, const float* bias, bool center, int rows,
              int dim, float eps, float* out) {
  const bool avx512 = UseAvx512();
  ParallelFor(rows, int64_t{rows} * dim >= kParallelFloats && rows > 1, [&](int64_t r) {
    NormRow(x + r * dim, weight, bias, center, dim, eps, out + r * dim, avx512);
  });
}

}  // namespace

void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) {
  NormRows(x, weight, nullptr, /*center=*/false, rows, dim, eps, out);
}

void LayerNorm(const float* x, const float* weight, const float* bias, int rows, int dim, float eps,
               float* out) {
  NormRows(x, weight, bias, /*center=*/true, rows, dim, eps, out);
}

}  // namespace quill::engine::kernels
