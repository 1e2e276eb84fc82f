#include "engine/gguf/tensor_encode.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/gguf/ggml_types.h"
#include "engine/quant/quantize.h"

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
    default:
      break;
  }
  quant::QuantType qtype;
  if (!ToQuantType(type, &qtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot encode tensors of type ", GgmlTypeName(type),
        " (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)"));
  }
  const int64_t block = quant::BlockElements(qtype);
  if (values.size() % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(quant::QuantTypeName(qtype),
                                                   " needs a multiple of ", block, " values, got ",
                                                   values.size()));
  }
  const int64_t blocks = static_cast<int64_t>(values.size()) / block;
  out->resize(start + blocks * quant::BlockBytes(qtype));
  const absl::Status status = quant::Quantize(qtype, values.data(), blocks, out->data() + start);
  if (!status.ok()) out->resize(start);
  return status;
}
}  // namespace quill::engine
