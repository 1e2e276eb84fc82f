#include "engine/gguf/tensor_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace quill::engine {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Shifts `m` right by `shift` (1..31) rounding to nearest, ties to even.
uint32_t ShiftRoundEven(uint32_t m, int shift) {
  const uint32_t result = m >> shift;
  const uint32_t rem = m & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  return (rem > half || (rem == half && (result & 1))) ? result + 1 : result;
}

}  // namespace

uint16_t FloatToF16(float value) {
  const uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x1FF);  // NaN
  if (abs >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds to infinity
  if (abs >= 0x38800000) {                      // normal half (>= 2^-14)
    // Rebias the exponent (127 -> 15); a mantissa carry correctly bumps the exponent.
    return sign | static_cast<uint16_t>(ShiftRoundEven(abs - 0x38000000, 13));
  }
  if (abs <= 0x33000000) return sign;  // <= 2^-25 rounds to zero
  // Subnormal half: units of 2^-24.
  const int exponent = static_cast<int>(abs >> 23);
  const uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
  return sign | static_cast<uint16_t>(ShiftRoundEven(mantissa, 126 - exponent));
}

float F16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return BitsFloat(sign | 0x7F800000 | (mantissa << 13));
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

uint16_t FloatToBf16(float value) {
  const uint32_t x = FloatBits(value);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

float Bf16ToFloat(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

absl::Status EncodeTensor(absl::Span<const float> values, GgmlType type,
                          std::vector<uint8_t>* out) {
  const size_t start = out->size();
  switch (type) {
    case GgmlType::kF32:
      out->resize(start + values.size() * 4);
      if (!values.empty()) std::memcpy(out->data() + start, values.data(), values.size() * 4);
      return absl::OkStatus();
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      out->resize(start + values.size() * 2);
      uint8_t* p = out->data() + start;
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t bits =
            type == GgmlType::kF16 ? FloatToF16(values[i]) : FloatToBf16(values[i]);
        std::memcpy(p + 2 * i, &bits, 2);
      }
      return absl::OkStatus();
    }
    case GgmlType::kQ8_0: {
      if (values.size() % kQ8_0BlockElements != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Q8_0 needs a multiple of ", kQ8_0BlockElements, " values, got ", values.size()));
      }
      const size_t blocks = values.size() / kQ8_0BlockElements;
      out->resize(start + blocks * kQ8_0BlockBytes);
      uint8_t* p = out->data() + start;
      for (size_t b = 0; b < blocks; ++b, p += kQ8_0BlockBytes) {
        const float* x = values.data() + b * kQ8_0BlockElements;
        float amax = 0.0f;
        for (int i = 0; i < kQ8_0BlockElements; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float scale = amax / 127.0f;
        const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
        const uint16_t scale_bits = FloatToF16(scale);
        std::memcpy(p, &scale_bits, 2);
        for (int i = 0; i < kQ8_0BlockElements; ++i) {
          const float q = std::round(x[i] * inverse);
          p[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
        }
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot encode tensors of type ", GgmlTypeName(type),
                       " (supported: F32, F16, BF16, Q8_0)"));
  }
}

}  // namespace quill::engine
