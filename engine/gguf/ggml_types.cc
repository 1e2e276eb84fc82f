#include "engine/gguf/ggml_types.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quill::engine {
namespace {

struct TypeRow {
  GgmlType type;
  const char* name;
  int64_t block_elements;
  int64_t block_bytes;
};

// Block sizes of the standard ggml types (ggml-common.h layouts).
constexpr TypeRow kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},   {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},   {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},   {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},  {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144}, {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210}, {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kI8, "I8", 1, 1},         {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},       {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},       {GgmlType::kBF16, "BF16", 1, 2},
};

const TypeRow* FindRow(uint32_t raw_type) {
  for (const TypeRow& row : kTypes) {
    if (static_cast<uint32_t>(row.type) == raw_type) return &row;
  }
  return nullptr;
}

}  // namespace

std::string GgmlTypeName(GgmlType type) {
  const TypeRow* row = FindRow(static_cast<uint32_t>(type));
  if (row == nullptr) return absl::StrCat("unknown(", static_cast<uint32_t>(type), ")");
  return row->name;
}

bool LookupGgmlType(uint32_t raw_type, GgmlTypeTraits* traits) {
  const TypeRow* row = FindRow(raw_type);
  if (row == nullptr) return false;
  traits->block_elements = row->block_elements;
  traits->block_bytes = row->block_bytes;
  return true;
}

bool ToQuantType(GgmlType type, quant::QuantType* out) {
  switch (type) {
    case GgmlType::kQ4_0:
      *out = quant::QuantType::kQ4_0;
      return true;
    case GgmlType::kQ4_1:
      *out = quant::QuantType::kQ4_1;
      return true;
    case GgmlType::kQ5_0:
      *out = quant::QuantType::kQ5_0;
      return true;
    case GgmlType::kQ5_1:
      *out = quant::QuantType::kQ5_1;
      return true;
    case GgmlType::kQ8_0:
      *out = quant::QuantType::kQ8_0;
      return true;
    case GgmlType::kQ4_K:
      *out = quant::QuantType::kQ4_K;
      return true;
    case GgmlType::kQ5_K:
      *out = quant::QuantType::kQ5_K;
      return true;
    case GgmlType::kQ6_K:
      *out = quant::QuantType::kQ6_K;
      return true;
    default:
      return false;
  }
}

absl::StatusOr<GgmlTensorSize> ComputeGgmlTensorSize(GgmlType type,
                                                     const std::vector<int64_t>& dims) {
  GgmlTypeTraits traits;
  if (!LookupGgmlType(static_cast<uint32_t>(type), &traits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tensor type ", static_cast<uint32_t>(type)));
  }
  if (dims.empty() || dims.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor has ", dims.size(), " dimensions (must be 1..4)"));
  }
  int64_t elements = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", i, " is ", dims[i], " (must be positive); dims {",
          absl::StrJoin(dims, ", "), "}"));
    }
    if (elements > std::numeric_limits<int64_t>::max() / dims[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "element count of dims {", absl::StrJoin(dims, ", "), "} overflows int64"));
    }
    elements *= dims[i];
  }
  if (dims[0] % traits.block_elements != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "innermost dimension ", dims[0], " is not a multiple of the ", GgmlTypeName(type),
        " block size ", traits.block_elements));
  }
  const int64_t blocks = elements / traits.block_elements;
  if (blocks > std::numeric_limits<int64_t>::max() / traits.block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte size of dims {", absl::StrJoin(dims, ", "), "} overflows int64"));
  }
  GgmlTensorSize size;
  size.num_elements = elements;
  size.size_bytes = static_cast<uint64_t>(blocks * traits.block_bytes);
  return size;
}

}  // namespace quill::engine
