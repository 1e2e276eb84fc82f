#include "engine/kernels/kv_element.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/base/check.h"
#include "engine/base/float16.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

constexpr float kF16Max = 65504.0f;
// A q8 row whose largest magnitude is below this stores as zeros: 127 / max|x| would
// overflow to infinity near 3.7e-37 (and such values change no score).
constexpr float kQ8Tiny = 1e-30f;

inline uint16_t ToF16(float x) {
  return FloatToFp16(x != x ? x : std::clamp(x, -kF16Max, kF16Max));
}

// bf16's largest finite value (0x7f7f): a float beyond it would round to infinity.
constexpr float kBf16Max = 3.38953139e38f;

inline uint16_t ToBf16(float x) {
  return FloatToBf16(x != x ? x : std::clamp(x, -kBf16Max, kBf16Max));
}

// A bf16 cache's key and value rows (KvLayout): a key's dimension pairs are one 32-bit word
// each, block_size words apart; a value's dimensions are 2 elements apart, beside the value
// of the pair's other slot. A few dozen scalar conversions per token and KV head.
void StoreKeyBf16(const float* row, const KvLayout& layout, void* k_arena, int64_t slot, int kv) {
  QUILL_CHECK(layout.head_dim % 2 == 0 && layout.block_size % 2 == 0);
  uint16_t* key = static_cast<uint16_t*>(k_arena) + layout.KeyIndex(slot, kv, 0);
  for (int d = 0; d < layout.head_dim; d += 2) {
    key[0] = ToBf16(row[d]);
    key[1] = ToBf16(row[d + 1]);
    key += int64_t{layout.block_size} * 2;
  }
}

void StoreValueBf16(const float* row, const KvLayout& layout, void* v_arena, int64_t slot, int kv) {
  QUILL_CHECK(layout.head_dim % 2 == 0 && layout.block_size % 2 == 0);
  uint16_t* value = static_cast<uint16_t*>(v_arena) + layout.ValueIndex(slot, kv, 0);
  for (int d = 0; d < layout.head_dim; ++d) value[2 * d] = ToBf16(row[d]);
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

// The q8 code of x for a row whose largest magnitude gives inv = 127 / max|x|: x's
// clamped value times inv, rounded to nearest even (as _mm512_cvtps_epi32 does).
inline int8_t CodeQ8(float x, float inv) {
  return static_cast<int8_t>(std::nearbyint(std::clamp(x, -kF16Max, kF16Max) * inv));
}

QUILL_AVX512_TARGET float QuantizeRowQ8Avx512(const float* x, int64_t n, int8_t* codes) {
  const __m512 lo = _mm512_set1_ps(-kF16Max), hi = _mm512_set1_ps(kF16Max);
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = internal::TailMask(static_cast<int>(std::min<int64_t>(16, n - i)));
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_min_ps(hi, _mm512_max_ps(lo, v))));
  }
  const float max_abs = _mm512_reduce_max_ps(amax);
  if (nan != 0 || max_abs < kQ8Tiny) {
    std::memset(codes, 0, n);
    return nan != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  }
  const __m512 inv = _mm512_set1_ps(127.0f / max_abs);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = internal::TailMask(static_cast<int>(std::min<int64_t>(16, n - i)));
    const __m512 v = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_maskz_loadu_ps(m, x + i)));
    _mm512_mask_cvtsepi32_storeu_epi8(codes + i, m, _mm512_cvtps_epi32(_mm512_mul_ps(v, inv)));
  }
  return max_abs / 127.0f;
}

}  // namespace

float QuantizeRowQ8(const float* x, int64_t n, int8_t* codes) {
  if (internal::UseAvx512()) return QuantizeRowQ8Avx512(x, n, codes);
  float max_abs = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      std::memset(codes, 0, n);
      return std::numeric_limits<float>::quiet_NaN();
    }
    max_abs = std::max(max_abs, std::fabs(std::clamp(x[i], -kF16Max, kF16Max)));
  }
  if (max_abs < kQ8Tiny) {
    std::memset(codes, 0, n);
    return 0.0f;
  }
  const float inv = 127.0f / max_abs;
  for (int64_t i = 0; i < n; ++i) codes[i] = CodeQ8(x[i], inv);
  return max_abs / 127.0f;
}

void StoreKey(const float* row, const KvLayout& layout, void* k_arena, int64_t slot, int kv) {
  const int hd = layout.head_dim;
  if (layout.element == KvElement::kBf16) {
    StoreKeyBf16(row, layout, k_arena, slot, kv);
    return;
  }
  if (layout.element != KvElement::kQ8) {
    StoreKvStrided(row, hd, layout.element, k_arena, layout.KeyIndex(slot, kv, 0),
                   layout.block_size);
    return;
  }
  QUILL_CHECK(hd <= kMaxKvHeadDim && hd % 4 == 0);
  int8_t codes[kMaxKvHeadDim];
  const float scale = QuantizeRowQ8(row, hd, codes);
  uint8_t* arena = static_cast<uint8_t*>(k_arena);
  // Offset binary (code + 128): the VNNI dot product takes its first operand unsigned.
  uint8_t* key = arena + layout.KeyIndex(slot, kv, 0);
  for (int d = 0; d < hd; d += 4) {
    for (int i = 0; i < 4; ++i) key[i] = static_cast<uint8_t>(codes[d + i] + 128);
    key += int64_t{layout.block_size} * 4;
  }
  std::memcpy(arena + layout.ScaleIndex(slot, kv), &scale, sizeof scale);
}

void StoreValue(const float* row, const KvLayout& layout, void* v_arena, int64_t slot, int kv) {
  if (layout.element == KvElement::kBf16) {
    StoreValueBf16(row, layout, v_arena, slot, kv);
    return;
  }
  if (layout.element != KvElement::kQ8) {
    StoreKvRow(row, layout.head_dim, layout.element, v_arena, layout.ValueIndex(slot, kv, 0));
    return;
  }
  uint8_t* arena = static_cast<uint8_t*>(v_arena);
  const float scale = QuantizeRowQ8(
      row, layout.head_dim, reinterpret_cast<int8_t*>(arena + layout.ValueIndex(slot, kv, 0)));
  std::memcpy(arena + layout.ScaleIndex(slot, kv), &scale, sizeof scale);
}

void StoreKvRow(const float* row, int64_t n, KvElement element, void* arena, int64_t offset) {
  QUILL_CHECK(element == KvElement::kF32 || element == KvElement::kF16);
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
  QUILL_CHECK(element == KvElement::kF32 || element == KvElement::kF16);
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
