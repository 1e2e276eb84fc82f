#include "engine/base/float16.h"

#include <cstring>

namespace quill::engine {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in f32.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // inf / nan (payload kept)
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToFp16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t a = bits & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return sign | 0x7c00;
    return static_cast<uint16_t>(sign | 0x7e00 | ((a >> 13) & 0x3ff));  // quiet nan
  }
  if (a >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf
  const uint32_t exp = a >> 23;
  if (exp < 113) {
    // Result is an fp16 subnormal (or zero): round(value / 2^-24) to nearest even.
    if (exp == 0) return sign;  // f32 subnormals are far below fp16's range
    const uint32_t m = (a & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;  // >= 14
    if (shift > 24) return sign;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((exp - 112) << 10) | ((a >> 13) & 0x3ff);
  const uint32_t rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

float Bf16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBf16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040);  // quiet nan
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace quill::engine
