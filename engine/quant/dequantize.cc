#include "engine/quant/dequantize.h"

#include "engine/base/float16.h"
#include "engine/quant/block_layout.h"

namespace quill::engine::quant {
namespace {

float Half(const uint8_t* p) { return Fp16ToFloat(LoadU16(p)); }

void DequantizeBlock(QuantType type, const uint8_t* block, float* out) {
  uint8_t q[kSuperBlock];
  UnpackQuants(type, block, q);
  const BlockFields f = FieldsOf(type);
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
    case QuantType::kQ8_0: {
      const float d = Half(block + f.d);
      const int offset = type == QuantType::kQ4_0 ? 8 : type == QuantType::kQ5_0 ? 16 : 128;
      for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j] - offset) * d;
      return;
    }
    case QuantType::kQ4_1:
    case QuantType::kQ5_1: {
      const float d = Half(block + f.d);
      const float m = Half(block + f.m);
      for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * d + m;  // d * q exact
      return;
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const float d = Half(block + f.d);
      const float dmin = Half(block + f.m);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        UnpackScaleMin(block + f.scales, j, &sc, &m);
        const float scale = d * static_cast<float>(sc);
        const float min = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l)
          out[32 * j + l] = scale * static_cast<float>(q[32 * j + l]) - min;
      }
      return;
    }
    case QuantType::kQ6_K: {
      const float d = Half(block + f.d);
      const int8_t* sc = reinterpret_cast<const int8_t*>(block + f.scales);
      for (int j = 0; j < 16; ++j) {
        const float scale = d * static_cast<float>(sc[j]);
        for (int l = 0; l < 16; ++l)
          out[16 * j + l] = scale * static_cast<float>(q[16 * j + l] - 32);
      }
      return;
    }
  }
}

}  // namespace

void Dequantize(QuantType type, const uint8_t* src, int64_t blocks, float* out) {
  const int bytes = BlockBytes(type);
  const int elements = BlockElements(type);
  for (int64_t b = 0; b < blocks; ++b) DequantizeBlock(type, src + b * bytes, out + b * elements);
}

}  // namespace quill::engine::quant
