// Scalar element conversions and row widening (exact), shared by every Linear path.

#include <sys/mman.h>

#include <cstring>

#include "engine/kernels/linear.h"
#include "engine/kernels/linear_internal.h"

namespace quill::engine::kernels {
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

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

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

void DequantizeRow(const WeightView& w, int64_t row, float* out) {
  const int64_t cols = w.cols;
  const uint8_t* base =
      static_cast<const uint8_t*>(w.data) + row * linear_internal::RowBytes(w.type, cols);
  switch (w.type) {
    case WeightType::kF32:
      std::memcpy(out, base, cols * sizeof(float));
      return;
    case WeightType::kF16:
      for (int64_t c = 0; c < cols; ++c) out[c] = Fp16ToFloat(LoadU16(base + 2 * c));
      return;
    case WeightType::kBF16:
      for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToFloat(LoadU16(base + 2 * c));
      return;
    case WeightType::kQ8_0:
      for (int64_t b = 0; b < cols / linear_internal::kQ8BlockSize; ++b) {
        const uint8_t* block = base + b * linear_internal::kQ8BlockBytes;
        const float d = Fp16ToFloat(LoadU16(block));
        const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
        // d (11-bit significand) * q (8 bits) fits f32's 24 bits: exact.
        for (int j = 0; j < linear_internal::kQ8BlockSize; ++j) out[b * 32 + j] = d * q[j];
      }
      return;
  }
}

namespace linear_internal {

void AdviseHugePages(void* p, size_t bytes) {
  const size_t whole = bytes / (size_t{2} << 20) * (size_t{2} << 20);
  if (whole > 0) madvise(p, whole, MADV_HUGEPAGE);  // advisory: failure only costs speed
}

int64_t RowBytes(WeightType type, int64_t cols) {
  switch (type) {
    case WeightType::kF32:
      return cols * 4;
    case WeightType::kF16:
    case WeightType::kBF16:
      return cols * 2;
    case WeightType::kQ8_0:
      return cols / kQ8BlockSize * kQ8BlockBytes;
  }
  return 0;
}

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kF16:
      return "f16";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kQ8_0:
      return "q8_0";
  }
  return "unknown";
}

int64_t TotalRows(absl::Span<const WeightView> parts) {
  int64_t rows = 0;
  for (const WeightView& p : parts) rows += p.rows;
  return rows;
}

void WidenPartsToF32(absl::Span<const WeightView> parts, float* out, int64_t out_stride) {
  int64_t r0 = 0;
  for (const WeightView& p : parts) {
#pragma omp parallel for schedule(static) if (p.rows * p.cols >= (1 << 16))
    for (int64_t r = 0; r < p.rows; ++r) DequantizeRow(p, r, out + (r0 + r) * out_stride);
    r0 += p.rows;
  }
}

void ConvertPartsToBf16(absl::Span<const WeightView> parts, uint16_t* out, int64_t out_stride) {
  int64_t r0 = 0;
  for (const WeightView& p : parts) {
    const bool is_bf16 = p.type == WeightType::kBF16;
#pragma omp parallel if (p.rows * p.cols >= (1 << 16))
    {
      AlignedBuffer<float> row(is_bf16 ? 0 : p.cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < p.rows; ++r) {
        uint16_t* dst = out + (r0 + r) * out_stride;
        if (is_bf16) {
          std::memcpy(dst, static_cast<const uint8_t*>(p.data) + r * p.cols * 2, p.cols * 2);
        } else {
          DequantizeRow(p, r, row.data());
          for (int64_t c = 0; c < p.cols; ++c) dst[c] = FloatToBf16(row.data()[c]);
        }
      }
    }
    r0 += p.rows;
  }
}

}  // namespace linear_internal
}  // namespace quill::engine::kernels
