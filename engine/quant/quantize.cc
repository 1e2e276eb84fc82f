// Quantize(): dispatch, input checks and the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0). Compiled with -ffp-contract=off: the rounding must be what the expressions say.

#include "engine/quant/quantize.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/float16.h"
#include "engine/quant/block_layout.h"

namespace quill::engine::quant {
namespace {

// The value of largest magnitude (the first one on ties), sign kept.
float SignedAbsMax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Q4_0 (levels 16, offset 8) and Q5_0 (levels 32, offset 16): x = d * (q - offset).
void QuantizeSymmetric(QuantType type, const float* x, int levels, uint8_t* block) {
  const float half = static_cast<float>(levels / 2);
  const float d = SignedAbsMax(x) / -half;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(block, FloatToFp16(d));
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    // Truncation of a non-negative value: x * id lies in [-half, half].
    const int v = static_cast<int>(x[j] * id + (half + 0.5f));
    q[j] = static_cast<uint8_t>(std::clamp(v, 0, levels - 1));
  }
  PackQuants(type, q, block);
}

// Q4_1 (levels 16) and Q5_1 (levels 32): x = d * q + m.
void QuantizeWithMin(QuantType type, const float* x, int levels, uint8_t* block) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / static_cast<float>(levels - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(block, FloatToFp16(d));
  StoreU16(block + 2, FloatToFp16(min));
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    const int v = static_cast<int>((x[j] - min) * id + 0.5f);
    q[j] = static_cast<uint8_t>(std::clamp(v, 0, levels - 1));
  }
  PackQuants(type, q, block);
}

void QuantizeQ8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(block, FloatToFp16(d));
  for (int j = 0; j < 32; ++j) {
    const float v = std::clamp(std::round(x[j] * id), -127.0f, 127.0f);
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
}

void QuantizeBlock(QuantType type, const float* x, uint8_t* block) {
  switch (type) {
    case QuantType::kQ4_0:
      return QuantizeSymmetric(type, x, 16, block);
    case QuantType::kQ5_0:
      return QuantizeSymmetric(type, x, 32, block);
    case QuantType::kQ4_1:
      return QuantizeWithMin(type, x, 16, block);
    case QuantType::kQ5_1:
      return QuantizeWithMin(type, x, 32, block);
    case QuantType::kQ8_0:
      return QuantizeQ8_0(x, block);
    case QuantType::kQ4_K:
      internal::QuantizeBlockQ4K(x, block);
      break;
    case QuantType::kQ5_K:
      internal::QuantizeBlockQ5K(x, block);
      break;
    case QuantType::kQ6_K:
      internal::QuantizeBlockQ6K(x, block);
      break;
  }
  internal::RepairExact(type, x, block);
}

}  // namespace

namespace internal {

int NearestInt(float v) {
  if (!(std::fabs(v) < 1e9f)) return std::isnan(v) ? 0 : (v > 0 ? 1000000000 : -1000000000);
  return static_cast<int>(std::nearbyint(v));
}

}  // namespace internal

absl::Status Quantize(QuantType type, const float* x, int64_t blocks, uint8_t* out) {
  const int elements = BlockElements(type);
  const int bytes = BlockBytes(type);
  for (int64_t i = 0; i < blocks * elements; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat("cannot quantize value ", x[i], " at index ",
                                                     i, " to ", QuantTypeName(type),
                                                     " (not finite)"));
    }
  }
  // Blocks are independent: the k-quant searches are slow enough to use every core.
#pragma omp parallel for schedule(dynamic, 64) if (blocks >= 256)
  for (int64_t b = 0; b < blocks; ++b) QuantizeBlock(type, x + b * elements, out + b * bytes);
  return absl::OkStatus();
}

}  // namespace quill::engine::quant
