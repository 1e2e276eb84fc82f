#include "engine/gguf/tensor_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace quill::engine {

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
            type == GgmlType::kF16 ? FloatToFp16(values[i]) : FloatToBf16(values[i]);
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
        const uint16_t scale_bits = FloatToFp16(scale);
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
