// Linear::Create: validates the parts and picks the exact or fast implementation.

#include "engine/kernels/linear.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/linear_internal.h"

namespace quill::engine::kernels {
namespace {

absl::Status ValidateParts(absl::Span<const WeightView> parts, int max_tokens) {
  if (parts.empty()) return absl::InvalidArgumentError("Linear needs at least one weight part");
  if (max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear max_tokens must be >= 1, got ", max_tokens));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const WeightView& p = parts[i];
    switch (p.type) {
      case WeightType::kF32:
      case WeightType::kF16:
      case WeightType::kBF16:
      case WeightType::kQ8_0:
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("Linear part ", i, ": unknown weight type ", static_cast<int>(p.type)));
    }
    if (p.data == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("Linear part ", i, ": null data"));
    if (p.rows <= 0 || p.cols <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Linear part ", i, ": bad shape ", p.rows, " x ", p.cols));
    }
    if (p.type == WeightType::kQ8_0 && p.cols % linear_internal::kQ8BlockSize != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Linear part ", i, ": q8_0 cols ", p.cols, " not a multiple of 32"));
    }
    if (p.cols != parts[0].cols || p.type != parts[0].type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Linear part ", i, " (", linear_internal::WeightTypeName(p.type), ", cols ", p.cols,
          ") does not match part 0 (", linear_internal::WeightTypeName(parts[0].type), ", cols ",
          parts[0].cols, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(absl::Span<const WeightView> parts,
                                                       Precision precision, int max_tokens) {
  QUILL_RETURN_IF_ERROR(ValidateParts(parts, max_tokens));
  switch (precision) {
    case Precision::kExact:
      return linear_internal::CreateExactLinear(parts, max_tokens);
    case Precision::kFast:
      return linear_internal::CreateFastLinear(parts, max_tokens);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Linear: unknown precision ", static_cast<int>(precision)));
}

}  // namespace quill::engine::kernels
