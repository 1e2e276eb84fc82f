#include "engine/kernels/kv_element.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/base/float16.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

constexpr float kF16Max = 65504.0f;

inline uint16_t ToF16(float x) {
  return FloatToFp16(x != x ? x : std::clamp(x, -kF16Max, kF16Max));
}

QUILL_AVX512_TARGET void StoreF16Avx512(const float* row, int64_t n, uint16_t* out) {
  const __m512 lo = _mm512_set1_ps(-kF16Max), hi = _mm512_set1_ps(kF16Max);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = internal::TailMask(static_cast<int>(std::min<int64_t>(16, n - i)));
    // max/min return their second operand for NaN: clamp with x second so NaN stays NaN.
    const __m512 x = _mm512_maskz_loadu_ps(m, row + i);
    const __m512 clamped = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtps_ph(clamped, _MM_FROUND_TO_NEAREST_INT));
  }
}

}  // namespace

void StoreKvRow(const float* row, int64_t n, KvElement element, void* arena, int64_t offset) {
  if (element == KvElement::kF32) {
    std::memcpy(static_cast<float*>(arena) + offset, row, n * sizeof(float));
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(arena) + offset;
  if (internal::UseAvx512()) {
    StoreF16Avx512(row, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = ToF16(row[i]);
}

void StoreKvStrided(const float* row, int64_t n, KvElement element, void* arena, int64_t offset,
                    int64_t stride) {
  if (element == KvElement::kF32) {
    float* out = static_cast<float*>(arena) + offset;
    for (int64_t i = 0; i < n; ++i) out[i * stride] = row[i];
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(arena) + offset;
  if (internal::UseAvx512()) {
    // Converted 16 at a time as StoreKvRow does, then scattered.
    uint16_t halves[16];
    for (int64_t i = 0; i < n; i += 16) {
      const int64_t len = std::min<int64_t>(16, n - i);
      StoreF16Avx512(row + i, len, halves);
      for (int64_t j = 0; j < len; ++j) out[(i + j) * stride] = halves[j];
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i * stride] = ToF16(row[i]);
}

}  // namespace quill::engine::kernels
