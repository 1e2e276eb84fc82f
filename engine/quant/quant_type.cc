#include "engine/quant/quant_type.h"

namespace quill::engine::quant {

int BlockElements(QuantType type) {
  switch (type) {
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
      return kSuperBlock;
    default:
      return 32;
  }
}

int BlockBytes(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
      return 18;
    case QuantType::kQ4_1:
      return 20;
    case QuantType::kQ5_0:
      return 22;
    case QuantType::kQ5_1:
      return 24;
    case QuantType::kQ8_0:
      return 34;
    case QuantType::kQ4_K:
      return 144;
    case QuantType::kQ5_K:
      return 176;
    case QuantType::kQ6_K:
      return 210;
  }
  return 0;
}

const char* QuantTypeName(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
      return "Q4_0";
    case QuantType::kQ4_1:
      return "Q4_1";
    case QuantType::kQ5_0:
      return "Q5_0";
    case QuantType::kQ5_1:
      return "Q5_1";
    case QuantType::kQ8_0:
      return "Q8_0";
    case QuantType::kQ4_K:
      return "Q4_K";
    case QuantType::kQ5_K:
      return "Q5_K";
    case QuantType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

}  // namespace quill::engine::quant
